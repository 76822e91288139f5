// SPDX-License-Identifier: GPL-2.0

//! [`KmallocArc`]: reference-counted objects in one kmalloc allocation
//! each, counted with inline atomics, each holding a module reference; not
//! the kernel crate's `Arc`.
//!
//! Why: on Linux 6.12 the kernel crate allocates an `Arc` through
//! `krealloc` (three out-of-line calls before the slab), and takes and drops
//! its references through C helpers (`refcount_inc`, `refcount_dec_and_test`
//! and an out-of-line drop). A registration is made and freed on every
//! register/deregister cycle, and the free callback takes a reference: this
//! is the allocation NVIDIA's module makes with one `kzalloc`. Here it is
//! one `__kmalloc_noprof` (what `kmalloc` of a size not known to the C
//! compiler is) and one `kfree`.
//!
//! Not a slab cache of the module's own: creating one at init makes the
//! kernel register it in sysfs, and 6.12's `sysfs_slab_add` leaks the
//! kobject's name when an allocation there fails (suite rel-failslab found
//! it: kmemleak, 29 objects). The kmalloc class is the same 128 bytes.
//!
//! Each object holds a reference on this module ([`ModuleRef`]), put only
//! after the object was freed: the module outlives every object.
//!
//! The count saturates as `refcount_t` does: once past `i32::MAX` it stays
//! at [`SATURATED`] and the object is never freed (a leak, never a
//! use-after-free). A registration has at most three references.

use crate::module_ref::ModuleRef;
use core::marker::PhantomData;
use core::mem::{align_of, offset_of, size_of};
use core::ops::Deref;
use core::ptr::{self, NonNull};
use core::sync::atomic::{fence, AtomicU32, Ordering};
use kernel::{bindings, ffi::c_void, prelude::*};

/// Where a count that overflowed stays (`refcount_t`'s value).
const SATURATED: u32 = 0xc000_0000;

/// Sets the count to [`SATURATED`] if `old`, its value before a change,
/// was past the range a count may take.
#[inline(always)]
fn saturate_if_overflowed(refcount: &AtomicU32, old: u32) {
    if old > i32::MAX as u32 {
        refcount.store(SATURATED, Ordering::Relaxed);
    }
}

/// The size of the allocation of a `KmallocArc<T>` (the count, padding, the
/// object).
pub(crate) const fn object_size<T: Send + Sync + 'static>() -> usize {
    size_of::<KmallocObject<T>>()
}

/// The allocation: the object, then the count and the module reference.
/// The object first: the pointer C keeps ([`KmallocArc::into_raw`]) is the
/// allocation's, so a callback addresses the object's fields and the count
/// from the one register.
#[repr(C)]
struct KmallocObject<T> {
    value: T,
    refcount: AtomicU32,
    module: ModuleRef,
}

/// A counted reference to a `T` in its own allocation; the object goes with
/// the last one.
///
/// # Invariants
///
/// `0` points at a live, initialised, kmalloc'd `KmallocObject<T>`, and
/// this value owns one of its counted references. The object is never
/// moved (it may be pinned).
pub(crate) struct KmallocArc<T: Send + Sync + 'static>(NonNull<KmallocObject<T>>);

// SAFETY: `T: Send + Sync`, and the count is atomic: a reference
// may be dropped, or the object read, on any thread, as with `Arc`.
unsafe impl<T: Send + Sync + 'static> Send for KmallocArc<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync + 'static> Sync for KmallocArc<T> {}

