// SPDX-License-Identifier: GPL-2.0

//! A registration: one user range the core asked us about, from acquire to
//! release, and the state machine of its pages.
//!
//! Ownership, which is what makes the free callback safe:
//! - the [`registry`] owns one reference ([`Arc`]) from acquire to
//!   release, which the core borrows as its `client_context` ([`CoreRef`])
//!   and release takes back;
//! - while pages are pinned with a free callback, the provider owns another
//!   (the callback's data), given back by an unpin that put the pages
//!   before any callback (the state says so: the driver's 0 does not) or
//!   consumed by the callback itself, so the context outlives any
//!   invalidation still running when the core releases it. The driver's
//!   put unpins only in the process that pinned; a deregistration from any
//!   other process leaves the pages pinned and that reference with the
//!   provider ([`Stage::LeftToOwner`]) until the owner frees the memory or
//!   exits, and the callback ends the registration;
//! - the registration holds a module reference until its last reference
//!   goes ([`Registration::module`]).
//!
//! Resources ([`Pinned`]) live in the state, or with the one thread that
//! took them out to call the provider without our lock held (`in_flight`).
//! The provider is never called with our lock held: the free callback runs
//! under the provider's lock, and so do its unpin calls.
//!
//! Once an invalidation (the free callback) starts, dma_unmap/put_pages
//! called by the core from inside it (same task), or while or after it runs
//! (other tasks), do nothing; the callback frees the dead mapping and page
//! table once the core's invalidate returned. Whoever holds the resources
//! when the invalidation ends frees them. The driver frees the page table
//! and its mappings itself when the callback returns, so the callback first
//! waits (asleep, woken by the reader) for any thread reading them without
//! the driver lock: a dma_unmap in flight, whichever core call it serves
//! (put_pages and release unmap what a failed dma_unmap left before they
//! unpin). A put_pages from the pinning process that returns 0 after the
//! callback ran (the driver says 0 for a page table the callback unlinked)
//! leaves the callback's reference to the callback.
//!
//! The driver's put does not wait for a callback either: from 515 to 530 it
//! reads the page table on entry, before its lock, so a put racing the
//! callback there reads a page table the driver freed once the callback
//! returned. The callback cannot wait for that put (the put then blocks on
//! the driver lock the callback holds): no client closes that window; ours
//! keeps it to the instructions between our unlock and the driver's read.
//!
//! The live registrations are also linked into the [`registry`] (debugfs),
//! through links inside the registration itself.
//!
//! # Locks, in the order they are taken
//!
//! 1. The driver lock (the NVIDIA driver's, around its pin, map and put
//!    calls): the provider calls the free callback with it held. Our code
//!    never takes it and calls no provider function with a lock of ours
//!    held, so it is always outermost.
//! 2. The core's mapping lock of an MR: taken by the core's invalidate,
//!    which the free callback calls holding the driver lock and none of
//!    ours. The core may call dma_unmap and put_pages with it held; they
//!    take the state lock only around their hand-off.
//! 3. The registry lock ([`registry::lock`]): the list of live
//!    registrations and every registration's list links. debugfs
//!    holds it while it takes state locks; acquire and release take it
//!    alone.
//! 4. The state lock of one registration ([`State`]): its pages, SG table,
//!    stage, in-flight operation and invalidation. Innermost: nothing is
//!    called and no other lock taken with it held, and no two state locks
//!    are ever held together.
//!
//! # Who holds which reference
//!
//! - the registry: one, from acquire to release, lent to the core
//!   ([`CoreRef`], the core's `client_context`);
//! - the provider: one while invalidating pages are pinned (the free
//!   callback's data), until an unpin without a callback takes it back or
//!   the callback consumes it;
//! - every reference: a module reference while the registration lives
//!   ([`ModuleRef`]).
//!
//! The state machine, its states and the transitions between them, is in
//! [`state`]; acquire, the in-flight hand-off, the core's calls and the free
//! callback each have their own submodule.

mod acquire;
mod core_calls;
mod free_callback;
mod in_flight;
pub(crate) mod registry;
mod state;
pub(crate) mod stranded;

use crate::foreign::Foreign;
use crate::module_ref::ModuleRef;
use crate::range::GpuRange;
use crate::stats::{ErrorKind, Failure};
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::list::{ListArc, ListLinks};
use kernel::sync::{new_spinlock, ArcBorrow, SpinLock};
use kernel::{bindings, ffi::c_void, prelude::*};
use state::{Op, Stage, State};

/// Pinned pages of a registration (its free callback is the registration's).
type Pinned = crate::p2p::Pinned<Registration>;

/// How a registration pins its pages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PinKind {
    /// `nvidia_p2p_get_pages` with a free callback; invalidated on cudaFree.
    Invalidating,
    /// `nvidia_p2p_get_pages_persistent`: memory stays until unpinned.
    Persistent,
}

