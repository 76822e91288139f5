// SPDX-License-Identifier: GPL-2.0

//! The KUnit cases of the `nvidia_peermem_rs` suite.

use crate::kunit::{check, check_eq, kunit_suite};
use crate::params::{ClientSet, Config, PeerDirectAbi};
use crate::range::{GpuRange, GPU_PAGE_SIZE};
use kernel::prelude::*;

const K64: u64 = GPU_PAGE_SIZE;

fn range_aligns_outward() {
    let r = GpuRange::new(K64 + 1, 10);
    check!(r.is_ok());
    if let Ok(r) = r {
        check_eq!(r.start(), K64);
        check_eq!(r.end(), 2 * K64);
        check_eq!(r.len(), K64);
        check_eq!(r.pages(), 1);
    }
    // Straddling a page boundary takes both pages.
    if let Ok(r) = GpuRange::new(2 * K64 - 1, 2) {
        check_eq!(r.start(), K64);
        check_eq!(r.pages(), 2);
    } else {
        check!(false);
    }
    // Already aligned stays as is.
    if let Ok(r) = GpuRange::new(4 * K64, 3 * K64) {
        check_eq!(r.start(), 4 * K64);
        check_eq!(r.len(), 3 * K64);
        check_eq!(r.pages(), 3);
    } else {
        check!(false);
    }
}

fn range_rejects_empty_and_overflow() {
    check!(GpuRange::new(K64, 0) == Err(EINVAL));
    check!(GpuRange::new(u64::MAX - 10, 20) == Err(ERANGE));
    // The end fits, but aligning it up would wrap.
    check!(GpuRange::new(u64::MAX - 100, 50) == Err(ERANGE));
    // More pages than a page table can count.
    check!(GpuRange::new(0, (u64::from(u32::MAX) + 1) * K64) == Err(ERANGE));
    check!(GpuRange::new(0, u64::from(u32::MAX) * K64).is_ok());
}

fn params_validate() {
    check!(
        Config::from_values(0, 1, 0)
            == Ok(Config {
                abi: PeerDirectAbi::Extended,
                clients: ClientSet::PersistentOnly,
                coalesce_sg: false,
            })
    );
    check!(
        Config::from_values(1, 0, 1)
            == Ok(Config {
                abi: PeerDirectAbi::Legacy,
                clients: ClientSet::InvalidatingAndPersistent,
                coalesce_sg: true,
            })
    );
    for bad in [2, -1, 42, i32::MIN, i32::MAX] {
        let e = Config::from_values(bad, 1, 0);
        check!(matches!(e, Err(ref e) if e.name == "peerdirect_support" && e.value == bad));
        let e = Config::from_values(0, bad, 0);
        check!(matches!(e, Err(ref e) if e.name == "persistent_api_support" && e.value == bad));
        let e = Config::from_values(0, 1, bad);
        check!(matches!(e, Err(ref e) if e.name == "coalesce_sg" && e.value == bad));
    }
}

// ---- client tables ---------------------------------------------------------

use crate::client::{ClientTable, EX_MARK_INDEX, INVALIDATE_UNMAPS};
use crate::core_client::{CoreRegistration, INVALIDATION};
use crate::kunit_mock::{self as mock, CoreMode, FailOp, DMA_BASE, GPU_VA};
use crate::nv_mem;
use crate::p2p::{FreeCallback, PageTable, PciDevice, Pinned};
use crate::registration::registry;
use crate::sg::{SgPlan, SgTable};
use crate::sys;
use core::ptr;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
};

fn name_of(table: &ClientTable) -> &str {
    table.name()
}

fn check_table(table: &ClientTable, name: &str, extended: bool) {
    let ex = table.ex();
    check_eq!(name_of(table), name);
    // The name is NUL-padded to the end.
    check!(ex.client.name[name.len()..].iter().all(|&c| c == 0));
    let version = &ex.client.version;
    check_eq!(
        &version[..crate::modinfo::VERSION.len()],
        crate::modinfo::VERSION.as_bytes()
    );
    check!(version[crate::modinfo::VERSION.len()..EX_MARK_INDEX]
        .iter()
        .all(|&c| c == 0));
    let c = &ex.client;
    check!(c.acquire.is_some() && c.get_pages.is_some() && c.dma_map.is_some());
    check!(c.dma_unmap.is_some() && c.put_pages.is_some());
    check!(c.get_page_size.is_some() && c.release.is_some());
    if extended {
        check_eq!(version[EX_MARK_INDEX], 1);
        check_eq!(ex.ex_size, 152);
        check_eq!(ex.flags, INVALIDATE_UNMAPS);
        check_eq!(ex.flags, sys::PEER_MEM_INVALIDATE_UNMAPS);
    } else {
        check_eq!(version[EX_MARK_INDEX], 0);
        // What a legacy core reads as two NULL callbacks.
        check_eq!(ex.ex_size, 0);
        check_eq!(ex.flags, 0);
    }
}

