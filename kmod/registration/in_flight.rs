// SPDX-License-Identifier: GPL-2.0

//! The hand-off of a registration's pages to the one thread that calls the
//! provider with them outside the state lock, and back.

use super::state::HandBack;
use super::{PinKind, Pinned, Registration};
use crate::sg::SgTable;
use crate::stats::{self, ErrorKind, STATS};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

impl Registration {
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
    pub(super) fn out_of_provider(&self) -> bool {
        if self.kind == PinKind::Persistent {
            return true;
        }
        self.state.lock().start_reading()
    }

    /// The mapping is read: from now on a free callback does not wait for
    /// this thread ([`Op::Building`]); one that was waiting is woken. A
    /// persistent registration never started reading: nothing changes.
    #[inline(always)]
    pub(super) fn end_reading(&self) {
        if self.kind == PinKind::Persistent {
            return;
        }
        if self.state.lock().end_reading() {
            crate::wait::wake_free_waiters();
        }
    }

    /// Back to a phase a free callback waits for, to unmap after a
    /// refusal from [`Op::Building`] (see [`State::start_unmapping`]):
    /// false if an invalidation started meanwhile.
    ///
    /// [`State::start_unmapping`]: super::state::State::start_unmapping
    #[inline(always)]
    pub(super) fn start_unmapping(&self) -> bool {
        if self.kind == PinKind::Persistent {
            return true;
        }
        self.state.lock().start_unmapping()
    }

    /// Ends an in-flight operation that holds `pinned` (and, for dma_map, the
    /// new SG table `sg`): keeps them, unless an invalidation started
    /// meanwhile. Then the SG table is freed, and so are the pinned pages if
    /// the free callback has finished (they are dead); a running callback
    /// frees them itself. Returns whether an invalidation started.
    #[inline(always)]
    pub(super) fn finish_in_flight(&self, pinned: Pinned, sg: Option<SgTable>) -> bool {
        let (hand_back, unused_sg) = self.state.lock().hand_back(pinned, sg);
        drop(unused_sg);
        self.complete_hand_back(hand_back)
    }

    /// Does what `hand_back` says after the unlock: wakes a running free
    /// callback, which may be waiting for this thread, or frees pages whose
    /// free callback has finished. Returns whether an invalidation started.
    #[inline(always)]
    pub(super) fn complete_hand_back(&self, hand_back: HandBack) -> bool {
        match hand_back {
            HandBack::Kept => false,
            HandBack::WakeCallback => {
                crate::wait::wake_free_waiters();
                true
            }
            HandBack::FreeDead(pinned) => {
                // SAFETY: `FreeDead` holds pages of this registration whose
                // invalidation is `Done` (its invariant): the provider called
                // the free callback of their page table.
                self.free_dead(unsafe { pinned.into_dead() });
                true
            }
        }
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
    pub(super) fn unpin_in_flight(&self, mut pinned: Pinned) -> bool {
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
            if !self.state.lock().start_unpinning() {
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
    pub(super) fn try_unpin_in_flight(&self, pinned: Pinned) -> Result<bool> {
        if !pinned.unpins_here() {
            return Ok(self.leave_to_owner(pinned));
        }
        let from_other_process = pinned.owner() != crate::p2p::Process::current();
        match pinned.unpin() {
            Ok(unpinned) => {
                if from_other_process {
                    // A persistent pin: the driver puts it from anywhere.
                    stats::inc(&STATS.unpins_from_other_process);
                }
                let callback_ran = self.state.lock().end_unpinning();
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
                    // SAFETY: a pin with a free callback is put only by the
                    // process that pinned (`unpin` puts it from no other;
                    // a persistent pin has no data to take back), so its 0
                    // means it unpinned or found the page table unlinked by
                    // the callback; and no invalidation started before the put
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

    /// Unpinning pages pinned with a free callback from a process other
    /// than the one that pinned (the core deregistering from a uverbs file
    /// another process shares, or tearing every MR of a device down as its
    /// driver goes): the driver looks such pins up among the calling
    /// process's only, so a put from here would return 0 and unpin nothing.
    /// Nothing is called. The pages go back to the state, left to their
    /// owner ([`Stage::LeftToOwner`]): its cudaFree or exit calls the
    /// callback, which ends them and the registration; till then the
    /// provider keeps its reference, and with it the module. (A persistent
    /// pin has no callback and is put from any process: it never comes
    /// here.) Said once a load; debugfs counts it. Returns whether an
    /// invalidation started meanwhile (its callback then frees the pages).
    #[cold]
    #[inline(never)]
    pub(super) fn leave_to_owner(&self, pinned: Pinned) -> bool {
        let (owner, here) = (pinned.owner(), crate::p2p::Process::current());
        let hand_back = self.state.lock().leave_to_owner(pinned);
        if matches!(hand_back, HandBack::Kept) {
            stats::inc(&STATS.unpins_from_other_process);
            stats::inc(&STATS.left_to_owner);
            self.said_left_to_owner(owner, here);
        }
        self.complete_hand_back(hand_back)
    }

    /// Says, once a load, that pages were left to the process that pinned
    /// them.
    pub(super) fn said_left_to_owner(&self, owner: crate::p2p::Process, here: crate::p2p::Process) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            pr_warn!(
                "registration {}: [{:#x}, {:#x}) deregistered from process {}, not from process {} that pinned it: the NVIDIA driver unpins only for that process, so the GPU memory stays pinned until that process frees the memory or exits, and this module stays in use until then (said once; debugfs stats left_to_owner counts such registrations now, unpins_from_other_process in all)\n",
                self.id,
                self.range.start(),
                self.range.end(),
                here.id(),
                owner.id()
            );
        }
    }
}
