// SPDX-License-Identifier: GPL-2.0

//! The mock NVIDIA P2P provider: the `nvidia_p2p_*` functions.

use super::*;
use crate::sys;
use core::ptr;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
};

fn create_pin(
    va: u64,
    len: u64,
    free_cb: Option<FreeCb>,
    data: *mut c_void,
    out: *mut *mut sys::nvidia_p2p_page_table,
) -> c_int {
    let made = with(
        |s| -> core::result::Result<*mut sys::nvidia_p2p_page_table, c_int> {
            s.calls.get_pages += 1;
            s.get_pages_seen += 1;
            if let Some((FailOp::GetPages(n), e)) = s.fail {
                if n == s.get_pages_seen {
                    s.fail = None;
                    return Err(e);
                }
            }
            if free_cb.is_none() && !s.persistent_supported {
                return Err(-(bindings::ENOTSUPP as c_int));
            }
            if out.is_null() || len == 0 || va % 0x1_0000 != 0 || len % 0x1_0000 != 0 {
                return Err(-(bindings::EINVAL as c_int));
            }
            if va < GPU_VA || va.saturating_add(len) > GPU_VA + s.gpu_len {
                return Err(-(bindings::EINVAL as c_int));
            }
            let page_bytes: u64 = match s.page_size_type {
                0 => 0x1000,
                2 => 0x2_0000,
                _ => 0x1_0000,
            };
            let entries = len.div_ceil(page_bytes) as usize;
            let mut pages = KVec::with_capacity(entries, GFP_KERNEL).map_err(|_| -12)?;
            for i in 0..entries {
                let page = sys::nvidia_p2p_page {
                    physical_address: DMA_BASE + (va - GPU_VA) + i as u64 * page_bytes,
                    ..Default::default()
                };
                pages.push(page, GFP_KERNEL).map_err(|_| -12)?;
            }
            let mut pin = KBox::new(
                MockPin {
                    pt: sys::nvidia_p2p_page_table {
                        version: s.pt_version,
                        page_size: s.page_size_type,
                        pages: ptr::null_mut(),
                        entries: entries as u32,
                        gpu_uuid: ptr::null_mut(),
                        // `flags` (with a header that has it) below.
                        ..Default::default()
                    },
                    pt_tail: [0; PT_TAIL],
                    pages,
                    page_ptrs: KVec::new(),
                    va,
                    persistent: free_cb.is_none(),
                    dead: false,
                    free_cb,
                    data,
                },
                GFP_KERNEL,
            )
            .map_err(|_| -12)?;
            for i in 0..entries {
                let p = &raw mut pin.pages[i];
                pin.page_ptrs.push(p, GFP_KERNEL).map_err(|_| -12)?;
            }
            pin.pt.pages = pin.page_ptrs.as_mut_ptr();
            let pin_ptr: *mut MockPin = &raw mut *pin;
            // Written whatever the version: a client must not read it from a
            // version-1 page table.
            // SAFETY: `MockPin` is `#[repr(C)]` with `pt` then `pt_tail`
            // first, 40 bytes from its 8-byte aligned start; the flags word
            // (4 bytes at `PAGE_TABLE_FLAGS_OFFSET`, 32) lies within them.
            unsafe {
                pin_ptr
                    .cast::<u8>()
                    .add(crate::p2p::PAGE_TABLE_FLAGS_OFFSET)
                    .cast::<u32>()
                    .write(s.pt_flags)
            };
            let pt = pin_ptr.cast::<sys::nvidia_p2p_page_table>();
            s.pins.push(Some(pin), GFP_KERNEL).map_err(|_| -12)?;
            Ok(pt)
        },
    );
    match made {
        Ok(pt) => {
            let pt = if with(|s| s.null_page_table) {
                ptr::null_mut()
            } else {
                pt
            };
            // SAFETY: `out` was checked non-null; the caller's out-pointer.
            unsafe { *out = pt };
            if free_cb.is_some() && with(|s| s.fire_on_pin) {
                // The memory is freed right after the pin, before the
                // client has even seen the page table.
                cuda_free();
            }
            0
        }
        Err(e) => e,
    }
}

fn destroy_pin(va: u64, pt: *mut sys::nvidia_p2p_page_table, persistent: bool) -> c_int {
    with(|s| {
        s.calls.put_pages += 1;
        if let Some(e) = s.fail(FailOp::PutPages) {
            return e;
        }
        let Some(i) = s
            .pins
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| ptr::eq(&p.pt, pt)))
        else {
            return -(bindings::EINVAL as c_int);
        };
        match &s.pins[i] {
            Some(p) if !p.dead && p.va == va && p.persistent == persistent => {}
            // As the driver (docs/contract.md, nv-p2p.c since 515.43.04): the free
            // callback unlinked the page table, and a put that finds it
            // gone returns 0 (NV_ERR_OBJECT_NOT_FOUND mapped to success)
            // without touching it; the client still frees it.
            Some(p) if p.dead && !persistent => return 0,
            _ => return -(bindings::EINVAL as c_int),
        }
        // Mappings left on the pin go with it.
        let pin_ptr: *const MockPin = s.pins[i].as_deref().map_or(ptr::null(), |p| p);
        for m in s.maps.iter_mut() {
            if m.as_ref()
                .is_some_and(|m| ptr::eq(m.pin.cast_const(), pin_ptr))
            {
                *m = None;
            }
        }
        s.pins[i] = None;
        0
    })
}

