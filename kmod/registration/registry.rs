// SPDX-License-Identifier: GPL-2.0

//! The table of live registrations (acquired and not yet released), for
//! debugfs. A registration enters it at acquire and leaves it at release.
//!
//! An intrusive doubly linked list under the C shim's spinlock: inserting
//! and removing are O(1) and allocate nothing (the links live in the
//! registration, [`RegistryLinks`]). The list owns one reference to each
//! registration in it, which the core borrows ([`crate::registration::CoreRef`]).

use super::Registration;
use crate::slab::SlabArc;
use crate::sys;
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};

/// Where a registration is in the list: both null when it is in none, or
/// when it is the only one (then the list's `first`).
struct Links {
    prev: *const Registration,
    next: *const Registration,
}

/// A registration's links in the table.
///
/// # Invariants
///
/// Read and written only with the table's lock held (through a
/// [`RegistryGuard`]).
pub(crate) struct RegistryLinks(UnsafeCell<Links>);

// SAFETY: only touched under the table's spinlock (type invariant).
unsafe impl Send for RegistryLinks {}
// SAFETY: as above.
unsafe impl Sync for RegistryLinks {}

impl RegistryLinks {
    /// Links of a registration in no list.
    pub(crate) const fn new() -> Self {
        Self(UnsafeCell::new(Links {
            prev: ptr::null(),
            next: ptr::null(),
        }))
    }
}

/// The list's ends and length.
struct Entries {
    first: *const Registration,
    last: *const Registration,
    len: usize,
}

/// The table, guarded by the C shim's spinlock.
///
/// # Invariants
///
/// `entries`, and the links of every registration, are only accessed
/// through a [`RegistryGuard`], i.e. with `pm_registry_lock` held. The
/// registrations linked from `first` through `next` (and from `last`
/// through `prev`) are `len`, each kept alive by one reference that
/// `insert` gave up ([`SlabArc::into_raw`]) and `remove` takes back; one is
/// in the list exactly if its `prev` is not null or it is `first`.
struct Registry {
    entries: UnsafeCell<Entries>,
}

// SAFETY: access is serialised by the spinlock (type invariant), and the
// registrations are `Send + Sync`.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    entries: UnsafeCell::new(Entries {
        first: ptr::null(),
        last: ptr::null(),
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

    /// The links of `registration`, which the lock guards.
    #[allow(clippy::mut_from_ref)]
    fn links<'a>(&'a self, registration: &'a Registration) -> &'a mut Links {
        // SAFETY: the spinlock is held while the guard lives, and this guard
        // is the only one: nothing else touches the links meanwhile (type
        // invariants); callers hold one such borrow at a time.
        unsafe { &mut *registration.registry_links().0.get() }
    }

    /// Number of live registrations.
    pub(crate) fn len(&self) -> usize {
        self.entries().len
    }

    /// The live registrations, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Registration> {
        let mut next = self.entries().first;
        core::iter::from_fn(move || {
            // SAFETY: a registration in the list is alive while it is there,
            // and it stays there while the lock is held (type invariant).
            let registration = unsafe { next.as_ref() }?;
            next = self.links(registration).next;
            Some(registration)
        })
    }

    /// Links `registration` at the end.
    fn push_back(&mut self, registration: NonNull<Registration>) {
        // SAFETY: the spinlock is held and this guard is the only one (type
        // invariant); `registration` is alive (its reference goes to the
        // list).
        let entries = unsafe { &mut *REGISTRY.entries.get() };
        // SAFETY: as above.
        let registration = unsafe { registration.as_ref() };
        let last = entries.last;
        let links = self.links(registration);
        links.prev = last;
        links.next = ptr::null();
        // SAFETY: `last` is in the list, so alive (type invariant).
        match unsafe { last.as_ref() } {
            Some(last) => self.links(last).next = registration,
            None => entries.first = registration,
        }
        entries.last = registration;
        entries.len += 1;
    }

    /// Unlinks `registration`; false if it was not in the list.
    fn unlink(&mut self, registration: &Registration) -> bool {
        // SAFETY: the spinlock is held and this guard is the only one (type
        // invariant).
        let entries = unsafe { &mut *REGISTRY.entries.get() };
        let links = self.links(registration);
        if links.prev.is_null() && !ptr::eq(entries.first, registration) {
            return false;
        }
        let (prev, next) = (links.prev, links.next);
        links.prev = ptr::null();
        links.next = ptr::null();
        // SAFETY: the neighbours are in the list, so alive (type invariant).
        match unsafe { prev.as_ref() } {
            Some(prev) => self.links(prev).next = next,
            None => entries.first = next,
        }
        // SAFETY: as above.
        match unsafe { next.as_ref() } {
            Some(next) => self.links(next).prev = prev,
            None => entries.last = prev,
        }
        entries.len -= 1;
        true
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: FFI call; the spinlock was locked by `lock`.
        unsafe { sys::pm_shim_registry_unlock() };
    }
}

/// Adds a registration, with the reference the table keeps. It must not
/// be in the table already.
#[inline(always)]
pub(crate) fn insert(registration: SlabArc<Registration>) {
    // INVARIANT: the reference is the list's until `remove` takes it back.
    let raw = registration.into_raw();
    lock().push_back(raw);
}

/// Removes a registration; returns the table's reference if it was there.
/// The caller drops it after the lock is released.
#[inline(always)]
pub(crate) fn remove(registration: &Registration) -> Option<SlabArc<Registration>> {
    if !lock().unlink(registration) {
        return None;
    }
    // SAFETY: it was in the list: its reference was given up by `insert`
    // (`into_raw` of this registration, at this address), and is taken back
    // once, now that it is unlinked.
    Some(unsafe { SlabArc::from_raw(NonNull::from(registration)) })
}

/// Number of live registrations.
pub(crate) fn count() -> usize {
    lock().len()
}
