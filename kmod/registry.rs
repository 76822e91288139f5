// SPDX-License-Identifier: GPL-2.0

//! The table of live registrations (acquired and not yet released), for
//! debugfs. A registration enters it at acquire and leaves it at release.
//!
//! An intrusive list ([`List`]) under the C shim's spinlock: inserting and
//! removing are O(1) and allocate nothing (the links live in the
//! registration).

use crate::registration::Registration;
use crate::sys;
use core::cell::UnsafeCell;
use kernel::{
    list::{List, ListArc},
    sync::{Arc, ArcBorrow},
};

/// The list and its length.
struct Entries {
    list: List<Registration>,
    len: usize,
}

/// The table, guarded by the C shim's spinlock.
///
/// # Invariants
///
/// `entries` is only accessed through a [`RegistryGuard`], i.e. with
/// `pm_registry_lock` held. `len` is the number of registrations in `list`.
/// A [`Registration`] is never put in any other list with ID 0.
struct Registry {
    entries: UnsafeCell<Entries>,
}

// SAFETY: access is serialised by the spinlock (type invariant), and the
// entries are `Send + Sync`.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    entries: UnsafeCell::new(Entries {
        list: List::new(),
        len: 0,
    }),
};

/// Exclusive access to the table; unlocks when dropped. Holds a spinlock:
/// nothing may sleep while it lives.
pub(crate) struct RegistryGuard {
    _not_send: core::marker::PhantomData<*mut ()>,
}

/// Locks the table.
pub(crate) fn lock() -> RegistryGuard {
    // SAFETY: FFI call; paired with the unlock in `RegistryGuard::drop`.
    unsafe { sys::pm_shim_registry_lock() };
    RegistryGuard {
        _not_send: core::marker::PhantomData,
    }
}

impl RegistryGuard {
    fn entries(&self) -> &Entries {
        // SAFETY: the spinlock is held while the guard lives (type invariant).
        unsafe { &*REGISTRY.entries.get() }
    }

    fn entries_mut(&mut self) -> &mut Entries {
        // SAFETY: the spinlock is held while the guard lives, and this guard
        // is the only one (type invariant).
        unsafe { &mut *REGISTRY.entries.get() }
    }

    /// Number of live registrations.
    pub(crate) fn len(&self) -> usize {
        self.entries().len
    }

    /// The live registrations, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ArcBorrow<'_, Registration>> {
        self.entries().list.iter()
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: FFI call; the spinlock was locked by `lock`.
        unsafe { sys::pm_shim_registry_unlock() };
    }
}

/// Adds a registration (its one list reference).
pub(crate) fn insert(registration: ListArc<Registration>) {
    let mut guard = lock();
    let entries = guard.entries_mut();
    entries.list.push_back(registration);
    entries.len += 1;
}

/// Removes a registration; returns the table's reference if it was there.
/// The caller drops it after the lock is released.
pub(crate) fn remove(registration: &Registration) -> Option<Arc<Registration>> {
    let mut guard = lock();
    let entries = guard.entries_mut();
    // SAFETY: registrations are only ever put in this list (type invariant).
    let removed = unsafe { entries.list.remove(registration) }?;
    entries.len -= 1;
    Some(removed.into_arc())
}

/// Number of live registrations.
pub(crate) fn count() -> usize {
    lock().len()
}
