// SPDX-License-Identifier: GPL-2.0

//! Sleeping until another thread says so, on the wait queues of the C shim
//! (`ffi/shim.h`): the free callback waiting for a thread that reads its
//! page table, and a failed init waiting for the registrations still alive.

use crate::sys;
use core::sync::atomic::{AtomicI32, Ordering};
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

/// The calling task's id (its thread id, positive, at most
/// `PID_MAX_LIMIT`, 2^22): a waiter tells by it whether the thread it
/// would wait for is itself.
pub(crate) fn current_task_id() -> u32 {
    // SAFETY: FFI call without arguments, from process context.
    let pid = unsafe { sys::pm_shim_current_pid() };
    u32::try_from(pid).unwrap_or(0)
}

/// Wakes every free callback sleeping in [`free_wait`]: each runs its
/// `done` again.
pub(crate) fn wake_free_waiters() {
    // SAFETY: FFI call without preconditions.
    unsafe { sys::pm_shim_free_wake() };
}

/// The registrations alive, plus a base of 1 that only [`wait_none_alive`]
/// drops while it waits, and [`DECLINED`] once a failed load stopped
/// counting new ones: a put that leaves the count above 0 is a
/// compare-exchange here, with no call and no lock; the one that may take
/// it to 0 is the shim's, under the lock the waiter checks it under. The
/// shim reads and writes it as an `atomic_t` (an `int`, as this is).
static LIVE: AtomicI32 = AtomicI32::new(1);

/// [`LIVE`]'s flag: the load failed, no registration is counted any more.
const DECLINED: i32 = 1 << 30;
/// [`LIVE`]'s count (the registrations alive plus the base); it never
/// reaches [`DECLINED`], since every registration holds a module
/// reference and the module's count is far smaller.
const COUNT: i32 = DECLINED - 1;

/// Counts one more registration alive (see [`wait_none_alive`]), unless a
/// failed load declined ([`decline`]): then false, and nothing counted.
/// One compare-exchange with the decline: a failed load either sees this
/// registration counted, or this call sees the decline.
#[inline(always)]
pub(crate) fn alive_get() -> bool {
    let mut live = LIVE.load(Ordering::Relaxed);
    loop {
        if live & DECLINED != 0 {
            return false;
        }
        match LIVE.compare_exchange_weak(live, live + 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => live = now,
        }
    }
}

/// Counts one registration less; the last wakes [`wait_none_alive`].
///
/// # Safety
///
/// Paired with one earlier [`alive_get`] that returned true.
#[inline(always)]
pub(crate) unsafe fn alive_put() {
    let mut live = LIVE.load(Ordering::Relaxed);
    // Above 1, this put cannot reach 0 (atomic_dec_and_lock's fast path).
    while live & COUNT > 1 {
        match LIVE.compare_exchange_weak(live, live - 1, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => live = now,
        }
    }
    // SAFETY: FFI call; `LIVE` is an `int` for good, and the count is above 0
    // (function's requirements).
    unsafe { sys::pm_shim_live_put_last(LIVE.as_ptr().cast(), COUNT) };
}

/// From now on [`alive_get`] refuses, and returns how many registrations
/// are alive at that instant: one atomic step, so that no registration is
/// made after the failed load looked and before it stopped new ones.
/// Called by a failed init before it waits for those alive.
#[allow(dead_code)] // (the KUnit module has no load to fail)
pub(crate) fn decline() -> u32 {
    let live = LIVE.fetch_or(DECLINED, Ordering::Relaxed);
    // Less the base.
    u32::try_from((live & COUNT).saturating_sub(1)).unwrap_or(0)
}

/// Registrations alive right now (not while [`wait_none_alive`] waits).
#[allow(dead_code)] // (the KUnit module's only)
pub(crate) fn alive() -> u32 {
    // Less the base.
    u32::try_from((LIVE.load(Ordering::Relaxed) & COUNT).saturating_sub(1)).unwrap_or(0)
}

/// Sleeps, uninterruptibly, until no registration is alive. Unbounded: a
/// registration lives until the core releases it and, for pages it could
/// not unpin or left to the process that pinned them, until that process
/// frees the memory or exits (the driver's free callback ends it then).
/// The sleep is an idle one, which the hung-task detector does not report.
pub(crate) fn wait_none_alive() {
    // SAFETY: FFI call; `LIVE` is an `int` for good.
    unsafe { sys::pm_shim_live_wait_none(LIVE.as_ptr().cast(), COUNT) };
}
