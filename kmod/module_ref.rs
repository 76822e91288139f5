// SPDX-License-Identifier: GPL-2.0

//! A reference on this module: while one exists, `rmmod` fails with `EBUSY`.
//! Each registration holds one from acquire until its last user is gone.
//! They are also counted for a failed init, which must not return (and the
//! module go) while one is alive ([`crate::wait::wait_none_alive`]): the
//! loader does not wait for module references.

use kernel::bindings;

/// One reference on this module, dropped with the value.
///
/// # Invariants
///
/// A reference on `THIS_MODULE` was taken and is owned by this value, and
/// counted once with [`crate::wait::alive_get`].
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference, unless the module is being unloaded or its load
    /// failed.
    pub(crate) fn try_get() -> Option<Self> {
        // Counted first, in one step with a failed load's decline: that
        // load then waits for this registration, or this acquire declines.
        if !crate::wait::alive_get() {
            return None;
        }
        crate::test_delay::at(crate::test_delay::Point::AcquireModuleRef);
        // SAFETY: `THIS_MODULE` is this module, alive while its code runs.
        let got = unsafe { bindings::try_module_get(crate::THIS_MODULE.as_ptr()) };
        // INVARIANT: the reference was taken when `got`, and counted above.
        // The value is made only then: `got.then_some(Self(()))` would build
        // it first and, when `got` is false, drop it, putting a reference
        // never taken (a module_put underflow, while the module is going).
        if got {
            Some(Self(()))
        } else {
            // SAFETY: counted by the `alive_get` above, which returned true.
            unsafe { crate::wait::alive_put() };
            None
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference (type invariant).
        unsafe { bindings::module_put(crate::THIS_MODULE.as_ptr()) };
        // Last: a failed init waiting for it may return as soon as the
        // count is 0.
        // SAFETY: counted once by `try_get` (type invariant).
        unsafe { crate::wait::alive_put() };
    }
}
