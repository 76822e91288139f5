// SPDX-License-Identifier: GPL-2.0

//! The table of live registrations (acquired and not yet released), for
//! debugfs. A registration enters it at acquire and leaves it at release.
//!
//! An intrusive doubly linked list under the C shim's spinlock: inserting
//! and removing are O(1) and allocate nothing (the links live in the
//! registration, [`RegistryLinks`]). The list owns one reference to each
//! registration in it, which the core borrows ([`crate::registration::CoreRef`]).
//!
//! The lock is the C shim's: the
//! kernel crate of 6.12 has no global lock (`global_lock!` came later).
//! Every access goes through a [`RegistryGuard`], which only [`lock`] makes;
//! the links are `Cell`s, so the guard needs no mutable aliasing.

use super::Registration;
use crate::sys;
use core::cell::Cell;
use core::ptr;
use kernel::sync::Arc;

/// A registration's links in the table: both null when it is in none, or
/// when it is the only one (then the list's `first`).
///
/// # Invariants
///
/// Read and written only with the table's lock held (through a
/// [`RegistryGuard`]).
pub(crate) struct RegistryLinks {
    prev: Cell<*const Registration>,
    next: Cell<*const Registration>,
}

// SAFETY: only touched under the table's spinlock (type invariant).
unsafe impl Send for RegistryLinks {}
// SAFETY: as above.
unsafe impl Sync for RegistryLinks {}

impl RegistryLinks {
    /// Links of a registration in no list.
    pub(crate) const fn new() -> Self {
        Self {
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
        }
    }
}

/// The table, guarded by the C shim's spinlock.
///
/// # Invariants
///
/// Its fields, and the links of every registration, are only accessed
/// through a [`RegistryGuard`], i.e. with `pm_registry_lock` held. The
/// registrations linked from `first` through `next` (and from `last`
/// through `prev`) are `len`, each kept alive by one reference that
/// `insert` gave up ([`Arc::into_raw`]) and `remove` takes back; one is
/// in the list exactly if its `prev` is not null or it is `first`.
struct Registry {
    first: Cell<*const Registration>,
    last: Cell<*const Registration>,
    len: Cell<usize>,
}

// SAFETY: access is serialised by the spinlock (type invariant), and the
// registrations are `Send + Sync`.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    first: Cell::new(ptr::null()),
    last: Cell::new(ptr::null()),
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
    /// The table, which the lock guards.
    fn table(&self) -> &'static Registry {
        &REGISTRY
    }

    /// The links of `registration`, which the lock guards.
    fn links<'a>(&'a self, registration: &'a Registration) -> &'a RegistryLinks {
        &registration.links
    }

    /// The registration at `entry`, a pointer read from the table or from
    /// the links of a registration in it (null for none).
    fn member(&self, entry: *const Registration) -> Option<&Registration> {
        // SAFETY: a pointer read from the table or the links under the lock
        // is null or a registration in the list, which is alive while it is
        // there, and it stays there while the lock is held (type
        // invariants).
        unsafe { entry.as_ref() }
    }

    /// Number of live registrations.
    pub(crate) fn len(&self) -> usize {
        self.table().len.get()
    }

    /// The live registrations, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Registration> {
        let mut next = self.table().first.get();
        core::iter::from_fn(move || {
            let registration = self.member(next)?;
            next = self.links(registration).next.get();
            Some(registration)
        })
    }

    /// Links `registration`, whose reference the list now owns, at the end.
    fn push_back(&mut self, registration: &Registration) {
        let table = self.table();
        let last = table.last.get();
        let links = self.links(registration);
        links.prev.set(last);
        links.next.set(ptr::null());
        match self.member(last) {
            Some(last) => self.links(last).next.set(registration),
            None => table.first.set(registration),
        }
        table.last.set(registration);
        table.len.set(table.len.get() + 1);
    }

    /// Unlinks `registration`; false if it was not in the list.
    fn unlink(&mut self, registration: &Registration) -> bool {
        let table = self.table();
        let links = self.links(registration);
        let (prev, next) = (links.prev.get(), links.next.get());
        if prev.is_null() && !ptr::eq(table.first.get(), registration) {
            return false;
        }
        links.prev.set(ptr::null());
        links.next.set(ptr::null());
        match self.member(prev) {
            Some(prev) => self.links(prev).next.set(next),
            None => table.first.set(next),
        }
        match self.member(next) {
            Some(next) => self.links(next).prev.set(prev),
            None => table.last.set(prev),
        }
        table.len.set(table.len.get() - 1);
        true
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: FFI call; the spinlock was locked by `lock` (type
        // invariant).
        unsafe { sys::pm_shim_registry_unlock() };
    }
}

/// Adds a registration, with the reference the table keeps. It must not
/// be in the table already.
#[inline(always)]
pub(crate) fn insert(registration: Arc<Registration>) {
    let mut table = lock();
    // INVARIANT: the reference is the list's until `remove` takes it back;
    // the registration lives as long as the list holds it.
    let raw = Arc::into_raw(registration);
    // SAFETY: `raw` is the registration whose reference the list now owns.
    table.push_back(unsafe { &*raw });
}

/// Removes a registration; returns the table's reference if it was there.
/// The caller drops it after the lock is released.
#[inline(always)]
pub(crate) fn remove(registration: &Registration) -> Option<Arc<Registration>> {
    if !lock().unlink(registration) {
        return None;
    }
    // SAFETY: it was in the list: its reference was given up by `insert`
    // (`into_raw` of this registration, at this address), and is taken back
    // once, now that it is unlinked.
    Some(unsafe { Arc::from_raw(registration) })
}

/// Number of live registrations.
pub(crate) fn count() -> usize {
    lock().len()
}
