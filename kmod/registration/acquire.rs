// SPDX-License-Identifier: GPL-2.0

//! acquire: pins the range the core asks about and keeps the pin for the
//! core's get_pages, or says "not mine".

use super::state::{Op, PinningEnd, Stage};
use super::{registry, stranded, CoreRef, PinKind, Pinned, Registration};
use crate::module_ref::ModuleRef;
use crate::p2p::PageTable;
use crate::range::GpuRange;
use crate::stats::{self, ErrorKind, Failure, STATS};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

/// Why acquire cannot keep its pin (it unpins it at once).
enum Unusable {
    /// A page table version this module cannot read: "not ours", decided
    /// at acquire and not after the core committed the MR to us.
    NotOurs(Failure),
    /// A page size or page count this module does not take: ours, and the
    /// core's get_pages fails with it.
    Refused(Failure),
}

impl Unusable {
    /// Checks acquire's pin (said in the log when unusable). The page
    /// table must be alive: persistent, or read under the state lock.
    #[inline(always)]
    pub(super) fn check(page_table: &PageTable<Registration>) -> core::result::Result<(), Self> {
        page_table.layout().map_err(Self::NotOurs)?;
        page_table.validate().map_err(Self::Refused)
    }
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

    pub(super) fn try_acquire(
        kind: PinKind,
        addr: u64,
        size: u64,
    ) -> core::result::Result<Option<CoreRef>, Failure> {
        let range = GpuRange::new(addr, size).map_err(|e| Failure::new(ErrorKind::Range, e))?;
        let module = ModuleRef::try_get().ok_or(Failure::new(ErrorKind::ModuleGoing, ENODEV))?;
        // acquire pins, and the pin is kept for the core's get_pages, which
        // follows at once (docs/contract.md, the core's call order): one
        // pin a registration, where
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
                let data = this.clone_arc();
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
        // address.
        let raw = NonNull::from(&*this);
        registry::insert(this);
        // INVARIANT: the registration's address, and in the
        // registry now.
        Ok(Some(CoreRef(raw)))
    }

    /// acquire's persistent pin of `range`: `None` if it is not pinnable
    /// GPU memory (simply not ours).
    #[inline(always)]
    pub(super) fn pin_persistent_for_acquire(
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
    /// [`stranded`]: super::stranded
    #[inline(always)]
    pub(super) fn check_persistent_pin(
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
                stranded::keep(page_table);
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
    pub(super) fn keep_acquired_pin(
        &self,
        page_table: PageTable<Self>,
    ) -> core::result::Result<bool, Failure> {
        let end = self.state.lock().end_pinning(page_table, Unusable::check);
        let (pinned, unusable) = match end {
            PinningEnd::Kept => return Ok(true),
            PinningEnd::Unusable(pinned, unusable) => (pinned, unusable),
            PinningEnd::Invalidated => return Ok(false),
            PinningEnd::Dead(pinned) => {
                // SAFETY: the invalidation is `Done`: the provider called
                // the free callback of this page table.
                self.free_dead(unsafe { pinned.into_dead() });
                return Ok(false);
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
                self.state.lock().refuse(f.kind);
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
    pub(super) fn give_up_refused_pin(&self, e: Error) -> Failure {
        self.state.lock().give_up();
        pr_err!(
            "unpinning acquire's pin of [{:#x}, {:#x}) failed ({:?}): not taking it (the core may offer it to another client); the pin ends when the memory is freed (this module stays in use until then)\n",
            self.range.start(),
            self.range.end(),
            e
        );
        Failure::new(ErrorKind::PutPages, e)
    }
}
