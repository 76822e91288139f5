// SPDX-License-Identifier: GPL-2.0

//! A registration: one user range the core asked us about, from acquire to
//! release, and the state machine of its pages.
//!
//! Ownership, which is what makes the free callback safe:
//! - the [`registry`] owns one reference ([`SlabArc`]) from acquire to
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
//!   goes ([`crate::slab`]).
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

use crate::core_client::INVALIDATION;
use crate::foreign::Foreign;
use crate::lock::{StateGuard, StateLock};
use crate::module_ref::ModuleRef;
use crate::p2p::{DeadPages, FreeCallback, PageTable, PciDevice};
use crate::range::{GpuRange, GPU_PAGE_SIZE};
use crate::registry::{self, RegistryLinks};
use crate::sg::{SgPlan, SgTable};
use crate::slab::{SlabArc, SlabBorrow};
use crate::stats::{self, ErrorKind, Failure, STATS};
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use kernel::{bindings, ffi::c_void, prelude::*};

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

/// Where an invalidation (free callback) stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Invalidation {
    /// No free callback so far.
    None,
    /// The free callback is running.
    Running,
    /// The free callback has finished: nothing is pinned any more.
    Done,
}

/// What the thread holding the resources outside the lock is doing, named
/// by what it touches, not by the core's call it serves: put_pages and
/// release unmap first what a failed dma_unmap left mapped
/// ([`Op::Unmapping`]), then unpin ([`Op::Unpinning`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    /// Inside the provider's get_pages (takes the driver lock).
    Pinning,
    /// Inside the provider's dma_map_pages (takes the driver lock).
    Mapping,
    /// Out of dma_map_pages, reading the new mapping and building the SG
    /// table (and unmapping it again on a refusal). acquire reads its new
    /// page table under the lock instead ([`Registration::keep_acquired_pin`]).
    Reading,
    /// Inside the provider's dma_unmap_pages, which reads the page table and
    /// the mapping without the driver lock: for the core's dma_unmap, or for
    /// put_pages/release unmapping before they unpin.
    Unmapping,
    /// Inside the provider's put_pages (takes the driver lock), with nothing
    /// mapped.
    Unpinning,
}

impl Op {
    /// Whether a free callback must wait for this operation before it
    /// returns: the driver frees the page table and its mappings when the
    /// callback returns (515 and later), and these operations read them
    /// without taking the driver lock the callback runs under. The provider
    /// calls that take that lock (get_pages, dma_map, put_pages) are not
    /// waited for: that would deadlock, since they take the lock the
    /// callback holds. Some of them also touch the page table outside the
    /// lock (dma_map reads it before and writes its mapping info after; on
    /// drivers 515 to 530 the put reads it on entry): no client can wait for
    /// those parts, the driver's own windows.
    fn reads_provider_objects(self) -> bool {
        matches!(self, Op::Reading | Op::Unmapping)
    }

    /// What a thread that unpins `pinned` touches first: a mapping left
    /// mapped is unmapped before the pages are put.
    fn unpinning(pinned: &Pinned) -> Self {
        if pinned.is_mapped() {
            Op::Unmapping
        } else {
            Op::Unpinning
        }
    }
}

/// The mutable part of a registration. Kept small (flat fields, no
/// `Option<u64>`, a 12-byte SG table): the whole registration fits a
/// 128-byte allocation with a 4-byte spinlock, a 192-byte one even with
/// lockdep's (the assertion after [`Registration`], the KUnit case
/// `registration_size`).
struct State {
    /// The pinned pages, unless none or `in_flight`.
    pinned: Option<Pinned>,
    /// The SG table given to the core, freed at release.
    sg: Option<SgTable>,
    stage: Stage,
    /// The operation holding the resources outside the lock, if any.
    in_flight: Option<Op>,
    invalidation: Invalidation,
}

/// Where a registration is between acquire and the core's get_pages.
/// acquire pins, and its pin is the one the core's get_pages takes: one pin
/// a registration, where NVIDIA's module pins and unpins at acquire and
/// pins again at get_pages (issue 35).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// acquire has kept no pin (yet, or the memory was freed meanwhile).
    Acquiring,
    /// `pinned` is acquire's pin, waiting for the core's get_pages.
    PinKept,
    /// acquire's pin was unusable (a page size or a page count this module
    /// does not take; said then) and was unpinned at once: the core's
    /// get_pages fails with this.
    Refused(ErrorKind),
    /// The core's get_pages took the pin; the registration's
    /// `core_context` is its ticket.
    GotPages,
    /// The core released the registration, or never had it (acquire's pin
    /// given up, [`Registration::give_up_refused_pin`]): no ticket, nothing
    /// of the core's to invalidate.
    Released,
    /// The core unpinned (put_pages or release) from a process other than
    /// the one that pinned, whose put the driver answers with 0 without
    /// unpinning: the pages stay pinned, not mapped, with the free callback
    /// armed, until the owner frees the memory or exits; that callback ends
    /// the registration. Released or about to be: no ticket is used, nothing
    /// is unpinned again.
    LeftToOwner,
}

/// Why acquire cannot keep its pin (it unpins it at once).
enum Unusable {
    /// A page table version this module cannot read: "not ours", decided
    /// at acquire and not after the core committed the MR to us (issue 31).
    NotOurs(Failure),
    /// A page size or page count this module does not take: ours, and the
    /// core's get_pages fails with it.
    Refused(Failure),
}

