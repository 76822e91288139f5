// SPDX-License-Identifier: GPL-2.0

//! Values handed to C as a `void *` and borrowed back in its callbacks: the
//! core's `client_context` (acquire to release) and the data of the
//! provider's free callback (pin to callback or unpin).
//!
//! The kernel crate's `ForeignOwnable` has another shape on each kernel of
//! the matrix (`*const` or `*mut`, alignment, mutable borrows), and lacks
//! [`Foreign::release_shared`]: this is the part of it this module uses.

use kernel::sync::{Arc, ArcBorrow};
use kernel::{ffi::c_void, prelude::*};

/// A value C keeps as a `void *`.
///
/// # Safety
///
/// Implementers guarantee that a pointer from [`Foreign::into_foreign`]
/// may be given to [`Foreign::borrow`] any number of times until it is
/// given to [`Foreign::from_foreign`], once, which takes the value back.
pub(crate) unsafe trait Foreign: Sized {
    /// What a callback gets while C keeps the value.
    type Borrowed<'a>;

    /// The pointer C keeps.
    fn into_foreign(self) -> *mut c_void;

    /// Borrows the value behind `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`Foreign::into_foreign`] and has not been given to
    /// [`Foreign::from_foreign`]; it is not, while the borrow lives.
    unsafe fn borrow<'a>(ptr: *mut c_void) -> Self::Borrowed<'a>;

    /// Takes the value behind `ptr` back.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`Foreign::into_foreign`] and is given here once; no
    /// borrow of it lives on.
    unsafe fn from_foreign(ptr: *mut c_void) -> Self;

    /// Gives up this value when others still share what it owns, and
    /// returns it when it would be the last: its drop then frees. A value
    /// that shares nothing is always the last.
    #[inline(always)]
    fn release_shared(self) -> Option<Self> {
        Some(self)
    }
}

// SAFETY: the pointer is the box's own allocation, freed only by the
// `KBox` that `from_foreign` rebuilds.
unsafe impl<T: 'static> Foreign for KBox<T> {
    type Borrowed<'a> = &'a T;

    fn into_foreign(self) -> *mut c_void {
        KBox::into_raw(self).cast()
    }

    unsafe fn borrow<'a>(ptr: *mut c_void) -> &'a T {
        // SAFETY: from `into_foreign`, not taken back while the borrow
        // lives (function's requirements).
        unsafe { &*ptr.cast::<T>() }
    }

    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: from `KBox::into_raw` in `into_foreign`, given back once
        // (function's requirements).
        unsafe { KBox::from_raw(ptr.cast()) }
    }
}

// SAFETY: the pointer is `Arc::into_raw`'s, which `from_foreign` takes back
// once (`Arc::from_raw`); until then the reference it stands for keeps the
// object alive for every borrow.
unsafe impl<T: Send + Sync + 'static> Foreign for Arc<T> {
    type Borrowed<'a> = ArcBorrow<'a, T>;

    #[inline(always)]
    fn into_foreign(self) -> *mut c_void {
        Arc::into_raw(self).cast_mut().cast()
    }

    #[inline(always)]
    unsafe fn borrow<'a>(ptr: *mut c_void) -> ArcBorrow<'a, T> {
        // SAFETY: from `Arc::into_raw` in `into_foreign`, and not taken back
        // while the borrow lives (function's requirements): its reference
        // keeps the count above 0.
        unsafe { ArcBorrow::from_raw(ptr.cast_const().cast()) }
    }

    #[inline(always)]
    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: from `Arc::into_raw` in `into_foreign`, given back once
        // (function's requirements).
        unsafe { Arc::from_raw(ptr.cast_const().cast()) }
    }

    #[inline(always)]
    fn release_shared(self) -> Option<Self> {
        // A count above one is decremented and this reference is gone; the
        // last comes back (its count 1 again) for the caller to drop.
        // `into_unique_or_drop` is a method on 6.12, an associated function
        // on 7.x: this call is both.
        Arc::into_unique_or_drop(self).map(Arc::from)
    }
}
