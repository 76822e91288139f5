// SPDX-License-Identifier: GPL-2.0

//! A mock NVIDIA P2P provider and PeerDirect core, linked into the KUnit
//! test module only: it defines the `nvidia_p2p_*` and
//! `ib_*register_peer_memory_client` symbols the product code calls, so the
//! test module needs no other module, and it lets tests drive every path
//! (page sizes, versions, failures, free callbacks, invalidation from the
//! core, release during an invalidation).
//!
//! KUnit runs the cases of a suite one after the other on one thread, and
//! the mock is only touched from there; the state is never borrowed across
//! a call into the client (callbacks run after the borrow ends).

use crate::sys;
use core::cell::UnsafeCell;
use core::ptr;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
    prelude::*,
};

/// Start of the mock GPU's virtual addresses.
pub(crate) const GPU_VA: u64 = 0x0000_9000_0000_0000;
/// DMA address of the first GPU page.
pub(crate) const DMA_BASE: u64 = 0x10_0000_0000;

/// How the mock core behaves when the client invalidates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CoreMode {
    /// Marks the MR invalidated, calls nothing (PEER_MEM_INVALIDATE_UNMAPS).
    Unmaps,
    /// Calls dma_unmap and put_pages from inside (legacy/mofed51).
    CallsBack,
    /// Calls release from inside: a deregistration that ran concurrently
    /// and finished while the client's free callback was still running.
    ReleasesInside,
}

type FreeCb = unsafe extern "C" fn(*mut c_void);

/// Bytes of a version-2 page table past the header's struct: none with a
/// header that declares `flags` (580 on, ffi/include), 8 with an older
/// NVIDIA header (NVIDIA_SRC), whose struct ends with `gpu_uuid`.
const PT_TAIL: usize = 40 - core::mem::size_of::<sys::nvidia_p2p_page_table>();

/// A page table handed out. `pt` first: its address is the pin's address.
/// `pt` and `pt_tail` are the 40 bytes a driver allocates for a version-2
/// page table, whichever header this module was built with, so the flags
/// word at `PAGE_TABLE_FLAGS_OFFSET` is inside the pin.
#[repr(C)]
struct MockPin {
    pt: sys::nvidia_p2p_page_table,
    pt_tail: [u8; PT_TAIL],
    pages: KVec<sys::nvidia_p2p_page>,
    page_ptrs: KVec<*mut sys::nvidia_p2p_page>,
    va: u64,
    persistent: bool,
    dead: bool,
    free_cb: Option<FreeCb>,
    data: *mut c_void,
}

/// A DMA mapping handed out. `m` first.
#[repr(C)]
struct MockMap {
    m: sys::nvidia_p2p_dma_mapping,
    addresses: KVec<u64>,
    pin: *mut MockPin,
}

/// Calls into the mock, for the tests' checks.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Calls {
    pub(crate) get_pages: u32,
    pub(crate) put_pages: u32,
    pub(crate) dma_map: u32,
    pub(crate) dma_unmap: u32,
    pub(crate) free_page_table: u32,
    pub(crate) free_dma_mapping: u32,
    pub(crate) invalidate: u32,
    pub(crate) last_ticket: u64,
}

/// Which provider call to fail once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FailOp {
    /// `nvidia_p2p_get_pages[_persistent]`, counting from 1.
    GetPages(u32),
    /// `nvidia_p2p_put_pages[_persistent]`, the next one.
    PutPages,
    /// `nvidia_p2p_dma_map_pages`, the next one.
    DmaMap,
}

struct State {
    gpu_len: u64,
    page_size_type: u32,
    pt_version: u32,
    pt_flags: u32,
    map_version: u32,
    dma_stride: u64,
    fail: Option<(FailOp, c_int)>,
    get_pages_seen: u32,
    fire_on_pin: bool,
    null_page_table: bool,
    persistent_supported: bool,
    pins: KVec<Option<KBox<MockPin>>>,
    maps: KVec<Option<KBox<MockMap>>>,
    calls: Calls,
    core_mode: CoreMode,
    core_client: *const sys::peer_memory_client,
    core_context: *mut c_void,
    registered: u32,
}