impl Unusable {
    /// Checks acquire's pin (said in the log when unusable). The page
    /// table must be alive: persistent, or read under the state lock.
    #[inline(always)]
    fn check(page_table: &PageTable<Registration>) -> core::result::Result<(), Self> {
        page_table.layout().map_err(Self::NotOurs)?;
        page_table.validate().map_err(Self::Refused)
    }
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One registration (one acquire).
#[pin_data]
pub(crate) struct Registration {
    #[pin]
    state: StateLock<State>,
    /// Links in the [`registry`]'s list.
    links: RegistryLinks,
    range: GpuRange,
    /// The core's ticket, from its get_pages: valid once the stage (read
    /// under the state lock) is [`Stage::GotPages`]. Written once, under
    /// the lock, as the stage becomes that, and never again: a thread that
    /// saw that stage reads it after dropping the lock, and the free
    /// callback keeps nothing of its critical section across the unlock
    /// (issue 35).
    core_context: AtomicU64,
    /// For the log and debugfs only (wraps after 2^32 registrations).
    id: u32,
    kind: PinKind,
    /// Whether a free callback is inside the core's invalidate for this
    /// registration ([`IN_CORE`]), and a release waits for it to come out
    /// ([`IN_CORE_WAITED`]); 0 otherwise. Set under the state lock, where
    /// release looks first.
    in_core: AtomicU8,
}

/// [`Registration::in_core`]: a free callback is inside the core's
/// invalidate.
const IN_CORE: u8 = 1;
/// [`Registration::in_core`]: and a release sleeps until it comes out.
const IN_CORE_WAITED: u8 = 2;

// The registration's allocation (a 4-byte count padded to 8, then the
// registration) takes at most 128 bytes on a kernel without lock debugging
// (a 4-byte spinlock): 64 KiB registrations cost 160 bytes with their SG
// table, not 224.
const _: () = assert!(
    core::mem::size_of::<bindings::spinlock_t>() > 4
        || crate::slab::object_size::<Registration>() <= 128
);

/// The core's handle on a registration, from acquire to release: the
/// registry's reference, borrowed. A registration is in the [`registry`]
/// from the end of acquire until the core's release takes it out, and only
/// release does, so the core holds no count of its own (issue 35: one
/// increment at acquire and one decrement at release fewer).
///
/// # Invariants
///
/// `0` is what [`SlabArc::into_raw`] gives for a registration that is in
/// the registry, put there by the acquire that made this value; it stays
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

// SAFETY: `borrow` gives a `SlabBorrow` of the registry's reference, which
// lives until `from_foreign`'s value is given to `Registration::release`;
// the pointer is `CoreRef`'s own, so `from_foreign` gives back the `CoreRef`
// `into_foreign` took (and its invariant).
unsafe impl Foreign for CoreRef {
    type Borrowed<'a> = SlabBorrow<'a, Registration>;

    #[inline(always)]
    fn into_foreign(self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    #[inline(always)]
    unsafe fn borrow<'a>(ptr: *mut c_void) -> SlabBorrow<'a, Registration> {
        // SAFETY: `ptr` is a `CoreRef`'s (from `into_foreign`, not yet taken
        // back: function's requirements): it came from `SlabArc::into_raw`,
        // and the registry's reference keeps the registration alive until
        // release, which the borrow does not outlive.
        unsafe { SlabBorrow::from_raw(NonNull::new_unchecked(ptr.cast())) }
    }

    #[inline(always)]
    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: `ptr` came from `into_foreign` (function's requirements),
        // i.e. from a `CoreRef`'s `NonNull`.
        // INVARIANT: that `CoreRef`'s, given back once.
        Self(unsafe { NonNull::new_unchecked(ptr.cast()) })
    }
}

/// What to do with resources handed back after a provider call.
enum HandBack {
    /// Keep them in the state.
    Kept,
    /// Kept in the state for a running free callback, which may be waiting
    /// for this thread: wake it.
    WakeCallback,
    /// The invalidation is over: free them (dead) now.
    FreeDead(Pinned),
}

impl Registration {
    /// Answers the core's acquire: `Some` if `[addr, addr + size)` is GPU
    /// memory we can pin. Every failure means "not mine".
    pub(crate) fn acquire(kind: PinKind, addr: u64, size: u64) -> Option<CoreRef> {
        match Self::try_acquire(kind, addr, size) {
            Ok(Some(this)) => {
                stats::inc(&STATS.acquired);
                Some(this)
            }
            Ok(None) => {
                stats::inc(&STATS.declined);
                None
            }
            Err(f) => {
                stats::inc(&STATS.declined);
                f.count();
                None
            }
        }
    }

