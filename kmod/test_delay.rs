// SPDX-License-Identifier: GPL-2.0

//! Delay points that hold the module's own race windows open, and a
//! lockdep witness of a phase that must not allocate, in the test build
//! only (Kbuild `PEERMEM_TEST_DELAYS=1`): the VM's forced-window scenarios
//! arm a point through the test build's parameters (`ffi/shim.h`). In the
//! product every point is an empty inline function.
//!
//! C header: `ffi/shim.h` (`pm_test_point`).

/// A point where the test build can busy-wait.
#[derive(Clone, Copy)]
pub(crate) enum Point {
    /// The free callback, after it dropped a reference that was not the
    /// last: another holder may now drop the last one, and with it the
    /// module reference.
    FreeCallbackTail,
    /// acquire, between its look at whether a failed load declines new
    /// registrations and its module reference.
    AcquireModuleRef,
}

impl Point {
    #[cfg(peermem_test_delays)]
    fn raw(self) -> u32 {
        match self {
            Self::FreeCallbackTail => crate::sys::pm_test_point_PM_TEST_FREE_CALLBACK_TAIL,
            Self::AcquireModuleRef => crate::sys::pm_test_point_PM_TEST_ACQUIRE_MODULE_REF,
        }
    }
}

/// Busy-waits at `point` if the test build armed it; nothing in the product.
#[inline(always)]
pub(crate) fn at(point: Point) {
    #[cfg(peermem_test_delays)]
    // SAFETY: FFI call; the shim only compares the point with the armed one
    // and busy-waits, which is allowed wherever the points are.
    unsafe {
        crate::sys::pm_shim_test_delay(point.raw())
    };
    #[cfg(not(peermem_test_delays))]
    let _ = point;
}

/// dma_map's reading phase, the one a free callback waits for while it
/// holds the driver lock, as a lock lockdep sees in the test build (see
/// `pm_shim_test_reading_begin`): an allocation that may reclaim while
/// one lives is reported as a circular dependency. Nothing in the product.
pub(crate) struct ReadingPhase(());

impl ReadingPhase {
    /// The phase begins; it ends when the value is dropped, on this task.
    #[inline(always)]
    pub(crate) fn begin() -> Self {
        #[cfg(peermem_test_delays)]
        // SAFETY: FFI call; lockdep bookkeeping only, paired with the end
        // in `drop` on this task.
        unsafe {
            crate::sys::pm_shim_test_reading_begin()
        };
        Self(())
    }
}

impl Drop for ReadingPhase {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(peermem_test_delays)]
        // SAFETY: FFI call; ends the phase `begin` began on this task.
        unsafe {
            crate::sys::pm_shim_test_reading_end()
        };
    }
}