fn client_tables_per_mode() {
    check_table(&nv_mem::NV_MEM_INVALIDATING_EX, "nv_mem", true);
    check_table(&nv_mem::NV_MEM_INVALIDATING_LEGACY, "nv_mem", false);
    // A persistent client is a plain `peer_memory_client` whatever the ABI
    // (no mark, no `ex_size`/`flags`), as NVIDIA registers it (issue 31).
    check_table(&nv_mem::NV_MEM_PERSISTENT, "nv_mem", false);
    check_table(&nv_mem::NV_MEM_NC, "nv_mem_nc", false);
    // The invalidating and persistent tables call different adapters.
    check!(
        nv_mem::NV_MEM_INVALIDATING_EX
            .ex()
            .client
            .acquire
            .map(|f| f as usize)
            != nv_mem::NV_MEM_PERSISTENT
                .ex()
                .client
                .acquire
                .map(|f| f as usize)
    );
}

fn client_selection_per_params() {
    for (pd, pa) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let config = Config::from_values(pd, pa, 0);
        check!(config.is_ok());
        let Ok(config) = config else { return };
        let specs = nv_mem::clients_for(config.clients, config.abi);
        let extended = pd == 0;
        // The load message names the invalidation mode of the invalidating
        // client only.
        let text = nv_mem::describe(&config);
        check_eq!(
            text.contains("PEER_MEM_INVALIDATE_UNMAPS"),
            pa == 0 && pd == 0
        );
        check_eq!(text.contains("PeerDirect ABI"), pa == 0);
        match (&specs[0], &specs[1]) {
            (Some(first), Some(second)) => {
                check_eq!(pa, 0);
                check!(first.invalidating && !second.invalidating);
                check_table(first.table, "nv_mem", extended);
                // Only the invalidating client is extended.
                check_table(second.table, "nv_mem_nc", false);
            }
            (Some(only), None) => {
                check_eq!(pa, 1);
                check!(!only.invalidating);
                check_table(only.table, "nv_mem", false);
            }
            _ => check!(false),
        }
    }
}

// ---- SG construction -----------------------------------------------------

fn collect_plan(addresses: &[u64], coalesce: bool, out: &mut [(u64, u64)]) -> usize {
    let mut n = 0;
    for entry in SgPlan::new(addresses, K64, coalesce) {
        if n < out.len() {
            out[n] = entry;
        }
        n += 1;
    }
    n
}

fn sg_one_entry_per_page() {
    let contiguous = [0x10_0000, 0x11_0000, 0x12_0000, 0x13_0000];
    let mut out = [(0, 0); 8];
    check_eq!(collect_plan(&contiguous, false, &mut out), 4);
    for (i, &(addr, len)) in out[..4].iter().enumerate() {
        check_eq!(addr, contiguous[i]);
        check_eq!(len, K64);
    }
    // One page: one entry.
    check_eq!(collect_plan(&contiguous[..1], false, &mut out), 1);
    check_eq!(out[0], (0x10_0000, K64));
    check_eq!(collect_plan(&[], false, &mut out), 0);
}

fn sg_coalescing() {
    let mut out = [(0, 0); 8];
    let contiguous = [0x10_0000, 0x11_0000, 0x12_0000, 0x13_0000];
    check_eq!(collect_plan(&contiguous, true, &mut out), 1);
    check_eq!(out[0], (0x10_0000, 4 * K64));
    // Runs break at every gap and at a step backwards.
    let runs = [
        0x10_0000, 0x11_0000, 0x30_0000, 0x31_0000, 0x32_0000, 0x20_0000,
    ];
    check_eq!(collect_plan(&runs, true, &mut out), 3);
    check_eq!(out[0], (0x10_0000, 2 * K64));
    check_eq!(out[1], (0x30_0000, 3 * K64));
    check_eq!(out[2], (0x20_0000, K64));
    // Scattered pages do not coalesce.
    let scattered = [0x10_0000, 0x12_0000, 0x14_0000];
    check_eq!(collect_plan(&scattered, true, &mut out), 3);
    // An address at the top of the space does not wrap into the next.
    let top = [u64::MAX - K64 + 1, 0];
    check_eq!(collect_plan(&top, true, &mut out), 2);
}

fn sg_table_build() {
    let addresses = [0x10_0000u64, 0x11_0000, 0x40_0000];
    for (coalesce, want) in [(false, 3u32), (true, 2u32)] {
        let table = SgTable::build(SgPlan::new(&addresses, K64, coalesce));
        check!(table.is_ok());
        let Ok(table) = table else { return };
        check_eq!(table.entries(), want);
        let raw = table.raw();
        check_eq!(raw.nents, want);
        check!(table.is(&raw));
        let mut seen = [(0u64, 0u32); 3];
        let mut n = 0;
        let mut sg = raw.sgl;
        while n < raw.nents as usize && !sg.is_null() {
            if n < seen.len() {
                // SAFETY: an entry of the table just built.
                seen[n] = unsafe { (sys::pm_shim_sg_dma_address(sg), sys::pm_shim_sg_dma_len(sg)) };
            }
            // SAFETY: as above.
            sg = unsafe { bindings::sg_next(sg) };
            n += 1;
        }
        check_eq!(n, want as usize);
        if coalesce {
            check_eq!(seen[0], (0x10_0000, 2 * K64 as u32));
            check_eq!(seen[1], (0x40_0000, K64 as u32));
        } else {
            check_eq!(seen[0], (0x10_0000, K64 as u32));
            check_eq!(seen[2], (0x40_0000, K64 as u32));
        }
    }
    check!(SgTable::build(SgPlan::new(&[], K64, false)).is_err());
}

