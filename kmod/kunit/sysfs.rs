// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the sysfs counters: the values' text, the per-client
//! counters through a registration's life, the causes of declines, and the
//! directories made and removed.

use super::lifecycle::*;
use super::mock::{self, FailOp, GPU_VA};
use super::{check, check_eq};
use crate::nv_mem;
use crate::params::{ClientSet, PeerDirectAbi};
use crate::registration::PinKind;
use crate::stats::{self, DeclineKind, STATS};
use crate::sysfs::{self, ClientFiles, Files, ModuleFiles, Value};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// A value's text, or `None` if it does not fit `N` bytes.
fn shown<const N: usize>(value: Value) -> Option<([u8; N], usize)> {
    let mut buf = [0u8; N];
    let len = sysfs::format_value(value, &mut buf).ok()?;
    Some((buf, len))
}

pub(super) fn sysfs_values_format() {
    let is = |v, want: &str| match shown::<32>(v) {
        Some((b, n)) => &b[..n] == want.as_bytes(),
        None => false,
    };
    check!(is(Value::Count(0), "0\n"));
    check!(is(Value::Count(u64::MAX), "18446744073709551615\n"));
    check!(is(Value::Version(0x0002_0000), "0x00020000\n"));
    check!(is(
        Value::Text("get_pages_persistent"),
        "get_pages_persistent\n"
    ));
    // Exactly the room needed fits; one byte less does not, and nothing
    // is written past the buffer.
    check!(shown::<4>(Value::Count(123)).is_some());
    check!(shown::<3>(Value::Count(123)).is_none());
    check!(sysfs::format_value(Value::Count(1), &mut []) == Err(E2BIG));
    // Every file of every directory has a C-string name and a value; one
    // past the last has none.
    for i in 0..ModuleFiles::COUNT {
        check!(ModuleFiles::name(i).ends_with('\0'));
        check!(ModuleFiles.value(i).is_some());
    }
    check!(ModuleFiles.value(ModuleFiles::COUNT).is_none());
    check_eq!(ClientFiles::name(0), "version\0");
    check_eq!(ClientFiles::name(1), "num_alloc_mrs\0");
    check_eq!(ClientFiles::name(7), "num_free_callbacks\0");
    check_eq!(DeclineKind::NotGpuMemory.name(), "not_gpu_memory");
    check_eq!(DeclineKind::NotGpuMemory.c_name(), "not_gpu_memory\0");
}

pub(super) fn declines_counted_by_cause() {
    use DeclineKind::*;
    // The driver's errors, as its pin answers them.
    check_eq!(DeclineKind::of_pin_error(EINVAL), NotGpuMemory);
    check_eq!(DeclineKind::of_pin_error(EFAULT), NotGpuMemory);
    check_eq!(DeclineKind::of_pin_error(ENOTSUPP), PersistentUnsupported);
    check_eq!(DeclineKind::of_pin_error(ENOMEM), DriverOutOfMemory);
    check_eq!(DeclineKind::of_pin_error(EIO), DriverRefused);
    let refs = module_refs();
    let count = |kind| STATS.declines(kind);
    for table in [&nv_mem::NV_MEM_INVALIDATING_EX, &nv_mem::NV_MEM_PERSISTENT] {
        mock::reset(1 << 20);
        let declined = stats::get(&STATS.declined);
        let (range, not_gpu, oom, refused) = (
            count(Range),
            count(NotGpuMemory),
            count(DriverOutOfMemory),
            count(DriverRefused),
        );
        // Host memory, and a range past the allocation's end.
        check!(CoreMr::acquire(table, 0x1000, 4096).is_none());
        check!(CoreMr::acquire(table, GPU_VA + (1 << 20) - 10, 100).is_none());
        check_eq!(count(NotGpuMemory), not_gpu + 2);
        // Empty.
        check!(CoreMr::acquire(table, GPU_VA, 0).is_none());
        check_eq!(count(Range), range + 1);
        // Out of BAR1 or memory in the driver, and any other refusal.
        mock::fail_once(FailOp::GetPages(1), -(bindings::ENOMEM as c_int));
        check!(CoreMr::acquire(table, MR_ADDR, MR_SIZE).is_none());
        check_eq!(count(DriverOutOfMemory), oom + 1);
        mock::reset(1 << 20);
        mock::fail_once(FailOp::GetPages(1), -(bindings::EIO as c_int));
        check!(CoreMr::acquire(table, MR_ADDR, MR_SIZE).is_none());
        check_eq!(count(DriverRefused), refused + 1);
        // Every decline has its cause: the total is their sum.
        check_eq!(stats::get(&STATS.declined), declined + 5);
    }
    // The persistent API refused (MIG, vGPU).
    mock::reset(1 << 20);
    let unsupported = count(PersistentUnsupported);
    mock::set_persistent_supported(false);
    check!(CoreMr::acquire(&nv_mem::NV_MEM_PERSISTENT, MR_ADDR, MR_SIZE).is_none());
    check_eq!(count(PersistentUnsupported), unsupported + 1);
    mock::reset(0);
    check_eq!(module_refs(), refs);
}

