// SPDX-License-Identifier: GPL-2.0

//! Sleeping until another thread says so, on the wait queues of the C shim
//! (`ffi/shim.h`): a failed init waiting for the registrations still alive.

use crate::sys;

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