// ---- the registration state machine, driven as the core drives it ------

/// A PCI device of the VM, standing for the HCA.
struct TestPciDevice(*mut bindings::device);

impl TestPciDevice {
    fn get() -> Self {
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

fn module_refs() -> c_int {
    // SAFETY: FFI call with this module, alive while its code runs.
    unsafe { bindings::module_refcount(crate::THIS_MODULE.as_ptr()) }
}

/// One MR as the core sees it: the client table and its context.
struct CoreMr {
    client: &'static sys::peer_memory_client,
    context: *mut c_void,
    sg: bindings::sg_table,
}

// Every call below acts as the PeerDirect core would, in the documented
// order, with the context the client returned from acquire.
impl CoreMr {
    fn acquire(table: &'static ClientTable, addr: u64, size: u64) -> Option<Self> {
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

    fn get_pages(&mut self, addr: u64, size: u64, ticket: u64) -> c_int {
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

    fn dma_map(&mut self, dev: *mut bindings::device) -> (c_int, c_int) {
        let Some(f) = self.client.dma_map else {
            return (-1, 0);
        };
        let mut nmap = 0;
        // SAFETY: as the core: our SG head, the context, a device.
        let rc = unsafe { f(&mut self.sg, self.context, dev, 0, &mut nmap) };
        (rc, nmap)
    }

    fn page_size(&self) -> u64 {
        let Some(f) = self.client.get_page_size else {
            return 0;
        };
        // SAFETY: as the core, with the context from acquire.
        unsafe { f(self.context) as u64 }
    }

    fn dma_unmap(&mut self) -> c_int {
        let Some(f) = self.client.dma_unmap else {
            return -1;
        };
        // SAFETY: as the core.
        unsafe { f(&mut self.sg, self.context, ptr::null_mut()) }
    }

    fn put_pages(&mut self) {
        if let Some(f) = self.client.put_pages {
            // SAFETY: as the core.
            unsafe { f(&mut self.sg, self.context) };
        }
    }

    fn release(self) {
        if let Some(f) = self.client.release {
            // SAFETY: as the core, once, giving the context back.
            unsafe { f(self.context) };
        }
    }

    /// The SG entries as `(dma address, dma length)`.
    fn entries(&self, out: &mut [(u64, u32)]) -> usize {
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

const MR_ADDR: u64 = GPU_VA + 0x1234;
const MR_SIZE: u64 = 300_000;
const MR_PAGES: u64 = 5;

/// Registers the client of `table` with the mock core for the test.
fn register(table: &'static ClientTable, invalidating: bool) -> Option<CoreRegistration> {
    let reg = CoreRegistration::register(table, invalidating.then_some(&INVALIDATION));
    check!(reg.is_ok());
    reg.ok()
}

fn lifecycle(table: &'static ClientTable, invalidating: bool) {
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
    // acquire pinned once and kept the pin for get_pages (issue 35); the
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

fn registration_lifecycle_invalidating() {
    lifecycle(&nv_mem::NV_MEM_INVALIDATING_EX, true);
}

fn registration_lifecycle_persistent() {
    // The mock driver has the persistent calls (535 and later): pinned
    // through them, as debugfs says.
    check_eq!(
        crate::p2p::PersistentApi::of_driver(),
        crate::p2p::PersistentApi::Dedicated
    );
    lifecycle(&nv_mem::NV_MEM_PERSISTENT, false);
    lifecycle(&nv_mem::NV_MEM_NC, false);
}

fn acquire_declines_non_gpu_memory() {
    mock::reset(1 << 20);
    let refs = module_refs();
    for table in [&nv_mem::NV_MEM_INVALIDATING_EX, &nv_mem::NV_MEM_PERSISTENT] {
        // Below, above, straddling the end, empty, wrapping.
        check!(CoreMr::acquire(table, 0x1000, 4096).is_none());
        check!(CoreMr::acquire(table, GPU_VA + (2 << 20), 4096).is_none());
        check!(CoreMr::acquire(table, GPU_VA + (1 << 20) - 10, 100).is_none());
        check!(CoreMr::acquire(table, GPU_VA, 0).is_none());
        check!(CoreMr::acquire(table, u64::MAX - 10, 100).is_none());
    }
    check_eq!(mock::live(), (0, 0));
    check_eq!(registry::count(), 0);
    check_eq!(module_refs(), refs);
    // The persistent API missing (MIG, vGPU): the persistent client declines.
    mock::set_persistent_supported(false);
    check!(CoreMr::acquire(&nv_mem::NV_MEM_PERSISTENT, MR_ADDR, MR_SIZE).is_none());
    check_eq!(module_refs(), refs);
}

/// Acquires and pins an MR of `table`, expecting success.
fn pinned_mr(table: &'static ClientTable) -> Option<CoreMr> {
    let mr = CoreMr::acquire(table, MR_ADDR, MR_SIZE);
    check!(mr.is_some());
    let mut mr = mr?;
    check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 42), 0);
    Some(mr)
}

fn refusals_release_everything() {
    use crate::stats::{ErrorKind, STATS};
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    let refs = module_refs();
    let Some(_core) = register(table, true) else {
        return;
    };
    let dev = TestPciDevice::get();
    let einval = -(bindings::EINVAL as c_int);
    // A page table version this module cannot read: decided at acquire,
    // "not mine" (the core may offer the range to another client), the
    // pin unpinned; not a registration the core commits to us and that
    // get_pages then refuses (issue 31).
    for pt_version in [0x0003_0000, 0x0001_0001, 0x0000_0002] {
        for probing in [table, &nv_mem::NV_MEM_PERSISTENT] {
            mock::reset(1 << 20);
            mock::set_format(1, pt_version, sys::NVIDIA_P2P_DMA_MAPPING_VERSION);
            let errors = STATS.errors(ErrorKind::PageTableVersion);
            if let Some(mr) = CoreMr::acquire(probing, MR_ADDR, MR_SIZE) {
                check!(false);
                mr.release();
            }
            check_eq!(STATS.errors(ErrorKind::PageTableVersion), errors + 1);
            check_eq!(mock::calls().put_pages, 1);
            check_eq!(mock::live(), (0, 0));
            check_eq!(registry::count(), 0);
            check_eq!(module_refs(), refs);
        }
    }
    // 4 KiB and 128 KiB GPU pages: acquire unpins at once, get_pages
    // refuses (as NVIDIA's dma_map does), for both kinds.
    for (page_size, pt_version) in [
        (0, sys::NVIDIA_P2P_PAGE_TABLE_VERSION),
        (2, sys::NVIDIA_P2P_PAGE_TABLE_VERSION),
    ] {
        for kind in [table, &nv_mem::NV_MEM_PERSISTENT] {
            mock::reset(1 << 20);
            mock::set_format(page_size, pt_version, sys::NVIDIA_P2P_DMA_MAPPING_VERSION);
            let errors = STATS.errors(ErrorKind::PageSize);
            let Some(mut mr) = CoreMr::acquire(kind, MR_ADDR, MR_SIZE) else {
                check!(false);
                return;
            };
            check_eq!(mock::live(), (0, 0));
            check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 1), einval);
            check_eq!(STATS.errors(ErrorKind::PageSize), errors + 1);
            check_eq!(mock::calls().get_pages, 1);
            check_eq!(mock::live(), (0, 0));
            mr.release();
        }
    }
    // A newer minor version is fine.
    mock::reset(1 << 20);
    mock::set_format(1, 0x0001_0009, 0x0002_0009);
    if let Some(mut mr) = pinned_mr(table) {
        check_eq!(mr.dma_map(dev.0).0, 0);
        check_eq!(mr.dma_unmap(), 0);
        mr.put_pages();
        mr.release();
    }
    // An incompatible mapping: refused, unmapped, SG head untouched.
    for map_version in [0x0003_0003, 0x0002_0002] {
        mock::reset(1 << 20);
        mock::set_format(1, sys::NVIDIA_P2P_PAGE_TABLE_VERSION, map_version);
        let Some(mut mr) = pinned_mr(table) else {
            return;
        };
        check_eq!(mr.dma_map(dev.0).0, einval);
        check!(mr.sg.sgl.is_null() && mr.sg.nents == 0);
        check_eq!(mock::live(), (1, 0));
        mr.put_pages();
        check_eq!(mock::live(), (0, 0));
        mr.release();
    }
    // Provider failures: dma_map, and acquire's pin (simply not ours).
    mock::reset(1 << 20);
    let Some(mut mr) = pinned_mr(table) else {
        return;
    };
    mock::fail_once(FailOp::DmaMap, -(bindings::EIO as c_int));
    check_eq!(mr.dma_map(dev.0).0, -(bindings::EIO as c_int));
    check_eq!(mock::live(), (1, 0));
    // A DMA device that is not PCI (null here) is refused.
    check_eq!(mr.dma_map(ptr::null_mut()).0, einval);
    mr.put_pages();
    mr.release();
    mock::reset(1 << 20);
    mock::fail_once(FailOp::GetPages(1), -(bindings::ENOMEM as c_int));
    if let Some(mr) = CoreMr::acquire(table, MR_ADDR, MR_SIZE) {
        check!(false);
        mr.release();
    }
    check_eq!(mock::live(), (0, 0));
    // The core's get_pages twice, or dma_unmap/put_pages before it: the
    // pin stays acquire's until release unpins it.
    mock::reset(1 << 20);
    if let Some(mut mr) = CoreMr::acquire(table, MR_ADDR, MR_SIZE) {
        mr.put_pages();
        check_eq!(mock::live(), (1, 0));
        check_eq!(mr.dma_map(dev.0).0, einval);
        check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 1), 0);
        check_eq!(mr.get_pages(MR_ADDR, MR_SIZE, 1), einval);
        check_eq!(mock::live(), (1, 0));
        mr.release();
        check_eq!(mock::live(), (0, 0));
    }
    // Released without get_pages (the core failed in between): release
    // unpins acquire's pin.
    for kind in [table, &nv_mem::NV_MEM_PERSISTENT] {
        mock::reset(1 << 20);
        if let Some(mr) = CoreMr::acquire(kind, MR_ADDR, MR_SIZE) {
            check_eq!(mock::live(), (1, 0));
            mr.release();
        }
        check_eq!(mock::live(), (0, 0));
    }
    // get_pages for another range than acquired is refused.
    mock::reset(1 << 20);
    if let Some(mut mr) = CoreMr::acquire(table, MR_ADDR, MR_SIZE) {
        check_eq!(mr.get_pages(MR_ADDR + 0x10_0000, MR_SIZE, 1), einval);
        mr.release();
    }
    check_eq!(mock::live(), (0, 0));
    check_eq!(registry::count(), 0);
    check_eq!(module_refs(), refs);
}

/// One row per NVIDIA driver generation (nv-p2p.h history): the page table
/// version each stamps, whether this module reads it, and whether the flags
/// word is read (only from version 2 on: a version-1 table has no such word).
fn page_table_versions_per_driver() {
    use crate::p2p::{PageTableLayout, PAGE_TABLE_FLAGS_CPU_CACHEABLE};
    use crate::stats::{self, STATS};
    use core::sync::atomic::Ordering;
    // 515 to 575.x.
    check_eq!(PageTableLayout::of(0x0001_0002), Some(PageTableLayout::V1));
    // A later minor of the same major.
    check_eq!(PageTableLayout::of(0x0001_0003), Some(PageTableLayout::V1));
    // 580.65.06 and later (590, 595).
    check_eq!(PageTableLayout::of(0x0002_0000), Some(PageTableLayout::V2));
    check_eq!(PageTableLayout::of(0x0002_0001), Some(PageTableLayout::V2));
    // Older than the oldest this module reads, and unknown majors.
    check_eq!(PageTableLayout::of(0x0001_0001), None);
    check_eq!(PageTableLayout::of(0x0000_0002), None);
    check_eq!(PageTableLayout::of(0x0003_0000), None);

    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    let Some(_core) = register(table, true) else {
        return;
    };
    let dev = TestPciDevice::get();
    for (version, flags, cacheable) in [
        (0x0001_0002, 0, false),
        // A version-1 table: whatever lies after it is not a flags word.
        (0x0001_0002, PAGE_TABLE_FLAGS_CPU_CACHEABLE, false),
        (0x0002_0000, 0, false),
        (0x0002_0000, PAGE_TABLE_FLAGS_CPU_CACHEABLE, true),
    ] {
        mock::reset(1 << 20);
        mock::set_format(1, version, sys::NVIDIA_P2P_DMA_MAPPING_VERSION);
        mock::set_page_table_flags(flags);
        let before = stats::get(&STATS.cpu_cacheable_page_tables);
        if let Some(mut mr) = pinned_mr(table) {
            check_eq!(mr.dma_map(dev.0).0, 0);
            check_eq!(STATS.page_table_version.load(Ordering::Relaxed), version);
            check_eq!(
                stats::get(&STATS.cpu_cacheable_page_tables) - before,
                u64::from(cacheable)
            );
            check_eq!(mr.dma_unmap(), 0);
            mr.put_pages();
            mr.release();
        }
        check_eq!(mock::live(), (0, 0));
    }
    // Frees the mock's tables: nothing of this case outlives the module.
    mock::reset(0);
}

fn failed_unpin_is_retried_at_release() {
    for (table, invalidating) in [
        (&nv_mem::NV_MEM_INVALIDATING_EX, true),
        (&nv_mem::NV_MEM_PERSISTENT, false),
    ] {
        mock::reset(1 << 20);
        let refs = module_refs();
        let Some(_core) = register(table, invalidating) else {
            return;
        };
        let dev = TestPciDevice::get();
        let Some(mut mr) = pinned_mr(table) else {
            return;
        };
        check_eq!(mr.dma_map(dev.0).0, 0);
        check_eq!(mr.dma_unmap(), 0);
        mock::fail_once(FailOp::PutPages, -(bindings::EIO as c_int));
        mr.put_pages();
        check_eq!(mock::live(), (1, 0));
        mr.release();
        check_eq!(mock::live(), (0, 0));
        check_eq!(module_refs(), refs);
    }
}

/// acquire unpins a pin it refuses (4 KiB GPU pages here) at once; when
/// that unpin fails, the range is not ours ("not mine", as NVIDIA's acquire
/// answers), and the registration is not committed to the core only for
/// its get_pages to fail. The pin is not lost: an invalidating one ends
/// with its free callback, which owns it (the memory's cudaFree); a
/// persistent one is kept and unpinned again at unload (the loaded
/// module's `Stash`).
fn refused_pin_unpin_failure_is_not_mine() {
    use crate::stats::{self, ErrorKind, STATS};
    for (table, invalidating) in [
        (&nv_mem::NV_MEM_INVALIDATING_EX, true),
        (&nv_mem::NV_MEM_PERSISTENT, false),
    ] {
        mock::reset(1 << 20);
        let refs = module_refs();
        let Some(_core) = register(table, invalidating) else {
            return;
        };
        let declined = stats::get(&STATS.declined);
        let errors = STATS.errors(ErrorKind::PutPages);
        mock::set_format(
            0,
            sys::NVIDIA_P2P_PAGE_TABLE_VERSION,
            sys::NVIDIA_P2P_DMA_MAPPING_VERSION,
        );
        mock::fail_once(FailOp::PutPages, -(bindings::EIO as c_int));
        if let Some(mr) = CoreMr::acquire(table, MR_ADDR, MR_SIZE) {
            check!(false);
            mr.release();
        }
        check_eq!(stats::get(&STATS.declined), declined + 1);
        check_eq!(STATS.errors(ErrorKind::PutPages), errors + 1);
        check_eq!(registry::count(), 0);
        if invalidating {
            // Still pinned, with its callback armed: the memory's free
            // ends it, without a core invalidation (no MR of the core).
            check_eq!(mock::live(), (1, 0));
            let before = mock::calls();
            check_eq!(mock::cuda_free(), 1);
            let after = mock::calls();
            check_eq!(after.invalidate, before.invalidate);
            check_eq!(after.free_page_table, before.free_page_table + 1);
            check_eq!(mock::live(), (0, 0));
            check_eq!(module_refs(), refs);
        } else {
            check_eq!(mock::live(), (1, 0));
            check_eq!(module_refs(), refs);
            drop(crate::registration::stranded::Stash);
            check_eq!(mock::live(), (0, 0));
        }
    }
    mock::reset(0);
}

/// Maps an MR of the invalidating client, lets the mock core behave as
/// `mode`, frees the memory, and checks what the client did.
fn invalidation(mode: CoreMode) {
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    let refs = module_refs();
    let Some(_core) = register(table, true) else {
        return;
    };
    let dev = TestPciDevice::get();
    let Some(mut mr) = pinned_mr(table) else {
        return;
    };
    check_eq!(mr.dma_map(dev.0).0, 0);
    mock::set_core(mode, &raw const table.ex().client, mr.context);
    let before = mock::calls();
    let counter = |c: &core::sync::atomic::AtomicU64| crate::stats::get(c);
    let s = &crate::stats::STATS;
    let (without_core, pinned_bytes, mappings) = (
        counter(&s.invalidations_without_core),
        counter(&s.pinned_bytes),
        counter(&s.mappings),
    );

    check_eq!(mock::cuda_free(), 1);
    let after = mock::calls();
    check_eq!(after.invalidate, before.invalidate + 1);
    check_eq!(after.last_ticket, 42);
    // Counted as a call into the core (debugfs: the callbacks less these),
    // the pages and the mapping uncounted.
    check_eq!(counter(&s.invalidations_without_core), without_core);
    let len = GpuRange::new(MR_ADDR, MR_SIZE).map_or(0, |r| r.len());
    check_eq!(counter(&s.pinned_bytes), pinned_bytes - len);
    check_eq!(counter(&s.mappings), mappings - 1);
    // Unmapped and unpinned by freeing the dead objects, never by the
    // unmap/put calls (also when the core called back from inside).
    check_eq!(after.dma_unmap, before.dma_unmap);
    check_eq!(after.put_pages, before.put_pages);
    check_eq!(after.free_dma_mapping, before.free_dma_mapping + 1);
    check_eq!(after.free_page_table, before.free_page_table + 1);
    check_eq!(mock::live(), (0, 0));

    if mode == CoreMode::ReleasesInside {
        // The core released during the callback; the callback's own
        // reference kept the registration alive until it returned.
        check_eq!(registry::count(), 0);
        check_eq!(module_refs(), refs);
        return;
    }
    // Deregistration after the invalidation: unmap/put are no-ops.
    check_eq!(mr.dma_unmap(), 0);
    mr.put_pages();
    let end = mock::calls();
    check_eq!(end.dma_unmap, after.dma_unmap);
    check_eq!(end.put_pages, after.put_pages);
    mr.release();
    check_eq!(registry::count(), 0);
    check_eq!(module_refs(), refs);
}

fn invalidation_with_invalidate_unmaps() {
    invalidation(CoreMode::Unmaps);
}

fn invalidation_core_calls_back_inside() {
    invalidation(CoreMode::CallsBack);
}

fn release_during_invalidation() {
    invalidation(CoreMode::ReleasesInside);
}

fn freed_while_pinning() {
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    let refs = module_refs();
    let Some(_core) = register(table, true) else {
        return;
    };
    let Some(mut mr) = CoreMr::acquire(table, MR_ADDR, MR_SIZE) else {
        check!(false);
        return;
    };
    // The memory dies between acquire and get_pages: the callback frees
    // acquire's pin, get_pages fails.
    let without_core = crate::stats::get(&crate::stats::STATS.invalidations_without_core);
    check_eq!(mock::cuda_free(), 1);
    check_eq!(
        crate::stats::get(&crate::stats::STATS.invalidations_without_core),
        without_core + 1
    );
    check_eq!(mock::live(), (0, 0));
    check_eq!(
        mr.get_pages(MR_ADDR, MR_SIZE, 3),
        -(bindings::EFAULT as c_int)
    );
    // Not a registration the core knew: no invalidation through the core.
    check_eq!(mock::calls().invalidate, 0);
    mr.put_pages();
    mr.release();
    check_eq!(module_refs(), refs);
    // Freed while acquire pinned it: not ours.
    mock::reset(1 << 20);
    mock::set_fire_on_pin(true);
    check!(CoreMr::acquire(table, MR_ADDR, MR_SIZE).is_none());
    check_eq!(mock::live(), (0, 0));
    check_eq!(module_refs(), refs);
}

fn core_registration_and_unregistration() {
    mock::reset(0);
    let before = mock::registered_clients();
    {
        let a = register(&nv_mem::NV_MEM_INVALIDATING_EX, true);
        check!(INVALIDATION.is_ready());
        let b = register(&nv_mem::NV_MEM_NC, false);
        check_eq!(mock::registered_clients(), before + 2);
        drop(b);
        drop(a);
    }
    check_eq!(mock::registered_clients(), before);
    check!(!INVALIDATION.is_ready());
    mock::reset(0);
}

/// A small text buffer for formatting checks.
struct Text {
    buf: [u8; 256],
    len: usize,
}

impl Text {
    fn new() -> Self {
        Self {
            buf: [0; 256],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    fn contains(&self, needle: &str) -> bool {
        self.as_str().contains(needle)
    }
}

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn debugfs_lines_and_counters() {
    use crate::stats::{self, ErrorKind, STATS};
    // The parameters as loaded (defaults in this module) are valid.
    check!(
        Config::from_params()
            == Ok(Config {
                abi: PeerDirectAbi::Extended,
                clients: ClientSet::PersistentOnly,
                coalesce_sg: false,
            })
    );
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    mock::set_dma_stride(2 * K64);
    let Some(_core) = register(table, true) else {
        return;
    };
    let dev = TestPciDevice::get();
    let Some(mut mr) = pinned_mr(table) else {
        return;
    };
    let line = |registry_state: &str| {
        let mut text = Text::new();
        // Checked once the registry's lock is dropped: a failed check
        // allocates (KUnit's report), which must not happen under a
        // spinlock.
        let (ok, live) = {
            let entries = registry::lock();
            let ok = entries.iter().all(|r| r.describe(&mut text).is_ok());
            (ok, entries.len())
        };
        check!(ok);
        check_eq!(live, 1);
        let range = "[0x900000000000, 0x900000050000) pages=5";
        check!(text.contains(range));
        check!(text.contains(registry_state));
        check!(text.contains("invalidating"));
    };
    line("sg_entries=0 state=pinned");
    check_eq!(mr.dma_map(dev.0).0, 0);
    line("sg_entries=5 state=mapped");
    // The SG entries follow the provider's (non-contiguous) DMA addresses.
    let mut entries = [(0u64, 0u32); 8];
    check_eq!(mr.entries(&mut entries), 5);
    check_eq!(entries[1].0, DMA_BASE + 2 * K64);
    check_eq!(entries[4].0, DMA_BASE + 8 * K64);
    let invalidations = stats::get(&STATS.invalidations);
    mock::set_core(CoreMode::Unmaps, &raw const table.ex().client, mr.context);
    check_eq!(mock::cuda_free(), 1);
    line("state=invalidated");
    check_eq!(stats::get(&STATS.invalidations), invalidations + 1);
    let errors = STATS.errors(ErrorKind::PageSize);
    STATS.error(ErrorKind::PageSize);
    check_eq!(STATS.errors(ErrorKind::PageSize), errors + 1);
    check_eq!(ErrorKind::PageSize.name(), "page_size");
    mr.put_pages();
    mr.release();
    mock::reset(0);
}

/// The registration's allocation (a 4-byte count padded to 8, then the
/// registration) takes at most 192 bytes as long as a spinlock takes at
/// most 64 bytes (lockdep without lock statistics), and at most 128 with
/// the 4-byte spinlock of a kernel without lock debugging (issue 15: 64 KiB
/// registrations 224 -> 160 bytes). The second check holds on any kernel:
/// it takes this kernel's spinlock out and puts a 4-byte one (padded to 8
/// before the state) in.
fn registration_size() {
    use crate::lock::StateLock;
    use crate::registration::Registration;
    use crate::slab::object_size;
    use core::mem::size_of;
    check!(size_of::<StateLock<()>>() > 64 || object_size::<Registration>() <= 192);
    let lock = size_of::<kernel::bindings::spinlock_t>().next_multiple_of(8);
    check!(object_size::<Registration>() - lock + 8 <= 128);
}

// ---- the P2P wrappers' ownership of the free callback's data ------------

use core::sync::atomic::{AtomicU32, Ordering};

/// How often a [`Tracker`] was dropped (the free callback's data).
static TRACKER_DROPS: AtomicU32 = AtomicU32::new(0);
/// How often the free callback ran with a [`Tracker`].
static TRACKER_CALLS: AtomicU32 = AtomicU32::new(0);

/// A free callback whose data counts its drops: dropped twice is the
/// double free of callback data a client must never do.
struct Tracker;

impl Drop for Tracker {
    fn drop(&mut self) {
        TRACKER_DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

impl FreeCallback for Tracker {
    type Data = KBox<Tracker>;

    fn on_free(_data: &Tracker) {
        TRACKER_CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Issue 31, bug 3: pinned memory (mapped) dropped after its free callback
/// ran, from safe code, calls nothing in the provider (the page table and
/// mapping are dead) and does not drop the callback's data a second time,
/// although the driver answers a put of that page table with 0.
fn drop_after_free_callback() {
    mock::reset(1 << 20);
    let (drops, calls) = (
        TRACKER_DROPS.load(Ordering::Relaxed),
        TRACKER_CALLS.load(Ordering::Relaxed),
    );
    let dev = TestPciDevice::get();
    // SAFETY: the test's PCI device, referenced while `dev` lives.
    let peer = unsafe { PciDevice::from_dma_device(dev.0) };
    check!(peer.is_some());
    let (Ok(range), Ok(data), Some(peer)) = (
        GpuRange::new(GPU_VA, 2 * K64),
        KBox::new(Tracker, GFP_KERNEL),
        peer,
    ) else {
        return;
    };
    let page_table = PageTable::<Tracker>::pin_invalidating(range, data);
    check!(page_table.is_ok());
    let Ok(page_table) = page_table else { return };
    let mut pinned = Pinned::new(page_table);
    check!(pinned.map(peer).is_ok());
    check_eq!(mock::cuda_free(), 1);
    check_eq!(TRACKER_CALLS.load(Ordering::Relaxed), calls + 1);
    check_eq!(TRACKER_DROPS.load(Ordering::Relaxed), drops + 1);
    let before = mock::calls();
    drop(pinned);
    let after = mock::calls();
    check_eq!(after.dma_unmap, before.dma_unmap);
    check_eq!(after.put_pages, before.put_pages);
    check_eq!(TRACKER_DROPS.load(Ordering::Relaxed), drops + 1);
    mock::reset(0);
}

/// Issue 31, bug 5: a driver that says 0 but gives no page table keeps the
/// callback data it was given: the pin fails, and the data stays the
/// driver's until its callback (it runs once and drops it, once).
fn null_page_table_keeps_callback_data() {
    mock::reset(1 << 20);
    let drops = TRACKER_DROPS.load(Ordering::Relaxed);
    let (Ok(range), Ok(data)) = (GpuRange::new(GPU_VA, K64), KBox::new(Tracker, GFP_KERNEL)) else {
        check!(false);
        return;
    };
    mock::set_null_page_table(true);
    let pinned = PageTable::<Tracker>::pin_invalidating(range, data);
    mock::set_null_page_table(false);
    check!(pinned.is_err());
    check_eq!(TRACKER_DROPS.load(Ordering::Relaxed), drops);
    // The memory is freed: the driver calls the callback with its data.
    check_eq!(mock::cuda_free(), 1);
    check_eq!(TRACKER_DROPS.load(Ordering::Relaxed), drops + 1);
    mock::reset(0);
}

/// Issue 31, bug 5: the SG entry count the core gets as `nmap` (an `int`)
/// cannot be negative: a table of more than `INT_MAX` entries is refused.
fn sg_entries_fit_nmap() {
    check_eq!(crate::sg::table_entries(1), Ok(1));
    check_eq!(
        crate::sg::table_entries(c_int::MAX as usize),
        Ok(c_int::MAX as u32)
    );
    check!(crate::sg::table_entries(0).is_err());
    check!(crate::sg::table_entries(c_int::MAX as usize + 1).is_err());
    check!(crate::sg::table_entries(u32::MAX as usize).is_err());
}

/// Issue 31, bug 2: what a failed init waits for. A registration the core
/// released stays alive while the driver holds its free callback (pages a
/// failed unpin left pinned) and is counted until its callback ran.
fn registrations_counted_alive() {
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    check_eq!(crate::wait::alive(), 0);
    let Some(_core) = register(table, true) else {
        return;
    };
    let Some(mut mr) = pinned_mr(table) else {
        return;
    };
    check_eq!(crate::wait::alive(), 1);
    mock::fail_once(FailOp::PutPages, -(bindings::EIO as c_int));
    mr.put_pages();
    mock::fail_once(FailOp::PutPages, -(bindings::EIO as c_int));
    mr.release();
    // Released by the core, still pinned: alive.
    check_eq!(crate::wait::alive(), 1);
    check_eq!(mock::cuda_free(), 1);
    check_eq!(crate::wait::alive(), 0);
    check_eq!(mock::live(), (0, 0));
    // Returns at once: none alive.
    crate::wait::wait_none_alive();
    // Frees the mock's tables: nothing of this case outlives the module.
    mock::reset(0);
}

kunit_suite!(
    "nvidia_peermem_rs",
    [
        range_aligns_outward,
        range_rejects_empty_and_overflow,
        params_validate,
        client_tables_per_mode,
        client_selection_per_params,
        sg_one_entry_per_page,
        sg_coalescing,
        sg_table_build,
        core_registration_and_unregistration,
        registration_lifecycle_invalidating,
        registration_lifecycle_persistent,
        acquire_declines_non_gpu_memory,
        refusals_release_everything,
        failed_unpin_is_retried_at_release,
        refused_pin_unpin_failure_is_not_mine,
        invalidation_with_invalidate_unmaps,
        invalidation_core_calls_back_inside,
        release_during_invalidation,
        freed_while_pinning,
        debugfs_lines_and_counters,
        registration_size,
        page_table_versions_per_driver,
        drop_after_free_callback,
        null_page_table_keeps_callback_data,
        sg_entries_fit_nmap,
        registrations_counted_alive,
    ]
);
