// SPDX-License-Identifier: GPL-2.0

//! The MR the cases drive as the core drives it ([`CoreMr`]), and the cases
//! of a registration's life from acquire to release.

use super::mock::{self, DMA_BASE, GPU_VA};
use super::{check, check_eq};
use crate::client::ClientTable;
use crate::core_client::{CoreRegistration, INVALIDATION};
use crate::nv_mem;
use crate::range::GPU_PAGE_SIZE;
use crate::registration::registry;
use crate::sys;
use core::ptr;
use kernel::bindings;
use kernel::ffi::{c_int, c_void};

/// A PCI device of the VM, standing for the HCA.
pub(super) struct TestPciDevice(pub(super) *mut bindings::device);

impl TestPciDevice {
    pub(super) fn get() -> Self {
        // SAFETY: FFI call without preconditions.
        Self(unsafe { sys::pm_shim_test_get_pci_device() })
    }
}

impl Drop for TestPciDevice {
    fn drop(&mut self) {
        // SAFETY: the reference taken by `get`.
        unsafe { sys::pm_shim_test_put_pci_device(self.0) };
    }
}

pub(super) fn module_refs() -> c_int {
    // SAFETY: FFI call with this module, alive while its code runs.
    unsafe { bindings::module_refcount(crate::THIS_MODULE.as_ptr()) }
}

/// One MR as the core sees it: the client table and its context.
pub(super) struct CoreMr {
    client: &'static sys::peer_memory_client,
    pub(super) context: *mut c_void,
    pub(super) sg: bindings::sg_table,
}

// Every call below acts as the PeerDirect core would, in the documented
// order, with the context the client returned from acquire.
impl CoreMr {
    pub(super) fn acquire(table: &'static ClientTable, addr: u64, size: u64) -> Option<Self> {
        let client = &table.ex().client;
        let mut context = ptr::null_mut();
        let f = client.acquire?;
        // SAFETY: as the core: a valid out-pointer for the context.
        let mine = unsafe {
            f(
                addr as usize,
                size as usize,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut context,
            )
        };
        (mine == 1).then_some(Self {
            client,
            context,
            sg: bindings::sg_table::default(),
        })
    }

    pub(super) fn get_pages(&mut self, addr: u64, size: u64, ticket: u64) -> c_int {
        let Some(f) = self.client.get_pages else {
            return -1;
        };
        // SAFETY: as the core, with the context from acquire.
        unsafe {
            f(
                addr as usize,
                size as usize,
                1,
                0,
                ptr::null_mut(),
                self.context,
                ticket,
            )
        }
    }

    pub(super) fn dma_map(&mut self, dev: *mut bindings::device) -> (c_int, c_int) {
        let Some(f) = self.client.dma_map else {
            return (-1, 0);
        };
        let mut nmap = 0;
        // SAFETY: as the core: our SG head, the context, a device.
        let rc = unsafe { f(&mut self.sg, self.context, dev, 0, &mut nmap) };
        (rc, nmap)
    }

    pub(super) fn page_size(&self) -> u64 {
        let Some(f) = self.client.get_page_size else {
            return 0;
        };
        // SAFETY: as the core, with the context from acquire.
        unsafe { f(self.context) as u64 }
    }

    pub(super) fn dma_unmap(&mut self) -> c_int {
        let Some(f) = self.client.dma_unmap else {
            return -1;
        };
        // SAFETY: as the core.
        unsafe { f(&mut self.sg, self.context, ptr::null_mut()) }
    }

    pub(super) fn put_pages(&mut self) {
        if let Some(f) = self.client.put_pages {
            // SAFETY: as the core.
            unsafe { f(&mut self.sg, self.context) };
        }
    }

    pub(super) fn release(self) {
        if let Some(f) = self.client.release {
            // SAFETY: as the core, once, giving the context back.
            unsafe { f(self.context) };
        }
    }

