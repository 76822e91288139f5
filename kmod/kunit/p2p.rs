// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the P2P wrappers' ownership of the free callback's data,
//! the SG entry bound and the count of registrations alive.

use super::lifecycle::*;
use super::mock::{self, FailOp, GPU_VA};
use super::{check, check_eq};
use crate::nv_mem;
use crate::p2p::{FreeCallback, PageTable, PciDevice, Pinned};
use crate::range::GpuRange;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

// ---- the P2P wrappers' ownership of the free callback's data ------------

/// How often a [`Tracker`] was dropped (the free callback's data).
pub(super) static TRACKER_DROPS: AtomicU32 = AtomicU32::new(0);
/// How often the free callback ran with a [`Tracker`].
pub(super) static TRACKER_CALLS: AtomicU32 = AtomicU32::new(0);

/// A free callback whose data counts its drops: dropped twice is the
/// double free of callback data a client must never do.
pub(super) struct Tracker;

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

/// Pinned memory (mapped) dropped after its free callback
/// ran, from safe code, calls nothing in the provider (the page table and
/// mapping are dead) and does not drop the callback's data a second time,
/// although the driver answers a put of that page table with 0.
pub(super) fn drop_after_free_callback() {
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

/// A driver that says 0 but gives no page table keeps the
/// callback data it was given: the pin fails, and the data stays the
/// driver's until its callback (it runs once and drops it, once).
pub(super) fn null_page_table_keeps_callback_data() {
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

/// The SG entry count the core gets as `nmap` (an `int`)
/// cannot be negative: a table of more than `INT_MAX` entries is refused.
pub(super) fn sg_entries_fit_nmap() {
    check_eq!(crate::sg::table_entries(1), Ok(1));
    check_eq!(
        crate::sg::table_entries(c_int::MAX as usize),
        Ok(c_int::MAX as u32)
    );
    check!(crate::sg::table_entries(0).is_err());
    check!(crate::sg::table_entries(c_int::MAX as usize + 1).is_err());
    check!(crate::sg::table_entries(u32::MAX as usize).is_err());
}

/// What a failed init waits for. A registration the core
/// released stays alive while the driver holds its free callback (pages a
/// failed unpin left pinned) and is counted until its callback ran.
pub(super) fn registrations_counted_alive() {
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
