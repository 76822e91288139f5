// SPDX-License-Identifier: GPL-2.0

//! KUnit case of the kernel crate's view of kernel structures against the C
//! compiler's. The module keeps kernel locks in its own types and hands
//! `sg_table`s to the core, which assumes that the bindings and C agree on
//! those. They need not agree everywhere: the kernel crates of 6.12 and
//! 7.1 lay out `task_struct` without the cache-line alignment C gives its
//! `stats` member, so every field after it (`pid` among them) sits 16
//! (6.12) or 48 (7.1) bytes early and `current!().pid()` reads another
//! field. The module reads tasks through its C shim only; the case says
//! where the bindings and C part, for the next field someone reads through
//! the kernel crate.

use super::check_eq;
use crate::sys;
use core::mem::{offset_of, size_of};
use kernel::bindings;
use kernel::prelude::*;

pub(super) fn kernel_crate_layouts_match_c() {
    // SAFETY: FFI calls without preconditions.
    let (spinlock_size, sg_table_size) = unsafe {
        (
            sys::pm_shim_test_spinlock_size(),
            sys::pm_shim_test_sg_table_size(),
        )
    };
    check_eq!(
        size_of::<bindings::spinlock_t>() as u64,
        spinlock_size as u64
    );
    check_eq!(size_of::<bindings::sg_table>() as u64, sg_table_size as u64);

    // What the module does not rely on, said in the log.
    let fields = [
        ("se", offset_of!(bindings::task_struct, se)),
        ("rt", offset_of!(bindings::task_struct, rt)),
        ("dl", offset_of!(bindings::task_struct, dl)),
        ("stats", offset_of!(bindings::task_struct, stats)),
        ("policy", offset_of!(bindings::task_struct, policy)),
        ("sched_info", offset_of!(bindings::task_struct, sched_info)),
        ("tasks", offset_of!(bindings::task_struct, tasks)),
        ("mm", offset_of!(bindings::task_struct, mm)),
        ("pid", offset_of!(bindings::task_struct, pid)),
    ];
    let first_apart = (0u32..).zip(fields).find_map(|(i, (name, rust))| {
        // SAFETY: FFI call without preconditions.
        let c = unsafe { sys::pm_shim_test_task_offset(i) };
        (rust as u64 != c as u64).then_some((name, rust, c))
    });
    // SAFETY: FFI call without preconditions.
    let c_pid = unsafe { sys::pm_shim_current_pid() };
    match first_apart {
        Some((name, rust, c)) => pr_info!(
            "layouts: the kernel crate's task_struct parts from C at {} ({} against {}): current!().pid() reads {}, current->pid is {}\n",
            name,
            rust,
            c,
            kernel::current!().pid(),
            c_pid
        ),
        None => check_eq!(kernel::current!().pid(), c_pid),
    }
}
