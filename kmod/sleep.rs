// SPDX-License-Identifier: GPL-2.0
//! Sleeping for a while, for the few places that wait on another thread
//! without a wait queue of their own.

/// Sleeps for about `ms` milliseconds. Only where sleeping is allowed.
pub(crate) fn sleep_ms(ms: u32) {
    // SAFETY: `msleep` has no preconditions beyond a context that may sleep,
    // which callers guarantee (the free callback and the core's calls run in
    // process context).
    unsafe { kernel::bindings::msleep(ms) };
}