impl State {
    const fn new() -> Self {
        Self {
            gpu_len: 0,
            page_size_type: sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB,
            pt_version: sys::NVIDIA_P2P_PAGE_TABLE_VERSION,
            pt_flags: 0,
            map_version: sys::NVIDIA_P2P_DMA_MAPPING_VERSION,
            dma_stride: 0x1_0000,
            fail: None,
            get_pages_seen: 0,
            fire_on_pin: false,
            null_page_table: false,
            persistent_supported: true,
            pins: KVec::new(),
            maps: KVec::new(),
            calls: Calls {
                get_pages: 0,
                put_pages: 0,
                dma_map: 0,
                dma_unmap: 0,
                free_page_table: 0,
                free_dma_mapping: 0,
                invalidate: 0,
                last_ticket: 0,
            },
            core_mode: CoreMode::Unmaps,
            core_client: ptr::null(),
            core_context: ptr::null_mut(),
            registered: 0,
        }
    }

    fn fail(&mut self, op: FailOp) -> Option<c_int> {
        match self.fail {
            Some((f, e)) if f == op => {
                self.fail = None;
                Some(e)
            }
            _ => None,
        }
    }

    fn find_pin(&mut self, pt: *mut sys::nvidia_p2p_page_table) -> Option<&mut KBox<MockPin>> {
        self.pins.iter_mut().flatten().find(|p| ptr::eq(&p.pt, pt))
    }

    fn live_pins(&self) -> usize {
        self.pins.iter().flatten().count()
    }

    fn live_maps(&self) -> usize {
        self.maps.iter().flatten().count()
    }
}

/// The mock's state.
///
/// # Invariants
///
/// Only the KUnit test thread touches it, one borrow at a time ([`with`]).
struct Mock(UnsafeCell<State>);

// SAFETY: one thread only (type invariant).
unsafe impl Sync for Mock {}

static MOCK: Mock = Mock(UnsafeCell::new(State::new()));

/// Runs `f` on the state; `f` must not call into the client.
fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    // SAFETY: one thread, and `f` never re-enters (type invariant).
    f(unsafe { &mut *MOCK.0.get() })
}

/// Resets the mock: a GPU allocation of `gpu_len` bytes at [`GPU_VA`],
/// default knobs, nothing live (what is live is freed).
pub(crate) fn reset(gpu_len: u64) {
    let old = with(|s| core::mem::replace(s, State::new()));
    with(|s| {
        s.gpu_len = gpu_len;
        // Registrations with the core outlive resets.
        s.registered = old.registered;
    });
    drop(old);
}

/// Sets the flags word of the page tables handed out.
pub(crate) fn set_page_table_flags(flags: u32) {
    with(|s| s.pt_flags = flags);
}

/// Sets the page size type, page table and mapping versions.
pub(crate) fn set_format(page_size_type: u32, pt_version: u32, map_version: u32) {
    with(|s| {
        s.page_size_type = page_size_type;
        s.pt_version = pt_version;
        s.map_version = map_version;
    });
}

/// DMA addresses of consecutive GPU pages are `stride` apart.
pub(crate) fn set_dma_stride(stride: u64) {
    with(|s| s.dma_stride = stride);
}

/// Fails `op` once with `-errno`.
pub(crate) fn fail_once(op: FailOp, errno: c_int) {
    with(|s| {
        s.fail = Some((op, errno));
        s.get_pages_seen = 0;
    });
}

/// Fires the free callback right inside the next invalidating pins.
pub(crate) fn set_fire_on_pin(on: bool) {
    with(|s| s.fire_on_pin = on);
}