    fn try_acquire(
        kind: PinKind,
        addr: u64,
        size: u64,
    ) -> core::result::Result<Option<CoreRef>, Failure> {
        let range = GpuRange::new(addr, size).map_err(|e| Failure::new(ErrorKind::Range, e))?;
        let module = ModuleRef::try_get().ok_or(Failure::new(ErrorKind::ModuleGoing, ENODEV))?;
        // acquire pins, and the pin is kept for the core's get_pages, which
        // follows at once (CONTRACT 1.3): one pin a registration, where
        // NVIDIA's module pins and unpins here and pins again there.
        let this = match kind {
            PinKind::Persistent => {
                // No free callback: nothing can kill the pin, so it is
                // checked before a registration exists.
                let Some(page_table) = Self::pin_persistent_for_acquire(range)? else {
                    return Ok(None);
                };
                let (pinned, stage) = match Self::check_persistent_pin(page_table)? {
                    Ok(pinned) => (Some(pinned), Stage::PinKept),
                    Err(refusal) => (None, Stage::Refused(refusal)),
                };
                Self::new(kind, range, module, None, pinned, stage)?
            }
            PinKind::Invalidating => {
                // Born with the pin in flight: a free callback firing
                // meanwhile only records the invalidation.
                let this = Self::new(
                    kind,
                    range,
                    module,
                    Some(Op::Pinning),
                    None,
                    Stage::Acquiring,
                )?;
                // The provider gets its own reference to the registration
                // (the free callback's data).
                let data = SlabArc::from(this.as_borrow());
                let Ok(page_table) = PageTable::pin_invalidating(range, data) else {
                    // Not GPU memory (or not pinnable): simply not ours.
                    // Nobody else holds the registration: it goes with
                    // `this`.
                    return Ok(None);
                };
                if !this.keep_acquired_pin(page_table)? {
                    // Freed while we pinned it: no longer GPU memory.
                    return Ok(None);
                }
                this
            }
        };
        // The core borrows the registry's reference: the registration's
        // address, which `SlabArc::into_raw` gives.
        let raw = NonNull::from(&*this);
        registry::insert(this);
        // INVARIANT: the address `SlabArc::into_raw` gives, and in the
        // registry now.
        Ok(Some(CoreRef(raw)))
    }

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
    ) -> core::result::Result<SlabArc<Self>, Failure> {
        SlabArc::pin_init(
            module,
            try_pin_init!(Self {
                state <- new_state_lock!(
                    State {
                        pinned,
                        sg: None,
                        stage,
                        in_flight,
                        invalidation: Invalidation::None,
                    },
                    "nvidia_peermem_rs:registration"
                ),
                links: RegistryLinks::new(),
                range,
                core_context: AtomicU64::new(0),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                kind,
                in_core: AtomicU8::new(0),
            }),
        )
        .map_err(|e| Failure::new(ErrorKind::NoMemory, e))
    }

    /// acquire's persistent pin of `range`: `None` if it is not pinnable
    /// GPU memory (simply not ours).
    #[inline(always)]
    fn pin_persistent_for_acquire(
        range: GpuRange,
    ) -> core::result::Result<Option<PageTable<Self>>, Failure> {
        match PageTable::<Self>::pin_persistent(range) {
            Ok(page_table) => Ok(Some(page_table)),
            Err(e) if e == ENOTSUPP => {
                // Every registration would say it: once a load, each
                // refusal counted (debugfs error_persistent_unsupported).
                static WARNED: AtomicBool = AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    pr_warn!(
                        "[{:#x}, {:#x}): the persistent P2P API is not supported (MIG or vGPU?); load with persistent_api_support=0 (said once; debugfs stats error_persistent_unsupported counts the refusals)\n",
                        range.start(),
                        range.end()
                    );
                }
                Err(Failure::new(ErrorKind::PersistentUnsupported, e))
            }
            Err(_) => Ok(None),
        }
    }

    /// Checks acquire's persistent pin (no free callback: the page table
    /// lives until unpinned). A usable one is kept, `Ok(Ok(_))`. Else it is
    /// unpinned at once: a page table version this module cannot read is
    /// "not ours" (`Err`, decided here and not after the core committed the
    /// MR to us), anything else is refused at the core's get_pages
    /// (`Ok(Err(kind))`). An unpin that fails makes it "not ours" too (as
    /// NVIDIA's acquire answers); having no free callback, the pin is kept
    /// in [`stranded`] for a retry at unload.
    ///
    /// [`stranded`]: crate::stranded
    #[inline(always)]
    fn check_persistent_pin(
        page_table: PageTable<Self>,
    ) -> core::result::Result<core::result::Result<Pinned, ErrorKind>, Failure> {
        let unusable = match Unusable::check(&page_table) {
            Ok(()) => return Ok(Ok(Pinned::new(page_table))),
            Err(unusable) => unusable,
        };
        let range = page_table.range();
        match page_table.unpin() {
            // No free callback: nothing to take back.
            Ok(unpinned) => drop(unpinned),
            Err((page_table, e)) => {
                pr_err!(
                    "unpinning acquire's pin of [{:#x}, {:#x}) failed ({:?}): not taking it (the core may offer it to another client); the pin is unpinned again when this module unloads\n",
                    range.start(),
                    range.end(),
                    e
                );
                crate::stranded::keep(page_table);
                return Err(Failure::new(ErrorKind::PutPages, e));
            }
        }
        match unusable {
            Unusable::Refused(f) => Ok(Err(f.kind)),
            Unusable::NotOurs(f) => Err(f),
        }
    }

    /// Ends acquire's invalidating pin in one critical section: unless an
    /// invalidation started while we were inside the provider, checks the
    /// page table and keeps it for the core's get_pages. Reading it under
    /// our lock is what a free callback waits for (it takes the lock
    /// first), so it cannot die under us. If an invalidation started, that
    /// callback did not wait for us and nothing may be read: a running
    /// callback frees the page table after it returns, a finished one left
    /// it to us (dead). Returns false if
    /// the memory was freed meanwhile (no longer GPU memory: not ours). An
    /// unusable page table is unpinned at once: a version this module
    /// cannot read is "not ours" (`Err`), anything else is refused at the
    /// core's get_pages. An unpin that fails makes it "not ours" too
    /// ([`Registration::give_up_refused_pin`]).
    #[inline(always)]
    fn keep_acquired_pin(
        &self,
        page_table: PageTable<Self>,
    ) -> core::result::Result<bool, Failure> {
        let (pinned, unusable) = {
            let mut st = self.state.lock();
            match st.invalidation {
                Invalidation::None => match Unusable::check(&page_table) {
                    Ok(()) => {
                        st.in_flight = None;
                        st.pinned = Some(Pinned::new(page_table));
                        st.stage = Stage::PinKept;
                        return Ok(true);
                    }
                    Err(unusable) => {
                        st.in_flight = Some(Op::Unpinning);
                        (Pinned::new(page_table), unusable)
                    }
                },
                Invalidation::Running => {
                    // The callback (not waiting for a pin) frees it after
                    // it returns from the core.
                    st.in_flight = None;
                    st.pinned = Some(Pinned::new(page_table));
                    return Ok(false);
                }
                Invalidation::Done => {
                    st.in_flight = None;
                    drop(st);
                    // SAFETY: the invalidation is `Done`: the provider called
                    // the free callback of this page table.
                    self.free_dead(unsafe { Pinned::new(page_table).into_dead() });
                    return Ok(false);
                }
            }
        };
        match self.try_unpin_in_flight(pinned) {
            Ok(false) => {}
            // Freed while we unpinned it: no longer GPU memory.
            Ok(true) => return Ok(false),
            Err(e) => return Err(self.give_up_refused_pin(e)),
        }
        match unusable {
            Unusable::NotOurs(f) => Err(f),
            Unusable::Refused(f) => {
                self.state.lock().stage = Stage::Refused(f.kind);
                Ok(true)
            }
        }
    }