    /// The SG entries as `(dma address, dma length)`.
    pub(super) fn entries(&self, out: &mut [(u64, u32)]) -> usize {
        let mut sg = self.sg.sgl;
        let mut n = 0;
        while n < self.sg.nents as usize && !sg.is_null() {
            if n < out.len() {
                // SAFETY: an entry of the table the client built.
                out[n] = unsafe { (sys::pm_shim_sg_dma_address(sg), sys::pm_shim_sg_dma_len(sg)) };
            }
            // SAFETY: as above.
            sg = unsafe { bindings::sg_next(sg) };
            n += 1;
        }
        n
    }
}

/// One GPU page.
pub(super) const K64: u64 = GPU_PAGE_SIZE;

pub(super) const MR_ADDR: u64 = GPU_VA + 0x1234;
pub(super) const MR_SIZE: u64 = 300_000;
pub(super) const MR_PAGES: u64 = 5;

/// Registers the client of `table` with the mock core for the test.
pub(super) fn register(
    table: &'static ClientTable,
    invalidating: bool,
) -> Option<CoreRegistration> {
    let reg = CoreRegistration::register(table, invalidating.then_some(&INVALIDATION));
    check!(reg.is_ok());
    reg.ok()
}

pub(super) fn lifecycle(table: &'static ClientTable, invalidating: bool) {
    mock::reset(1 << 20);
    let refs = module_refs();
    let Some(_core) = register(table, invalidating) else {
        return;
    };
    let dev = TestPciDevice::get();
    check!(!dev.0.is_null());

    let mr = CoreMr::acquire(table, MR_ADDR, MR_SIZE);
    check!(mr.is_some());
    let Some(mut mr) = mr else { return };
    // acquire pinned once and kept the pin for get_pages; the
    // registration holds the module.
    check_eq!(mock::live(), (1, 0));
    check_eq!(mock::calls().get_pages, 1);
    check_eq!(mock::calls().put_pages, 0);
    check_eq!(registry::count(), 1);
    check_eq!(module_refs(), refs + 1);

    // get_pages takes acquire's pin: no provider call.
    check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 7), 0);
    check_eq!(mock::live(), (1, 0));
    check_eq!(mock::calls().get_pages, 1);
    let (rc, nmap) = mr.dma_map(dev.0);
    check_eq!(rc, 0);
    check_eq!(nmap as u64, MR_PAGES);
    check_eq!(mock::live(), (1, 1));
    let mut entries = [(0u64, 0u32); 8];
    check_eq!(mr.entries(&mut entries), MR_PAGES as usize);
    for (i, &(addr, len)) in entries[..MR_PAGES as usize].iter().enumerate() {
        check_eq!(addr, DMA_BASE + i as u64 * K64);
        check_eq!(u64::from(len), K64);
    }
    check_eq!(mr.page_size(), K64);

    check_eq!(mr.dma_unmap(), 0);
    check_eq!(mock::live(), (1, 0));
    mr.put_pages();
    check_eq!(mock::live(), (0, 0));
    mr.release();
    check_eq!(registry::count(), 0);
    check_eq!(module_refs(), refs);
    check_eq!(mock::calls().invalidate, 0);
}

pub(super) fn registration_lifecycle_invalidating() {
    lifecycle(&nv_mem::NV_MEM_INVALIDATING_EX, true);
}

pub(super) fn registration_lifecycle_persistent() {
    // The mock driver has the persistent calls (535 and later): pinned
    // through them, as debugfs says.
    check_eq!(
        crate::p2p::PersistentApi::of_driver(),
        crate::p2p::PersistentApi::Dedicated
    );
    lifecycle(&nv_mem::NV_MEM_PERSISTENT, false);
    lifecycle(&nv_mem::NV_MEM_NC, false);
}

/// Acquires and pins an MR of `table`, expecting success.
pub(super) fn pinned_mr(table: &'static ClientTable) -> Option<CoreMr> {
    let mr = CoreMr::acquire(table, MR_ADDR, MR_SIZE);
    check!(mr.is_some());
    let mut mr = mr?;
    check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 42), 0);
    Some(mr)
}