/// The counters of the client of `kind`, as its sysfs files show them.
fn client_values(kind: PinKind) -> [u64; 7] {
    let files = ClientFiles::of(kind);
    let mut out = [0; 7];
    for (i, slot) in out.iter_mut().enumerate() {
        if let Some(Value::Count(n)) = files.value(i + 1) {
            *slot = n;
        }
    }
    out
}

pub(super) fn client_counters_follow_the_mr() {
    for (table, kind) in [
        (&nv_mem::NV_MEM_INVALIDATING_EX, PinKind::Invalidating),
        (&nv_mem::NV_MEM_NC, PinKind::Persistent),
    ] {
        mock::reset(1 << 20);
        let invalidating = kind == PinKind::Invalidating;
        let Some(_core) = register(table, invalidating) else {
            return;
        };
        let dev = TestPciDevice::get();
        let before = client_values(kind);
        let Some(mut mr) = pinned_mr(table) else {
            return;
        };
        // Pinned, not yet mapped: nothing counted.
        check!(client_values(kind) == before);
        check_eq!(mr.dma_map(dev.0).0, 0);
        // [alloc, dealloc, reg_pages, dereg_pages, reg_bytes, dereg_bytes,
        // free_callbacks]: the user's length in bytes, 64 KiB pages.
        let mapped = client_values(kind);
        check_eq!(mapped[0], before[0] + 1);
        check_eq!(mapped[1], before[1]);
        check_eq!(mapped[2], before[2] + MR_PAGES);
        check_eq!(mapped[4], before[4] + MR_SIZE);
        check_eq!(mapped[5], before[5]);
        check_eq!(mr.dma_unmap(), 0);
        mr.put_pages();
        mr.release();
        let released = client_values(kind);
        check_eq!(released[1], before[1] + 1);
        check_eq!(released[3], before[3] + MR_PAGES);
        check_eq!(released[5], before[5] + MR_SIZE);
        // The invalidating client's free callbacks are its calls into the
        // core; the persistent one makes none.
        check_eq!(
            released[6],
            if invalidating {
                STATS.core_invalidations()
            } else {
                0
            }
        );
        // A registration refused before dma_map is no MR of the core's.
        let Some(mr) = pinned_mr(table) else {
            return;
        };
        mr.release();
        check!(client_values(kind)[..6] == released[..6]);
    }
    mock::reset(0);
}

pub(super) fn sysfs_tree_made_and_removed() {
    // Under this test module's /sys/module directory: both clients, then
    // everything removed when dropped (the suite's leak scan sees the
    // rest).
    let clients = nv_mem::clients_for(
        ClientSet::InvalidatingAndPersistent,
        PeerDirectAbi::Extended,
    );
    let tree = sysfs::Counters::create(
        clients
            .iter()
            .flatten()
            .map(|spec| (spec.table, spec.pin_kind())),
    );
    check!(tree.is_ok());
    // Names the kernel would refuse or misread are refused before it.
    check!(sysfs::Dir::create(None, "no_nul", &ModuleFiles).is_err());
    check!(sysfs::Dir::create(None, "a\0b\0", &ModuleFiles).is_err());
    drop(tree);
    // Gone: the same names can be made again (a name still taken would
    // fail, with the kernel's stack dump of a duplicate sysfs name).
    let again = sysfs::Counters::create(core::iter::empty());
    check!(again.is_ok());
}