impl PinKind {
    fn name(self) -> &'static str {
        match self {
            PinKind::Invalidating => "invalidating",
            PinKind::Persistent => "persistent",
        }
    }
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One registration (one acquire).
#[pin_data]
pub(crate) struct Registration {
    #[pin]
    state: SpinLock<State>,
    /// Links in the [`registry`]'s list, which its lock guards.
    #[pin]
    links: ListLinks,
    range: GpuRange,
    /// The core's ticket, from its get_pages: valid once the stage (read
    /// under the state lock) is [`Stage::GotPages`]. Written once, under
    /// the lock, as the stage becomes that, and never again: a thread that
    /// saw that stage reads it after dropping the lock, and the free
    /// callback keeps nothing of its critical section across the unlock.
    core_context: AtomicU64,
    /// For the log and debugfs only (wraps after 2^32 registrations).
    id: u32,
    kind: PinKind,
    /// The task of a free callback that is inside the core's invalidate
    /// for this registration ([`in_core_mark`]), with [`IN_CORE_WAITED`]
    /// set once a release sleeps until it comes out; 0 otherwise. Set under
    /// the state lock, where release looks first. The task, not a flag: a
    /// release on that same task (a core that releases from inside its
    /// invalidation) must not wait for itself.
    in_core: AtomicU32,
    /// This module's reference, put when the registration goes. The last
    /// field, so dropped after every other one: the state's pages, SG
    /// table and in-flight resources are gone before the module may be.
    /// The kernel crate's `Arc` drops the value and then frees its
    /// allocation, so the put comes before that `kfree`: what is left of
    /// the module's code after the put is the rest of the `Arc`'s drop
    /// (the `kfree`, the crate's generic code compiled into this module)
    /// and the return to whoever dropped the last reference. The put
    /// cannot come later without an allocation of our own.
    module: ModuleRef,
}

/// [`Registration::in_core`]: a release sleeps until the callback comes
/// out of the core.
const IN_CORE_WAITED: u32 = 1;

/// [`Registration::in_core`]'s mark of the calling task: its thread id
/// (positive, at most `PID_MAX_LIMIT`, 2^22), shifted past
/// [`IN_CORE_WAITED`]; never 0 in process context.
fn in_core_mark() -> u32 {
    crate::wait::current_task_id() << 1
}

// The registry's list holds registrations: one list, so one `ListArc`
// each, made with the registration and kept by the registry until release
// (no count of `ListArc`s needed).
kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Registration { untracked; }
}
peermem_list_item!(Registration, links);

/// The size of a registration's allocation by the kernel crate's `Arc`:
/// the layout of its (`repr(C)`) `ArcInner`, a `refcount_t` padded to the
/// registration's alignment, then the registration.
pub(crate) const fn allocation_size() -> usize {
    let align = core::mem::align_of::<Registration>();
    core::mem::size_of::<bindings::refcount_t>().next_multiple_of(align)
        + core::mem::size_of::<Registration>()
}

// The registration's allocation takes at most 128 bytes on a kernel
// without lock debugging (a 4-byte spinlock): 64 KiB registrations cost
// 160 bytes with their SG table, not 224.
const _: () = assert!(core::mem::size_of::<bindings::spinlock_t>() > 4 || allocation_size() <= 128);

/// The core's handle on a registration, from acquire to release: the
/// registry's reference, borrowed. A registration is in the [`registry`]
/// from the end of acquire until the core's release takes it out, and only
/// release does, so the core holds no count of its own: one increment at
/// acquire and one decrement at release fewer.
///
/// # Invariants
///
/// `0` is the address of a registration (in its `Arc`) that is in the
/// registry, put there by the acquire that made this value; it stays
/// there until [`Registration::release`] consumes this value.
pub(crate) struct CoreRef(NonNull<Registration>);

impl CoreRef {
    /// The registration; valid while `self` lives (type invariant).
    fn registration(&self) -> &Registration {
        // SAFETY: the registry's reference keeps it alive while `self`
        // lives (type invariant).
        unsafe { self.0.as_ref() }
    }
}

// SAFETY: `borrow` gives an `ArcBorrow` of the registry's reference, which
// lives until `from_foreign`'s value is given to `Registration::release`;
// the pointer is `CoreRef`'s own, so `from_foreign` gives back the `CoreRef`
// `into_foreign` took (and its invariant).
unsafe impl Foreign for CoreRef {
    type Borrowed<'a> = ArcBorrow<'a, Registration>;

    #[inline(always)]
    fn into_foreign(self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    #[inline(always)]
    unsafe fn borrow<'a>(ptr: *mut c_void) -> ArcBorrow<'a, Registration> {
        // SAFETY: `ptr` is a `CoreRef`'s (from `into_foreign`, not yet taken
        // back: function's requirements): the address of a registration in
        // its `Arc` (what `Arc::into_raw` gives), and the registry's
        // reference keeps the registration alive until release, which the
        // borrow does not outlive.
        unsafe { ArcBorrow::from_raw(ptr.cast_const().cast()) }
    }

    #[inline(always)]
    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: `ptr` came from `into_foreign` (function's requirements),
        // i.e. from a `CoreRef`'s `NonNull`.
        // INVARIANT: that `CoreRef`'s, given back once.
        Self(unsafe { NonNull::new_unchecked(ptr.cast()) })
    }
}
impl Registration {
    /// Allocates a registration of `range` at `stage`, with `in_flight`
    /// under way, holding `pinned`.
    #[inline(always)]
    fn new(
        kind: PinKind,
        range: GpuRange,
        module: ModuleRef,
        in_flight: Option<Op>,
        pinned: Option<Pinned>,
        stage: Stage,
    ) -> core::result::Result<ListArc<Self>, Failure> {
        ListArc::pin_init(
            try_pin_init!(Self {
                state <- new_spinlock!(
                    State::new(stage, in_flight, pinned),
                    "nvidia_peermem_rs:registration"
                ),
                links <- ListLinks::new(),
                range,
                core_context: AtomicU64::new(0),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                kind,
                in_core: AtomicU32::new(0),
                module,
            }),
            GFP_KERNEL,
        )
        .map_err(|e| Failure::new(ErrorKind::NoMemory, e))
    }

    /// Writes one line describing the registration (debugfs).
    pub(crate) fn describe(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let (state, mapped) = {
            let st = self.state.lock();
            (st.name(), st.sg_entries())
        };
        writeln!(
            f,
            "{} {} [{:#x}, {:#x}) pages={} sg_entries={} state={}",
            self.id,
            self.kind.name(),
            self.range.start(),
            self.range.end(),
            self.range.pages(),
            mapped,
            state
        )
    }
}