    /// acquire's invalidating pin, refused, could not be unpinned (`e`): the
    /// range is not ours, as NVIDIA's acquire answers, and the registration
    /// is given up.
    /// Its pin is back in the state and the provider holds a reference
    /// (the free callback's data): marked released, the registration lives
    /// on without the core until the memory's free callback ends the pin,
    /// keeping the module loaded till then. The core never knew it: no
    /// invalidation goes to the core (no ticket).
    fn give_up_refused_pin(&self, e: Error) -> Failure {
        self.state.lock().stage = Stage::Released;
        pr_err!(
            "unpinning acquire's pin of [{:#x}, {:#x}) failed ({:?}): not taking it (the core may offer it to another client); the pin ends when the memory is freed (this module stays in use until then)\n",
            self.range.start(),
            self.range.end(),
            e
        );
        Failure::new(ErrorKind::PutPages, e)
    }

    /// Called when dma_map_pages returns: from now on a free
    /// callback waits while we read what the provider returned
    /// ([`Op::Reading`]). Returns false, changing nothing, if an invalidation
    /// started while we were inside the provider: that callback did not wait
    /// for us, and once it returns the driver frees the page table and its
    /// mappings, so nothing the call returned may be read.
    ///
    /// A persistent registration skips this (and stays [`Op::Mapping`]):
    /// its pages have no free callback, so no invalidation starts and
    /// nothing waits for its readers.
    #[inline(always)]
    fn out_of_provider(&self) -> bool {
        if self.kind == PinKind::Persistent {
            return true;
        }
        let mut st = self.state.lock();
        if st.invalidation != Invalidation::None {
            return false;
        }
        st.in_flight = Some(Op::Reading);
        true
    }

    /// Ends an in-flight operation that holds `pinned` (and, for dma_map, the
    /// new SG table `sg`): keeps them, unless an invalidation started
    /// meanwhile. Then the SG table is freed, and so are the pinned pages if
    /// the free callback has finished (they are dead); a running callback
    /// frees them itself. Returns whether an invalidation started.
    #[inline(always)]
    fn finish_in_flight(&self, pinned: Pinned, sg: Option<SgTable>) -> bool {
        let (invalidated, hand_back, unused_sg) = {
            let mut st = self.state.lock();
            st.in_flight = None;
            match st.invalidation {
                Invalidation::Done => (true, HandBack::FreeDead(pinned), sg),
                Invalidation::Running => {
                    // The callback frees it after the core's invalidate; it
                    // may be waiting for us (woken below).
                    st.pinned = Some(pinned);
                    (true, HandBack::WakeCallback, sg)
                }
                Invalidation::None => {
                    st.pinned = Some(pinned);
                    let replaced = match sg {
                        Some(sg) => st.sg.replace(sg),
                        None => None,
                    };
                    (false, HandBack::Kept, replaced)
                }
            }
        };
        drop(unused_sg);
        match hand_back {
            HandBack::Kept => {}
            HandBack::WakeCallback => crate::wait::wake_free_waiters(),
            HandBack::FreeDead(pinned) => {
                // SAFETY: the invalidation is `Done`: the provider called the
                // free callback of this page table.
                self.free_dead(unsafe { pinned.into_dead() })
            }
        }
        invalidated
    }

    /// Unpins `pinned`, taken out of the state by an operation in flight
    /// marked [`Op::unpinning`] (or [`Op::Pinning`] for acquire's refused pin): a
    /// mapping left is unmapped first, then the phase becomes
    /// [`Op::Unpinning`] for the put, unless an invalidation started
    /// meanwhile (its callback waited for the unmap and frees the rest). A
    /// failure hands it back to the state, or frees it dead if the free
    /// callback has finished meanwhile. Returns whether an invalidation
    /// started.
    #[inline(always)]
    fn unpin_in_flight(&self, mut pinned: Pinned) -> bool {
        if pinned.is_mapped() {
            if let Err(e) = pinned.unmap() {
                let invalidated = self.finish_in_flight(pinned, None);
                if !invalidated {
                    STATS.error(ErrorKind::DmaUnmap);
                    pr_err!(
                        "registration {}: unmapping [{:#x}, {:#x}) before unpinning failed ({:?}); kept for a retry\n",
                        self.id,
                        self.range.start(),
                        self.range.end(),
                        e
                    );
                }
                return invalidated;
            }
            let unpinning = {
                let mut st = self.state.lock();
                let unpinning = st.invalidation == Invalidation::None;
                if unpinning {
                    st.in_flight = Some(Op::Unpinning);
                }
                unpinning
            };
            if !unpinning {
                // The callback waited for the unmap; it frees the pages.
                return self.finish_in_flight(pinned, None);
            }
        }
        match self.try_unpin_in_flight(pinned) {
            Ok(invalidated) => invalidated,
            Err(e) => {
                STATS.error(ErrorKind::PutPages);
                pr_err!(
                    "registration {}: unpinning [{:#x}, {:#x}) failed ({:?}); kept for a retry\n",
                    self.id,
                    self.range.start(),
                    self.range.end(),
                    e
                );
                false
            }
        }
    }

