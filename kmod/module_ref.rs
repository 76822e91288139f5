// SPDX-License-Identifier: GPL-2.0

//! A reference on this module: while one exists, `rmmod` fails with `EBUSY`.
//! Each registration holds one from acquire until its last user is gone.

use kernel::bindings;

/// One reference on this module, dropped with the value.
///
/// # Invariants
///
/// A reference on `THIS_MODULE` was taken and is owned by this value.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference, unless the module is being unloaded.
    pub(crate) fn try_get() -> Option<Self> {
        // SAFETY: `THIS_MODULE` is this module, alive while its code runs.
        let got = unsafe { bindings::try_module_get(crate::THIS_MODULE.as_ptr()) };
        // INVARIANT: the reference was taken when `got`. The value is made
        // only then: `got.then_some(Self(()))` would build it first and,
        // when `got` is false, drop it, putting a reference never taken
        // (the module_put underflow of issue 11, while the module is going).
        if got {
            Some(Self(()))
        } else {
            None
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference (type invariant).
        unsafe { bindings::module_put(crate::THIS_MODULE.as_ptr()) };
    }
}