impl<T: Send + Sync + 'static> KmallocArc<T> {
    /// Allocates a `T` and initialises it in place with
    /// `init`, holding `module` until the object goes.
    #[inline(always)]
    pub(crate) fn pin_init<E: From<kernel::alloc::AllocError>>(
        module: ModuleRef,
        init: impl PinInit<T, E>,
    ) -> core::result::Result<Self, E> {
        if align_of::<KmallocObject<T>>() > 8 {
            // Not for us: kmalloc aligns to 8 at least, not more.
            return Err(kernel::alloc::AllocError.into());
        }
        // SAFETY: FFI call; kmalloc's alignment (8 at least) covers the
        // object's (checked above).
        let object = unsafe {
            bindings::__kmalloc_noprof(size_of::<KmallocObject<T>>(), bindings::GFP_KERNEL)
        };
        let Some(object) = NonNull::new(object.cast::<KmallocObject<T>>()) else {
            return Err(kernel::alloc::AllocError.into());
        };
        let raw = object.as_ptr();
        // SAFETY: `raw` is a fresh allocation of the object's size and
        // alignment (kmalloc's), ours alone; the object is never moved.
        unsafe {
            ptr::write(&raw mut (*raw).refcount, AtomicU32::new(1));
            ptr::write(&raw mut (*raw).module, module);
            if let Err(e) = init.__pinned_init(&raw mut (*raw).value) {
                // Initialisation failed: nothing of `value` to drop.
                let module = ptr::read(&raw const (*raw).module);
                bindings::kfree(raw.cast());
                drop(module);
                return Err(e);
            }
        }
        // INVARIANT: initialised above, with the one reference returned.
        Ok(Self(object))
    }

    /// A borrow of this reference.
    #[inline(always)]
    pub(crate) fn as_borrow(&self) -> KmallocBorrow<'_, T> {
        // INVARIANT: `self` lives as long as the borrow.
        KmallocBorrow(self.0, PhantomData)
    }

    /// The pointer to the object this reference was, as
    /// [`KmallocArc::from_raw`] takes it back.
    #[inline(always)]
    pub(crate) fn into_raw(self) -> NonNull<T> {
        let object = self.0;
        core::mem::forget(self);
        // SAFETY: in bounds of the live object (type invariant).
        unsafe { NonNull::new_unchecked(&raw mut (*object.as_ptr()).value) }
    }

    /// Takes back a reference given up by [`KmallocArc::into_raw`].
    ///
    /// # Safety
    ///
    /// `ptr` came from [`KmallocArc::into_raw`] of a `KmallocArc<T>`, and is given
    /// here once.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: `into_raw` gave the `value` field of a live object, which
        // the reference it gave up keeps alive (function's requirements).
        let object = unsafe { Self::object_of(ptr) };
        // INVARIANT: the reference `into_raw` gave up.
        Self(object)
    }

    /// The object whose value `value` is.
    ///
    /// # Safety
    ///
    /// `value` points at the `value` field of a live `KmallocObject<T>`.
    #[inline(always)]
    unsafe fn object_of(value: NonNull<T>) -> NonNull<KmallocObject<T>> {
        // SAFETY: the object starts that far before its `value` field, in
        // the same allocation, at an address that is not null (function's
        // requirements).
        unsafe {
            NonNull::new_unchecked(
                value
                    .as_ptr()
                    .cast::<u8>()
                    .sub(offset_of!(KmallocObject<T>, value))
                    .cast(),
            )
        }
    }

    /// Drops the object and gives its memory back; the last reference went.
    ///
    /// # Safety
    ///
    /// `object` is live, and no reference to it is left.
    #[inline(never)]
    unsafe fn free(object: NonNull<KmallocObject<T>>) {
        let raw = object.as_ptr();
        // SAFETY: the object is live and ours alone (function's
        // requirements); its module reference is put only once its memory
        // is freed.
        unsafe {
            ptr::drop_in_place(&raw mut (*raw).value);
            let module = ptr::read(&raw const (*raw).module);
            bindings::kfree(raw.cast());
            drop(module);
        }
    }
}

impl<T: Send + Sync + 'static> Deref for KmallocArc<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: live while `self` is (type invariant).
        unsafe { &(*self.0.as_ptr()).value }
    }
}

impl<T: Send + Sync + 'static> Drop for KmallocArc<T> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: live while `self` is (type invariant).
        let refcount = unsafe { &(*self.0.as_ptr()).refcount };
        // Release: our uses of the object happen before its free, on
        // whichever thread drops the last reference (which then acquires).
        let old = refcount.fetch_sub(1, Ordering::Release);
        if old != 1 {
            saturate_if_overflowed(refcount, old);
            return;
        }
        fence(Ordering::Acquire);
        // SAFETY: that was the last reference.
        unsafe { Self::free(self.0) };
    }
}