/// A broken driver: get_pages pins (its free callback armed, the data
/// kept) and returns 0, but hands out a NULL page table.
pub(crate) fn set_null_page_table(on: bool) {
    with(|s| s.null_page_table = on);
}

/// Whether the persistent calls work.
pub(crate) fn set_persistent_supported(on: bool) {
    with(|s| s.persistent_supported = on);
}

/// The core's behaviour on invalidation, and the client and context it
/// calls back with.
pub(crate) fn set_core(
    mode: CoreMode,
    client: *const sys::peer_memory_client,
    context: *mut c_void,
) {
    with(|s| {
        s.core_mode = mode;
        s.core_client = client;
        s.core_context = context;
    });
}

/// Calls so far.
pub(crate) fn calls() -> Calls {
    with(|s| s.calls)
}

/// Live page tables and mappings (not put/unmapped nor freed).
pub(crate) fn live() -> (usize, usize) {
    with(|s| (s.live_pins(), s.live_maps()))
}

/// Clients registered with the mock core.
pub(crate) fn registered_clients() -> u32 {
    with(|s| s.registered)
}

/// cudaFree: kills every invalidating pin and calls its free callback.
/// Returns how many callbacks ran.
pub(crate) fn cuda_free() -> u32 {
    let mut fired = 0;
    loop {
        let next = with(|s| {
            s.pins
                .iter_mut()
                .flatten()
                .find(|p| !p.persistent && !p.dead)
                .map(|p| {
                    p.dead = true;
                    (p.free_cb, p.data)
                })
        });
        match next {
            Some((Some(cb), data)) => {
                // SAFETY: the callback and data the client gave with the pin.
                unsafe { cb(data) };
                fired += 1;
            }
            Some((None, _)) => {}
            None => return fired,
        }
    }
}

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
            // As the driver (CONTRACT 2, nv-p2p.c since 515.43.04): the free
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

/// The mock core's invalidate function.
///
/// # Safety
///
/// Called by the client under test, with the handle of its registration.
unsafe extern "C" fn mock_invalidate(_reg_handle: *mut c_void, core_context: u64) -> c_int {
    let (mode, client, context) = with(|s| {
        s.calls.invalidate += 1;
        s.calls.last_ticket = core_context;
        (s.core_mode, s.core_client, s.core_context)
    });
    if client.is_null() || context.is_null() {
        return 0;
    }
    // SAFETY: the test set a registered client table and a live context.
    let client = unsafe { &*client };
    let mut sg = bindings::sg_table::default();
    match mode {
        CoreMode::Unmaps => {}
        CoreMode::CallsBack => {
            // SAFETY: calls into the client as the core does, with its context.
            unsafe {
                if let Some(f) = client.dma_unmap {
                    f(&mut sg, context, ptr::null_mut());
                }
                if let Some(f) = client.put_pages {
                    f(&mut sg, context);
                }
            }
        }
        CoreMode::ReleasesInside => {
            with(|s| s.core_context = ptr::null_mut());
            // SAFETY: as above; the core gives its context up here.
            unsafe {
                if let Some(f) = client.release {
                    f(context);
                }
            }
        }
    }
    0
}

/// # Safety
///
/// Called by the product code as the C function of the same name.
#[no_mangle]
pub(crate) unsafe extern "C" fn ib_register_peer_memory_client(
    peer_client: *const sys::peer_memory_client,
    invalidate_callback: *mut sys::invalidate_peer_memory,
) -> *mut c_void {
    if peer_client.is_null() {
        return ptr::null_mut();
    }
    if !invalidate_callback.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *invalidate_callback = Some(mock_invalidate) };
    }
    with(|s| s.registered += 1);
    // Any non-null handle: the mock never dereferences it.
    peer_client.cast_mut().cast()
}

/// # Safety
///
/// As [`ib_register_peer_memory_client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn ib_unregister_peer_memory_client(_reg_handle: *mut c_void) {
    with(|s| s.registered = s.registered.saturating_sub(1));
}