    /// As [`Registration::unpin_in_flight`] for a pin that is not mapped,
    /// saying nothing: `Err` if the unpin failed and no invalidation started meanwhile (the pages are
    /// back in the state).
    #[inline(always)]
    fn try_unpin_in_flight(&self, pinned: Pinned) -> Result<bool> {
        if !pinned.unpins_here() {
            return Ok(self.leave_to_owner(pinned));
        }
        match pinned.unpin() {
            Ok(unpinned) => {
                let callback_ran = {
                    let mut st = self.state.lock();
                    st.in_flight = None;
                    st.invalidation != Invalidation::None
                };
                if callback_ran {
                    // The driver answers the pinning process's put_pages with
                    // 0 also when the free callback got there first (the
                    // callback runs under the driver's lock, so it has
                    // finished): the callback consumed its reference, and the
                    // page table is dead, ours to free.
                    // SAFETY: an invalidation of this registration started,
                    // i.e. the provider called the free callback of the page
                    // table we just put (its only one with a callback).
                    unsafe { unpinned.callback_ran() };
                } else {
                    // SAFETY: the put was made by the process that pinned
                    // (`unpin` puts from no other), so its 0 means it
                    // unpinned or found the page table unlinked by the
                    // callback; and no invalidation started before the put
                    // returned: a free callback of this page table (its only
                    // one with a callback) starts one, under our lock, before
                    // it can return, and the driver runs it to the end
                    // before a put that finds the page table unlinked
                    // returns. So the callback never ran and no longer can.
                    unsafe { unpinned.callback_never_ran() };
                }
                Ok(callback_ran)
            }
            Err((pinned, e)) => {
                if self.finish_in_flight(pinned, None) {
                    Ok(true)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Unpinning from a process other than the one that pinned (the core
    /// deregistering from a uverbs file another process shares, or tearing
    /// every MR of a device down as its driver goes): the driver looks
    /// `nvidia_p2p_get_pages` pins up among the calling process's only, so a
    /// put from here would return 0 and unpin nothing. Nothing is called.
    /// Pages pinned with a free callback go back to the state, left to their
    /// owner ([`Stage::LeftToOwner`]): its cudaFree or exit calls the
    /// callback, which ends them and the registration; till then the
    /// provider keeps its reference, and with it the module. A persistent
    /// pin (drivers before 535) has no callback: the driver ends it when the
    /// owner exits, and nothing of ours stays with it. Said once a load;
    /// debugfs counts both. Returns whether an invalidation started
    /// meanwhile (its callback then frees the pages).
    #[cold]
    #[inline(never)]
    fn leave_to_owner(&self, pinned: Pinned) -> bool {
        let (owner, here) = (pinned.owner(), crate::p2p::Process::current());
        let pinned = match pinned.leave_to_driver() {
            Ok(()) => {
                self.state.lock().in_flight = None;
                stats::inc(&STATS.unpins_from_other_process);
                self.said_left_to_owner(owner, here, "when it exits");
                return false;
            }
            Err(pinned) => pinned,
        };
        let (invalidated, hand_back) = {
            let mut st = self.state.lock();
            st.in_flight = None;
            match st.invalidation {
                Invalidation::Done => (true, HandBack::FreeDead(pinned)),
                Invalidation::Running => {
                    st.pinned = Some(pinned);
                    (true, HandBack::WakeCallback)
                }
                Invalidation::None => {
                    st.pinned = Some(pinned);
                    st.stage = Stage::LeftToOwner;
                    (false, HandBack::Kept)
                }
            }
        };
        match hand_back {
            HandBack::Kept => {
                stats::inc(&STATS.unpins_from_other_process);
                stats::inc(&STATS.left_to_owner);
                self.said_left_to_owner(owner, here, "when it frees the memory or exits");
            }
            HandBack::WakeCallback => crate::wait::wake_free_waiters(),
            HandBack::FreeDead(pinned) => {
                // SAFETY: the invalidation is `Done`: the provider called the
                // free callback of this page table.
                self.free_dead(unsafe { pinned.into_dead() })
            }
        }
        invalidated
    }

    /// Says, once a load, that pages were left to the process that pinned
    /// them, which ends them `when`.
    fn said_left_to_owner(
        &self,
        owner: crate::p2p::Process,
        here: crate::p2p::Process,
        when: &str,
    ) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            pr_warn!(
                "registration {}: [{:#x}, {:#x}) deregistered from process {}, not from process {} that pinned it: the NVIDIA driver unpins only for that process, so the GPU memory stays pinned until that process ends the pin {}, and this module stays in use until then (said once; debugfs stats left_to_owner counts such registrations now, unpins_from_other_process in all)\n",
                self.id,
                self.range.start(),
                self.range.end(),
                here.id(),
                owner.id(),
                when
            );
        }
    }

    /// The core's get_pages: takes the pin acquire kept (no provider call).
    pub(crate) fn get_pages(
        this: SlabBorrow<'_, Self>,
        addr: u64,
        size: u64,
        core_context: u64,
    ) -> Result {
        Self::try_get_pages(this, addr, size, core_context).map_err(|f| {
            pr_err!(
                "registration {}: get_pages of [{:#x}, {:#x}) failed ({:?})\n",
                this.id,
                this.range.start(),
                this.range.end(),
                f.error
            );
            f.count()
        })
    }

    fn try_get_pages(
        this: SlabBorrow<'_, Self>,
        addr: u64,
        size: u64,
        core_context: u64,
    ) -> core::result::Result<(), Failure> {
        if GpuRange::new(addr, size) != Ok(this.range) {
            return Err(Failure::new(ErrorKind::Sequence, EINVAL));
        }
        if this.kind == PinKind::Invalidating && !INVALIDATION.is_ready() {
            // The core called us before our registration call returned.
            return Err(Failure::new(ErrorKind::Sequence, EAGAIN));
        }
        let mut st = this.state.lock();
        if st.invalidation != Invalidation::None {
            // Freed since acquire pinned it: the callback freed the pin.
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        match st.stage {
            Stage::PinKept if st.in_flight.is_none() => {}
            // Said when acquire checked the pin; unpinned then.
            Stage::Refused(kind) => return Err(Failure::new(kind, EINVAL)),
            _ => return Err(Failure::new(ErrorKind::Sequence, EINVAL)),
        }
        // The pin acquire kept becomes the core's; from now on a free
        // callback invalidates through the core with this ticket.
        st.stage = Stage::GotPages;
        this.core_context.store(core_context, Ordering::Relaxed);
        Ok(())
    }

    /// The core's dma_map: maps for the HCA and fills `sg_head` (left
    /// untouched on failure). Returns the number of SG entries.
    pub(crate) fn dma_map(
        &self,
        sg_head: &mut bindings::sg_table,
        peer: Option<PciDevice>,
    ) -> Result<u32> {
        self.try_dma_map(sg_head, peer).map_err(|f| {
            pr_err!(
                "registration {}: dma_map of [{:#x}, {:#x}) failed ({:?})\n",
                self.id,
                self.range.start(),
                self.range.end(),
                f.error
            );
            f.count()
        })
    }

    fn try_dma_map(
        &self,
        sg_head: &mut bindings::sg_table,
        peer: Option<PciDevice>,
    ) -> core::result::Result<u32, Failure> {
        let peer = peer.ok_or(Failure::new(ErrorKind::NotPci, EINVAL))?;
        let coalesce = crate::params::coalesce_sg();
        // One entry a GPU page: the table is allocated before the provider
        // call, so reading the mapping into it (the phase a free callback
        // waits for, holding the driver lock) only stores. Coalesced, its
        // size depends on the addresses: allocated while reading them.
        let table = if coalesce {
            None
        } else {
            Some(
                SgTable::alloc(self.range.pages() as usize)
                    .map_err(|e| Failure::new(ErrorKind::SgTable, e))?,
            )
        };
        let mut pinned = {
            let mut st = self.state.lock();
            if st.invalidation != Invalidation::None {
                return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
            }
            if st.in_flight.is_some()
                || st.stage != Stage::GotPages
                || st.sg.is_some()
                // (a match: `map_or(true, ..)` and its replacement
                // `is_none_or` each fail clippy on one of our kernels' MSRVs)
                || match &st.pinned {
                    Some(p) => p.is_mapped(),
                    None => true,
                }
            {
                return Err(Failure::new(ErrorKind::Sequence, EINVAL));
            }
            st.in_flight = Some(Op::Mapping);
            st.pinned.take()
        }
        .ok_or(Failure::new(ErrorKind::Sequence, EINVAL))?;

        let mapped = pinned.map(peer);
        if !self.out_of_provider() {
            // The mapping (if made) died with the page table before we read
            // it; the driver frees both.
            self.finish_in_flight(pinned, None);
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        let sg = match mapped.and_then(|()| pinned.dma_addresses()) {
            Ok(addresses) => {
                let plan = SgPlan::new(addresses, GPU_PAGE_SIZE, coalesce);
                match table {
                    Some(table) => table.fill(plan),
                    None => SgTable::build(plan),
                }
                .map_err(|e| Failure::new(ErrorKind::SgTable, e))
            }
            Err(f) => Err(f),
        };
        let sg = match sg {
            Ok(sg) => sg,
            Err(f) => {
                // Leave it pinned, not mapped: the core calls put_pages.
                let unmapped = pinned.unmap();
                self.finish_in_flight(pinned, None);
                if let Err(e) = unmapped {
                    STATS.error(ErrorKind::DmaUnmap);
                    pr_err!(
                        "registration {}: unmapping after a refusal failed ({:?})\n",
                        self.id,
                        e
                    );
                }
                return Err(f);
            }
        };
        let (raw, entries) = (sg.raw(), sg.entries());
        // Kept in the state with the mapping (one lock round trip), or freed
        // if the memory died meanwhile.
        if self.finish_in_flight(pinned, Some(sg)) {
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        *sg_head = raw;
        Ok(entries)
    }

    /// Takes the resources for an unmap/unpin asked by the core, unless an
    /// invalidation made it a no-op.
    #[inline(always)]
    fn take_for(&self, op: Op, sg_head: &bindings::sg_table) -> Option<Pinned> {
        let mut st = self.state.lock();
        if st.invalidation != Invalidation::None {
            // From inside our own free callback (same task), during it or
            // after it: the callback unmaps and unpins.
            stats::inc(&STATS.skipped_after_invalidation);
            return None;
        }
        if let Some(sg) = &st.sg {
            if !sg.is(sg_head) {
                STATS.error(ErrorKind::Sequence);
                pr_warn!(
                    "registration {}: {:?} with an SG table that is not ours\n",
                    self.id,
                    op
                );
            }
        }
        if st.in_flight.is_some() {
            STATS.error(ErrorKind::Sequence);
            return None;
        }
        if matches!(st.stage, Stage::PinKept | Stage::LeftToOwner) {
            // Before the core's get_pages took acquire's pin (release
            // unpins it), or after the pages were left to their owner:
            // nothing of the core's to unmap or unpin.
            return None;
        }
        let pinned = st.pinned.take()?;
        st.in_flight = Some(match op {
            Op::Unpinning => Op::unpinning(&pinned),
            op => op,
        });
        Some(pinned)
    }

    /// The core's dma_unmap.
    pub(crate) fn dma_unmap(&self, sg_head: &bindings::sg_table) {
        let Some(mut pinned) = self.take_for(Op::Unmapping, sg_head) else {
            return;
        };
        let unmapped = pinned.unmap();
        let invalidated = self.finish_in_flight(pinned, None);
        if let Err(e) = unmapped {
            if invalidated {
                // Lost the race with the free callback: the provider refused
                // a mapping that is dead, and the callback frees it. The
                // contract's graceful outcome, not an operator's problem.
                stats::inc(&STATS.dma_unmap_after_free);
                pr_debug!(
                    "registration {}: dma_unmap raced the free callback ({:?})\n",
                    self.id,
                    e
                );
            } else {
                STATS.error(ErrorKind::DmaUnmap);
                pr_err!("registration {}: dma_unmap failed ({:?})\n", self.id, e);
            }
        }
    }

    /// The core's put_pages.
    pub(crate) fn put_pages(&self, sg_head: &bindings::sg_table) {
        let Some(pinned) = self.take_for(Op::Unpinning, sg_head) else {
            return;
        };
        self.unpin_in_flight(pinned);
    }

    /// The core's get_page_size.
    pub(crate) fn page_size(&self) -> u64 {
        GPU_PAGE_SIZE
    }

    /// The core's release: the registry's reference (the one the core
    /// borrowed) goes; the registration itself goes with the last reference
    /// (a free callback may still hold one).
    pub(crate) fn release(core: CoreRef) {
        stats::inc(&STATS.released);
        // The registry's reference, which the core borrowed, is now ours.
        let Some(this) = registry::remove(core.registration()) else {
            // Not reachable (`CoreRef`'s invariant); if it were, the
            // registration stays as it is rather than be touched unowned.
            STATS.error(ErrorKind::Sequence);
            pr_err!("release of a registration that is not in the registry: ignored\n");
            return;
        };
        let (sg, leftover, in_core) = {
            let mut st = this.state.lock();
            // Pages left to their owner stay so: its free callback ends them.
            let left_to_owner = st.stage == Stage::LeftToOwner;
            if !left_to_owner {
                st.stage = Stage::Released;
            }
            let leftover = if st.invalidation == Invalidation::None
                && st.in_flight.is_none()
                && !left_to_owner
            {
                st.pinned.take()
            } else {
                None
            };
            if let Some(pinned) = &leftover {
                st.in_flight = Some(Op::unpinning(pinned));
            }
            // A free callback that set this did so under this lock, and
            // none sets it after (the stage is no longer `GotPages`).
            let in_core = this.in_core.load(Ordering::Relaxed) != 0;
            (st.sg.take(), leftover, in_core)
        };
        drop(sg);
        if let Some(pinned) = leftover {
            // The core did not unpin (or unpinning failed before): do it now.
            this.unpin_in_flight(pinned);
        }
        if in_core && INVALIDATION.release_waits_for_invalidation() {
            this.wait_out_of_core();
        }
    }

    /// The free callback: invalidate through the core, then free the dead
    /// mapping and page table.
    #[inline(always)]
    fn invalidate(&self) {
        stats::inc(&STATS.invalidations);
        let mut st = self.state.lock();
        if st.invalidation == Invalidation::None
            && st.in_flight.is_none()
            && st.stage == Stage::GotPages
        {
            if let Some(pinned) = st.pinned.take() {
                // The common callback: a live registration of the core's,
                // pinned, that no thread holds or reads. Nobody will from
                // now on: every call sees the invalidation and leaves the
                // pages alone. So they are the callback's, and the
                // invalidation as good as done (one critical section,
                // issue 35); they are freed once the core's invalidate
                // returned.
                st.invalidation = Invalidation::Done;
                // Before the unlock: a release that takes the lock after
                // it sees the callback on its way into the core.
                self.in_core.store(IN_CORE, Ordering::Relaxed);
                // SAFETY: we are the page table's free callback.
                let dead = unsafe { pinned.into_dead() };
                drop(st);
                self.invalidate_core(self.core_context.load(Ordering::Relaxed));
                self.out_of_core();
                self.free_dead(dead);
                return;
            }
        }
        self.invalidate_uncommon(st);
    }

    /// The rest of a free callback that found no live, idle registration of
    /// the core's: nothing to invalidate through the core. Out of line, with
    /// its own unlock: the common callback carries nothing across its one
    /// (issue 35).
    #[cold]
    #[inline(never)]
    fn invalidate_uncommon(&self, mut st: StateGuard<'_, State>) {
        stats::inc(&STATS.invalidations_without_core);
        if st.invalidation != Invalidation::None {
            return;
        }
        if st.in_flight.is_none() {
            // No ticket (acquire's pin before the core's get_pages took
            // it, a registration the core released, or pages left to their
            // owner), or nothing pinned (the core unpinned it): the pages,
            // if any, are freed here.
            st.invalidation = Invalidation::Done;
            let taken = st.pinned.take();
            let was_left_to_owner = st.stage == Stage::LeftToOwner;
            drop(st);
            if was_left_to_owner {
                STATS.left_to_owner.fetch_sub(1, Ordering::Relaxed);
            }
            if let Some(pinned) = taken {
                // SAFETY: we are the page table's free callback.
                self.free_dead(unsafe { pinned.into_dead() });
            }
        } else {
            // A thread holds the resources (the core tearing down or still
            // setting up, on another thread: it sees the invalidation and
            // fails or skips), or reads them: no invalidation through the
            // core, and the end waits for the readers.
            st.invalidation = Invalidation::Running;
            drop(st);
            self.end_invalidation();
        }
    }

    /// The free callback has returned from the core's invalidate: a release
    /// waiting for that may return now.
    #[inline(always)]
    fn out_of_core(&self) {
        if self.in_core.swap(0, Ordering::AcqRel) == IN_CORE_WAITED {
            crate::wait::wake_free_waiters();
        }
    }

    /// Sleeps until no free callback of this registration is inside the
    /// core's invalidate (see
    /// [`InvalidationSlot::release_waits_for_invalidation`]). Nothing is
    /// held: the callback inside the core needs the core's locks and the
    /// driver lock it already holds, none of ours.
    ///
    /// [`InvalidationSlot::release_waits_for_invalidation`]:
    ///     crate::core_client::InvalidationSlot::release_waits_for_invalidation
    #[cold]
    #[inline(never)]
    fn wait_out_of_core(&self) {
        stats::inc(&STATS.release_waited_for_invalidation);
        crate::wait::free_wait(|| {
            match self.in_core.compare_exchange(
                IN_CORE,
                IN_CORE_WAITED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // Now marked: the callback wakes us when it comes out.
                Ok(_) => false,
                Err(now) => now == 0,
            }
        });
    }

    /// Invalidates through the core (the free callback, `ticket` from
    /// get_pages).
    #[inline(always)]
    fn invalidate_core(&self, ticket: u64) {
        if let Err(e) = INVALIDATION.invalidate(ticket) {
            self.invalidate_failed(e);
        }
    }

    #[cold]
    #[inline(never)]
    fn invalidate_failed(&self, e: Error) {
        STATS.error(ErrorKind::Invalidate);
        pr_err!(
            "registration {}: the core's invalidate failed ({:?})\n",
            self.id,
            e
        );
    }

    /// Gives back the memory of pages whose free callback ran.
    #[inline(always)]
    fn free_dead(&self, dead: DeadPages) {
        dead.free(|call, e| self.free_failed(call, e));
    }

    /// A provider call freeing a dead mapping or page table failed: what
    /// is left of them is the driver's.
    #[cold]
    #[inline(never)]
    fn free_failed(&self, call: &str, e: Error) {
        STATS.error(ErrorKind::Free);
        pr_err!(
            "registration {} [{:#x}, {:#x}): {} failed ({:?}) after the memory was freed\n",
            self.id,
            self.range.start(),
            self.range.end(),
            call,
            e
        );
    }

    /// From a free callback that found a thread holding the resources (or
    /// reading them): marks the invalidation done and frees what is left
    /// pinned, taken in the same critical section that finds no other
    /// thread reading the page table or its mapping. Those readers are waited for: a dma_unmap started
    /// before the callback (the core deregistering, or put_pages/release
    /// unmapping what a failed dma_unmap left; `nvidia_p2p_dma_unmap_pages`
    /// reads both), or a dma_map reading what the provider just returned.
    /// The driver frees both as soon as the callback returns (515 and
    /// later), so returning earlier would make those reads a use-after-free.
    /// Waiting cannot deadlock: none of them takes the driver lock the
    /// callback runs under (see [`Op::reads_provider_objects`]). The wait
    /// sleeps until the reader, ending, wakes it ([`Self::finish_in_flight`]):
    /// the driver lock it holds stalls every GPU call of the node meanwhile.
    /// Out of line: the common callback takes the pages in its first look.
    #[cold]
    #[inline(never)]
    fn end_invalidation(&self) {
        let mut waited = false;
        let mut taken = None;
        let look = || {
            let mut st = self.state.lock();
            match st.in_flight {
                Some(op) if op.reads_provider_objects() => {
                    if waited {
                        stats::inc(&STATS.free_wait_rechecks);
                    } else {
                        waited = true;
                        stats::inc(if op == Op::Unmapping {
                            &STATS.free_waited_for_unmap
                        } else {
                            &STATS.free_waited_for_registration
                        });
                    }
                    false
                }
                _ => {
                    st.invalidation = Invalidation::Done;
                    taken = st.pinned.take();
                    true
                }
            }
        };
        crate::wait::free_wait(look);
        if let Some(pinned) = taken {
            // SAFETY: we are the page table's free callback.
            self.free_dead(unsafe { pinned.into_dead() });
        }
    }

    /// The registration's links in the [`registry`] (which guards them).
    pub(crate) fn registry_links(&self) -> &RegistryLinks {
        &self.links
    }

    /// Writes one line describing the registration (debugfs).
    pub(crate) fn describe(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let (state, mapped) = {
            let st = self.state.lock();
            let state = match (st.invalidation, st.in_flight, &st.pinned) {
                (Invalidation::Running, _, _) => "invalidating",
                (Invalidation::Done, _, _) => "invalidated",
                (_, Some(Op::Pinning), _) => "pinning",
                (_, Some(Op::Mapping), _) => "mapping",
                (_, Some(Op::Reading), _) => "reading",
                (_, Some(Op::Unmapping), _) => "unmapping",
                (_, Some(Op::Unpinning), _) => "unpinning",
                (_, None, Some(p)) if p.is_mapped() => "mapped",
                (_, None, Some(_)) => "pinned",
                (_, None, None) => "acquired",
            };
            (state, st.sg.as_ref().map_or(0, SgTable::entries))
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

impl FreeCallback for Registration {
    type Data = SlabArc<Registration>;

    // Into the callback's adapter: one function on the provider's call.
    #[inline(always)]
    fn on_free(this: SlabBorrow<'_, Registration>) {
        this.invalidate();
    }
}
