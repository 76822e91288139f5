// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the free callback: invalidation through the core, release
//! during it, a free while pinning, and the client's registration with the
//! core.

use super::lifecycle::*;
use super::mock::{self, CoreMode};
use super::{check, check_eq};
use crate::core_client::INVALIDATION;
use crate::nv_mem;
use crate::range::GpuRange;
use crate::registration::registry;
use kernel::bindings;
use kernel::ffi::c_int;

/// Maps an MR of the invalidating client, lets the mock core behave as
/// `mode`, frees the memory, and checks what the client did.
pub(super) fn invalidation(mode: CoreMode) {
    // The extended table with the release wait on, as on a core with the
    // stop notifier, in every mode: a core that releases from inside the
    // invalidation (the legacy cores, an unknown one) does so on the
    // callback's own task, and release must not wait for itself there.
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    let refs = module_refs();
    let Some(_core) = register(table, true) else {
        return;
    };
    INVALIDATION.set_release_waits_for_invalidation(true);
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

pub(super) fn invalidation_with_invalidate_unmaps() {
    invalidation(CoreMode::Unmaps);
}

pub(super) fn invalidation_core_calls_back_inside() {
    invalidation(CoreMode::CallsBack);
}

pub(super) fn release_during_invalidation() {
    invalidation(CoreMode::ReleasesInside);
}

pub(super) fn freed_while_pinning() {
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

pub(super) fn core_registration_and_unregistration() {
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
