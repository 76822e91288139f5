// SPDX-License-Identifier: GPL-2.0

//! The table of live registrations (acquired and not yet released), for
//! debugfs. A registration enters it at acquire and leaves it at release.

use crate::registration::Registration;
use crate::sys;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use kernel::{prelude::*, sync::Arc};

/// The table, guarded by the C shim's mutex.
///
/// # Invariants
///
/// `entries` is only accessed through a [`RegistryGuard`], i.e. with
/// `pm_registry_mutex` held.
struct Registry {
    entries: UnsafeCell<KVec<Arc<Registration>>>,
}

// SAFETY: access is serialised by the mutex (type invariant), and the
// entries are `Send + Sync`.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    entries: UnsafeCell::new(KVec::new()),
};

/// Exclusive access to the table; unlocks when dropped.
pub(crate) struct RegistryGuard {
    _not_send: core::marker::PhantomData<*mut ()>,
}

/// Locks the table (may sleep).
pub(crate) fn lock() -> RegistryGuard {
    // SAFETY: FFI call; paired with the unlock in `RegistryGuard::drop`.
    unsafe { sys::pm_shim_registry_lock() };
    RegistryGuard {
        _not_send: core::marker::PhantomData,
    }
}

impl Deref for RegistryGuard {
    type Target = KVec<Arc<Registration>>;

    fn deref(&self) -> &Self::Target {
        // SAFETY: the mutex is held while the guard lives (type invariant).
        unsafe { &*REGISTRY.entries.get() }
    }
}

impl DerefMut for RegistryGuard {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // SAFETY: the mutex is held while the guard lives, and this guard is
        // the only one (type invariant).
        unsafe { &mut *REGISTRY.entries.get() }
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: FFI call; the mutex was locked by `lock`.
        unsafe { sys::pm_shim_registry_unlock() };
    }
}

/// Adds a registration.
pub(crate) fn insert(registration: Arc<Registration>) -> Result {
    lock().push(registration, GFP_KERNEL)?;
    Ok(())
}

/// Removes a registration; returns whether it was there.
pub(crate) fn remove(registration: &Registration) -> bool {
    let removed = {
        let mut entries = lock();
        let found = entries
            .iter()
            .position(|r| core::ptr::eq(&**r, registration));
        let removed = found.map(|i| swap_remove(&mut entries, i));
        if entries.is_empty() {
            // Give the buffer back: a static is never dropped.
            drop(core::mem::replace(&mut *entries, KVec::new()));
        }
        removed
    };
    // The reference, if any, drops here, outside the lock.
    removed.is_some()
}

/// Number of live registrations.
pub(crate) fn count() -> usize {
    lock().len()
}

/// Removes entry `index` (which must exist) by moving the last entry into
/// its place; returns it.
fn swap_remove<T>(entries: &mut KVec<T>, index: usize) -> T {
    let last = entries.len() - 1;
    entries.as_mut_slice().swap(index, last);
    // SAFETY: `last` is in bounds; the value is read out once and the length
    // shrinks right after, so it is never read or dropped again in the vector.
    let value = unsafe { core::ptr::read(entries.as_ptr().add(last)) };
    // SAFETY: `last < len`, and the element at `last` was moved out above.
    unsafe { entries.set_len(last) };
    value
}
