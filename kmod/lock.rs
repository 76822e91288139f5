// SPDX-License-Identifier: GPL-2.0

//! The lock of a registration's state: the kernel's `spinlock_t`, through a
//! lock backend of the kernel crate's [`Lock`] that calls the kernel's own
//! out-of-line lock functions where the kernel has them.
//!
//! Why: the kernel crate of Linux 6.12 takes a spinlock through
//! two out-of-line calls before the kernel's `_raw_spin_lock`
//! (`SpinLockBackend::lock`, then the C helper `rust_helper_spin_lock`), and
//! releases it through two calls where C code stores one byte. The hot path
//! takes the state lock a dozen times per registration. Here `lock` is one
//! direct call of `_raw_spin_lock`, as `spin_lock` compiles to in C, and
//! `unlock` one call of `_raw_spin_unlock` where the kernel builds it out of
//! line (lock debugging), otherwise the helper (the unlock is inline C code
//! there: nothing to call directly). Both are what `spin_lock` and
//! `spin_unlock` do on these kernels, lockdep included: `spin_lock(l)` is
//! `_raw_spin_lock(&l->rlock)` on every SMP kernel without `PREEMPT_RT`
//! whose architecture does not inline its lock functions.
//!
//! Linux 7.x's kernel crate goes through the same helpers, and its guard
//! asserts the lock held through one more out-of-line helper at every
//! lock (`spin_assert_is_held`, which does nothing without lockdep). Its
//! backend trait has two more methods (`try_lock`, `assert_is_held`: the
//! `pm_lock_backend_try_lock` configuration); here `assert_is_held` calls
//! that helper only on a lockdep kernel, as C's `lockdep_assert_held`
//! compiles to nothing elsewhere.
//!
//! [`Lock`]: kernel::sync::lock::Lock

pub(crate) use direct::{DirectSpinLockBackend, StateGuard, StateLock};

/// A [`StateLock`] of `$inner`, in the lock class named `$name`.
macro_rules! new_state_lock {
    ($inner:expr, $name:literal) => {
        ::kernel::sync::lock::Lock::<_, $crate::lock::DirectSpinLockBackend>::new(
            $inner,
            ::kernel::c_str!($name),
            ::kernel::static_lock_class!(),
        )
    };
}

mod direct {
    use kernel::{bindings, ffi::c_char, sync::lock::Backend};

    /// A spinlock taken by direct calls of the kernel's lock functions.
    pub(crate) type StateLock<T> = kernel::sync::lock::Lock<T, DirectSpinLockBackend>;

    /// A held [`StateLock`].
    pub(crate) type StateGuard<'a, T> = kernel::sync::lock::Guard<'a, T, DirectSpinLockBackend>;

    /// The backend of [`StateLock`]: a `spinlock_t`, like the kernel crate's
    /// `SpinLockBackend`, with its lock and unlock inline in the caller.
    pub(crate) struct DirectSpinLockBackend;

    /// The `raw_spinlock_t` inside a `spinlock_t`: its first member (`rlock`,
    /// which `spin_lock` passes on), at offset 0. bindgen keeps `spinlock_t`
    /// opaque, hence the cast.
    #[allow(dead_code)] // (unused where both calls go through the helpers)
    #[inline(always)]
    fn raw(ptr: *mut bindings::spinlock_t) -> *mut bindings::raw_spinlock_t {
        ptr.cast()
    }

    // SAFETY: `lock` and `unlock` take and release the `spinlock_t` that
    // `init` initialised, as `spin_lock` and `spin_unlock` do (see `lock` and
    // `unlock`), so whoever holds the guard is the only owner of the lock.
    unsafe impl Backend for DirectSpinLockBackend {
        type State = bindings::spinlock_t;
        type GuardState = ();

        #[inline(always)]
        unsafe fn init(
            ptr: *mut Self::State,
            name: *const c_char,
            key: *mut bindings::lock_class_key,
        ) {
            // SAFETY: the caller guarantees that `ptr` is valid for writes and
            // that `name` and `key` stay valid for reads for good.
            unsafe { bindings::__spin_lock_init(ptr, name, key) }
        }

        #[inline(always)]
        unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
            // On these kernels `spin_lock(l)` is `_raw_spin_lock(&l->rlock)`,
            // an exported function (lockdep's hooks inside).
            #[cfg(all(CONFIG_SMP, not(CONFIG_PREEMPT_RT), not(CONFIG_INLINE_SPIN_LOCK)))]
            let (lock, lock_ptr) = (bindings::_raw_spin_lock, raw(ptr));
            #[cfg(not(all(CONFIG_SMP, not(CONFIG_PREEMPT_RT), not(CONFIG_INLINE_SPIN_LOCK))))]
            let (lock, lock_ptr) = (bindings::spin_lock, ptr);
            // SAFETY: the caller guarantees that `ptr` points at a spinlock
            // initialised by `init`; `lock_ptr` is it, or its first member
            // `rlock` for `_raw_spin_lock`.
            unsafe { lock(lock_ptr) }
        }

        #[cfg(pm_lock_backend_try_lock)]
        #[inline(always)]
        unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
            // SAFETY: the caller guarantees that `ptr` points at a spinlock
            // initialised by `init`.
            (unsafe { bindings::spin_trylock(ptr) } != 0).then_some(())
        }

        #[cfg(pm_lock_backend_try_lock)]
        #[inline(always)]
        unsafe fn assert_is_held(ptr: *mut Self::State) {
            // `lockdep_assert_held` is empty without lockdep.
            #[cfg(CONFIG_LOCKDEP)]
            // SAFETY: the caller guarantees that `ptr` points at a spinlock
            // initialised by `init`.
            unsafe {
                bindings::spin_assert_is_held(ptr)
            }
            #[cfg(not(CONFIG_LOCKDEP))]
            let _ = ptr;
        }

        #[inline(always)]
        unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
            // `spin_unlock(l)` is `_raw_spin_unlock(&l->rlock)`, out of line
            // and exported only with `UNINLINE_SPIN_UNLOCK` (lock
            // debugging); otherwise inline C code, reached through the
            // kernel crate's helper.
            #[cfg(all(CONFIG_SMP, not(CONFIG_PREEMPT_RT), CONFIG_UNINLINE_SPIN_UNLOCK))]
            let (unlock, lock_ptr) = (bindings::_raw_spin_unlock, raw(ptr));
            #[cfg(not(all(CONFIG_SMP, not(CONFIG_PREEMPT_RT), CONFIG_UNINLINE_SPIN_UNLOCK)))]
            let (unlock, lock_ptr) = (bindings::spin_unlock, ptr);
            // SAFETY: the caller owns the lock at `ptr`, initialised by
            // `init`; `lock_ptr` is it, or its first member `rlock` for
            // `_raw_spin_unlock`.
            unsafe { unlock(lock_ptr) }
        }
    }
}