/// # Safety
///
/// Called by the product code as the C function of the same name.
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_get_pages(
    p2p_token: u64,
    va_space: u32,
    virtual_address: u64,
    length: u64,
    page_table: *mut *mut sys::nvidia_p2p_page_table,
    free_callback: Option<FreeCb>,
    data: *mut c_void,
) -> c_int {
    if p2p_token != 0 || va_space != 0 || free_callback.is_none() {
        return -(bindings::EINVAL as c_int);
    }
    create_pin(virtual_address, length, free_callback, data, page_table)
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_put_pages(
    p2p_token: u64,
    va_space: u32,
    virtual_address: u64,
    page_table: *mut sys::nvidia_p2p_page_table,
) -> c_int {
    if p2p_token != 0 || va_space != 0 {
        return -(bindings::EINVAL as c_int);
    }
    destroy_pin(virtual_address, page_table, false)
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_get_pages_persistent(
    virtual_address: u64,
    length: u64,
    page_table: *mut *mut sys::nvidia_p2p_page_table,
    flags: u32,
) -> c_int {
    if flags != 0 {
        return -(bindings::EINVAL as c_int);
    }
    create_pin(virtual_address, length, None, ptr::null_mut(), page_table)
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_put_pages_persistent(
    virtual_address: u64,
    page_table: *mut sys::nvidia_p2p_page_table,
    flags: u32,
) -> c_int {
    if flags != 0 {
        return -(bindings::EINVAL as c_int);
    }
    destroy_pin(virtual_address, page_table, true)
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_dma_map_pages(
    peer: *mut bindings::pci_dev,
    page_table: *mut sys::nvidia_p2p_page_table,
    dma_mapping: *mut *mut sys::nvidia_p2p_dma_mapping,
) -> c_int {
    let made = with(
        |s| -> core::result::Result<*mut sys::nvidia_p2p_dma_mapping, c_int> {
            s.calls.dma_map += 1;
            if let Some(e) = s.fail(FailOp::DmaMap) {
                return Err(e);
            }
            if peer.is_null() || dma_mapping.is_null() {
                return Err(-(bindings::EINVAL as c_int));
            }
            let version = s.map_version;
            let stride = s.dma_stride;
            let pin = s.find_pin(page_table).ok_or(-(bindings::EINVAL as c_int))?;
            if pin.dead {
                return Err(-(bindings::EINVAL as c_int));
            }
            let entries = pin.pt.entries;
            let page_size = pin.pt.page_size;
            let first = DMA_BASE + (pin.va - GPU_VA) / 0x1_0000 * stride;
            let pin_ptr: *mut MockPin = &raw mut **pin;
            let mut addresses =
                KVec::with_capacity(entries as usize, GFP_KERNEL).map_err(|_| -12)?;
            for i in 0..u64::from(entries) {
                addresses
                    .push(first + i * stride, GFP_KERNEL)
                    .map_err(|_| -12)?;
            }
            let mut map = KBox::new(
                MockMap {
                    m: sys::nvidia_p2p_dma_mapping {
                        version,
                        page_size_type: page_size,
                        entries,
                        dma_addresses: ptr::null_mut(),
                        private: ptr::null_mut(),
                        pci_dev: peer,
                    },
                    addresses,
                    pin: pin_ptr,
                },
                GFP_KERNEL,
            )
            .map_err(|_| -12)?;
            map.m.dma_addresses = map.addresses.as_mut_ptr();
            let m = &raw mut map.m;
            s.maps.push(Some(map), GFP_KERNEL).map_err(|_| -12)?;
            Ok(m)
        },
    );
    match made {
        Ok(m) => {
            // SAFETY: checked non-null above; the caller's out-pointer.
            unsafe { *dma_mapping = m };
            0
        }
        Err(e) => e,
    }
}

fn take_map(m: *mut sys::nvidia_p2p_dma_mapping, want_dead: bool) -> c_int {
    with(|s| {
        let Some(i) = s
            .maps
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| ptr::eq(&x.m, m)))
        else {
            return -(bindings::EINVAL as c_int);
        };
        let pin = s.maps[i].as_ref().map_or(ptr::null_mut(), |x| x.pin);
        let dead = match s
            .pins
            .iter()
            .flatten()
            .find(|p| ptr::eq(&***p, pin.cast_const()))
        {
            Some(p) => p.dead,
            None => true,
        };
        if dead != want_dead {
            return -(bindings::EINVAL as c_int);
        }
        s.maps[i] = None;
        0
    })
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_dma_unmap_pages(
    peer: *mut bindings::pci_dev,
    _page_table: *mut sys::nvidia_p2p_page_table,
    dma_mapping: *mut sys::nvidia_p2p_dma_mapping,
) -> c_int {
    with(|s| s.calls.dma_unmap += 1);
    if peer.is_null() {
        return -(bindings::EINVAL as c_int);
    }
    take_map(dma_mapping, false)
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_free_page_table(
    page_table: *mut sys::nvidia_p2p_page_table,
) -> c_int {
    with(|s| {
        s.calls.free_page_table += 1;
        let Some(i) = s.pins.iter().position(|p| {
            p.as_ref()
                .is_some_and(|p| ptr::eq(&p.pt, page_table) && p.dead)
        }) else {
            return -(bindings::EINVAL as c_int);
        };
        s.pins[i] = None;
        0
    })
}

/// # Safety
///
/// As [`nvidia_p2p_get_pages`].
#[no_mangle]
pub(crate) unsafe extern "C" fn nvidia_p2p_free_dma_mapping(
    dma_mapping: *mut sys::nvidia_p2p_dma_mapping,
) -> c_int {
    with(|s| s.calls.free_dma_mapping += 1);
    take_map(dma_mapping, true)
}
