// SPDX-License-Identifier: GPL-2.0

//! Sleeping until another thread says so, on the wait queues of the C shim
//! (`ffi/shim.h`): the free callback waiting for a thread that reads its
//! page table, and a failed init waiting for the registrations still alive.

use crate::sys;
use kernel::ffi::c_void;

/// Sleeps, uninterruptibly, until `done` returns true. `done` runs once
/// before sleeping and again after every [`wake_free_waiters`]; it may take
/// spinlocks, not sleep. Only where sleeping is allowed.
#[inline(always)]
pub(crate) fn free_wait<F: FnMut() -> bool>(mut done: F) {
    // The first look here: the common case, nothing to wait for, makes no
    // call into the shim (whose wait queue would call `done` through a
    // pointer). The shim looks again once queued, before it sleeps.
    if done() {
        return;
    }
    /// # Safety
    ///
    /// `arg` is the `&mut F` that [`free_wait`] passed, alive and used by
    /// nothing else while `pm_shim_free_wait` runs.
    unsafe extern "C" fn look<F: FnMut() -> bool>(arg: *mut c_void) -> bool {
        // SAFETY: guaranteed by the function's safety requirements.
        let done = unsafe { &mut *arg.cast::<F>() };
        done()
    }
    // SAFETY: FFI call; the shim calls `look::<F>` only during this call and
    // on this thread, with `arg`, which points at `done` until it returns.
    unsafe { sys::pm_shim_free_wait(Some(look::<F>), (&raw mut done).cast()) };
}

/// Wakes every free callback sleeping in [`free_wait`]: each runs its
/// `done` again.
pub(crate) fn wake_free_waiters() {
    // SAFETY: FFI call without preconditions.
    unsafe { sys::pm_shim_free_wake() };
}

/// Counts one more registration alive (see [`wait_none_alive`]).
pub(crate) fn alive_get() {
    // SAFETY: FFI call without preconditions.
    unsafe { sys::pm_shim_live_get() };
}

/// Counts one registration less; the last wakes [`wait_none_alive`].
///
/// # Safety
///
/// Paired with one earlier [`alive_get`].
pub(crate) unsafe fn alive_put() {
    // SAFETY: FFI call; the count is above 0 (function's requirements).
    unsafe { sys::pm_shim_live_put() };
}

/// Registrations alive right now.
pub(crate) fn alive() -> u32 {
    // SAFETY: FFI call without preconditions.
    unsafe { sys::pm_shim_live_count() }
}

/// Sleeps, uninterruptibly, until no registration is alive.
pub(crate) fn wait_none_alive() {
    // SAFETY: FFI call without preconditions.
    unsafe { sys::pm_shim_live_wait_none() };
}
