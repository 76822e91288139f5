// SPDX-License-Identifier: GPL-2.0

//! The table of live registrations (acquired and not yet released), for
//! debugfs. A registration enters it at acquire and leaves it at release.
//!
//! The kernel crate's intrusive [`List`] under the C shim's spinlock:
//! inserting and removing are O(1) and allocate nothing (the links live in
//! the registration). The list owns one reference to each registration in
//! it, a [`ListArc`], which the core borrows
//! ([`crate::registration::CoreRef`]).
//!
//! The lock is the C shim's: the kernel crate of 6.12 has no global lock
//! (`global_lock!` came later). Every access goes through a
//! [`RegistryGuard`], which only [`lock`] makes.

use super::Registration;
use crate::sys;
use core::cell::{Cell, UnsafeCell};
use kernel::list::{List, ListArc};
use kernel::sync::{Arc, ArcBorrow};

/// The table, guarded by the C shim's spinlock.
///
/// # Invariants
///
/// Its fields are only accessed through a [`RegistryGuard`], i.e. with
/// `pm_registry_lock` held; `len` is the number of registrations in
/// `list`.
struct Registry {
    list: UnsafeCell<List<Registration>>,
    len: Cell<usize>,
}

// SAFETY: access is serialised by the spinlock (type invariant), and the
// registrations are `Send + Sync`.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    list: UnsafeCell::new(List::new()),
    len: Cell::new(0),
};

/// Access to the table; unlocks when dropped. Holds a spinlock: nothing
/// may sleep while it lives.
///
/// # Invariants
///
/// The table's spinlock is held while this value lives, and it is the only
/// such value.
pub(crate) struct RegistryGuard {
    _not_send: core::marker::PhantomData<*mut ()>,
}

/// Locks the table.
pub(crate) fn lock() -> RegistryGuard {
    // SAFETY: FFI call; paired with the unlock in `RegistryGuard::drop`.
    unsafe { sys::pm_shim_registry_lock() };
    // INVARIANT: locked just above.
    RegistryGuard {
        _not_send: core::marker::PhantomData,
    }
}

impl RegistryGuard {
    /// The list, which the lock guards.
    fn list(&self) -> &List<Registration> {
        // SAFETY: the lock is held and this guard is the only one (type
        // invariant): nothing changes the list while `self` is borrowed.
        unsafe { &*REGISTRY.list.get() }
    }

    /// The list, which the lock guards, to change.
    fn list_mut(&mut self) -> &mut List<Registration> {
        // SAFETY: the lock is held and this guard is the only one (type
        // invariant), borrowed mutably: no other reference to the list.
        unsafe { &mut *REGISTRY.list.get() }
    }

    /// Number of live registrations.
    pub(crate) fn len(&self) -> usize {
        REGISTRY.len.get()
    }

    /// The live registrations, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ArcBorrow<'_, Registration>> {
        self.list().iter()
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: FFI call; the spinlock was locked by `lock` (type
        // invariant).
        unsafe { sys::pm_shim_registry_unlock() };
    }
}

/// Adds a registration, with the reference the table keeps.
#[inline(always)]
pub(crate) fn insert(registration: ListArc<Registration>) {
    let mut table = lock();
    table.list_mut().push_back(registration);
    // INVARIANT: one more in the list.
    REGISTRY.len.set(REGISTRY.len.get() + 1);
}

/// Removes a registration; returns the table's reference if it was there.
/// The caller drops it after the lock is released.
#[inline(always)]
pub(crate) fn remove(registration: &Registration) -> Option<Arc<Registration>> {
    let mut table = lock();
    // SAFETY: this is the only list a registration is ever put in.
    let removed = unsafe { table.list_mut().remove(registration) }?;
    // INVARIANT: one less in the list.
    REGISTRY.len.set(REGISTRY.len.get() - 1);
    Some(removed.into_arc())
}

/// Number of live registrations.
pub(crate) fn count() -> usize {
    lock().len()
}