impl<T: Send + Sync + 'static> From<KmallocBorrow<'_, T>> for KmallocArc<T> {
    /// Another reference to the borrowed object.
    #[inline(always)]
    fn from(borrow: KmallocBorrow<'_, T>) -> Self {
        // SAFETY: live while the borrow is (its invariant).
        let refcount = unsafe { &(*borrow.0.as_ptr()).refcount };
        // Relaxed, as `Arc`: a reference exists, so the count is above 0 and
        // the object stays.
        let old = refcount.fetch_add(1, Ordering::Relaxed);
        saturate_if_overflowed(refcount, old);
        // INVARIANT: the reference just counted.
        Self(borrow.0)
    }
}

/// A borrowed [`KmallocArc`]: the object stays alive while it lives, and a
/// counted reference can be made from it.
///
/// # Invariants
///
/// `0` points at a live `KmallocObject<T>`, one of whose references lives at
/// least for `'a`.
pub(crate) struct KmallocBorrow<'a, T: Send + Sync + 'static>(
    NonNull<KmallocObject<T>>,
    PhantomData<&'a T>,
);

impl<T: Send + Sync + 'static> Clone for KmallocBorrow<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Send + Sync + 'static> Copy for KmallocBorrow<'_, T> {}

impl<T: Send + Sync + 'static> KmallocBorrow<'_, T> {
    /// Borrows the object that a reference given up by
    /// [`KmallocArc::into_raw`] points at.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`KmallocArc::into_raw`], and that reference is not
    /// taken back while the borrow lives.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: `into_raw` gave the `value` field of a live object, which
        // the reference it gave up keeps alive (function's requirements).
        let object = unsafe { KmallocArc::object_of(ptr) };
        // INVARIANT: that reference lives on while the borrow does.
        Self(object, PhantomData)
    }
}

impl<'a, T: Send + Sync + 'static> Deref for KmallocBorrow<'a, T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: live for `'a` (type invariant).
        unsafe { &(*self.0.as_ptr()).value }
    }
}

// SAFETY: the pointer is `into_raw`'s, which `from_raw` takes back once;
// until then the reference it stands for keeps the object alive for every
// borrow (`KmallocBorrow::from_raw`'s requirements).
unsafe impl<T: Send + Sync + 'static> crate::foreign::Foreign for KmallocArc<T> {
    type Borrowed<'a> = KmallocBorrow<'a, T>;

    #[inline(always)]
    fn into_foreign(self) -> *mut c_void {
        self.into_raw().as_ptr().cast()
    }

    #[inline(always)]
    unsafe fn borrow<'a>(ptr: *mut c_void) -> KmallocBorrow<'a, T> {
        // SAFETY: from `into_foreign`, i.e. `into_raw` (not null), and not
        // taken back while the borrow lives (function's requirements).
        unsafe { KmallocBorrow::from_raw(NonNull::new_unchecked(ptr.cast())) }
    }

    #[inline(always)]
    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: from `into_foreign`, i.e. `into_raw`, given back once
        // (function's requirements).
        unsafe { Self::from_raw(NonNull::new_unchecked(ptr.cast())) }
    }

    #[inline(always)]
    fn release_shared(self) -> Option<Self> {
        // SAFETY: live while `self` is (type invariant).
        let refcount = unsafe { &(*self.0.as_ptr()).refcount };
        let mut count = refcount.load(Ordering::Relaxed);
        // Decrements unless this is the last reference (the count cannot
        // rise from 1 meanwhile: nothing else has one to clone from).
        while count > 1 {
            match refcount.compare_exchange_weak(
                count,
                count - 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    saturate_if_overflowed(refcount, count);
                    // The reference is given up: the drop must not run.
                    core::mem::forget(self);
                    return None;
                }
                Err(now) => count = now,
            }
        }
        Some(self)
    }
}
