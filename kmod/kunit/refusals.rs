// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of what acquire and get_pages refuse, and of failed unpins.

use super::lifecycle::*;
use super::mock::{self, FailOp, GPU_VA};
use super::{check, check_eq};
use crate::nv_mem;
use crate::registration::registry;
use crate::sys;
use core::ptr;
use kernel::bindings;
use kernel::ffi::c_int;

pub(super) fn acquire_declines_non_gpu_memory() {
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

pub(super) fn refusals_release_everything() {
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
    // get_pages then refuses.
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
pub(super) fn page_table_versions_per_driver() {
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

pub(super) fn failed_unpin_is_retried_at_release() {
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
pub(super) fn refused_pin_unpin_failure_is_not_mine() {
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
