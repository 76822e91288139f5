// SPDX-License-Identifier: GPL-2.0

//! The free callback: the provider says the memory is being freed, and the
//! registration is invalidated through the core and its pages freed.

use super::state::{Op, OtherInvalidation, State};
use super::{in_core_mark, Pinned, Registration, IN_CORE_WAITED};
use crate::core_client::INVALIDATION;
use crate::p2p::{DeadPages, FreeCallback};
use crate::stats::{self, ErrorKind, STATS};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;
use kernel::sync::lock::{spinlock::SpinLockBackend, Guard};
use kernel::sync::{Arc, ArcBorrow};

impl Registration {
    /// The free callback: invalidate through the core, then free the dead
    /// mapping and page table.
    #[inline(always)]
    fn invalidate(&self, callback: &InFreeCallback) {
        stats::inc(&STATS.invalidations);
        let mut st = self.state.lock();
        if let Some(pinned) = st.invalidate_idle() {
            // The common callback: a live registration of the core's,
            // pinned, that no thread holds or reads; the invalidation is as
            // good as done (one critical section), and the pages are freed
            // once the core's invalidate returned.
            // Before the unlock: a release that takes the lock after it
            // sees the callback, and its task, on its way into the core.
            self.in_core.store(in_core_mark(), Ordering::Relaxed);
            let dead = callback.kill(pinned);
            drop(st);
            self.invalidate_core(self.core_context.load(Ordering::Relaxed));
            self.out_of_core();
            self.free_dead(dead);
            return;
        }
        self.invalidate_uncommon(st, callback);
    }

    /// The rest of a free callback that found no live, idle registration of
    /// the core's: nothing to invalidate through the core. Out of line, with
    /// its own unlock: the common callback carries nothing across its one.
    #[cold]
    #[inline(never)]
    fn invalidate_uncommon(
        &self,
        mut st: Guard<'_, State, SpinLockBackend>,
        callback: &InFreeCallback,
    ) {
        stats::inc(&STATS.invalidations_without_core);
        match st.invalidate_other() {
            OtherInvalidation::Again => {}
            OtherInvalidation::Done(taken, was_left_to_owner) => {
                // The pages, if any, are freed here.
                drop(st);
                if was_left_to_owner {
                    STATS.left_to_owner.fetch_sub(1, Ordering::Relaxed);
                }
                if let Some(pinned) = taken {
                    self.free_dead(callback.kill(pinned));
                }
            }
            OtherInvalidation::Running => {
                // No invalidation through the core, and the end waits for
                // the readers.
                drop(st);
                self.end_invalidation(callback);
            }
        }
    }

    /// The free callback has returned from the core's invalidate: a release
    /// waiting for that may return now.
    #[inline(always)]
    pub(super) fn out_of_core(&self) {
        if self.in_core.swap(0, Ordering::AcqRel) & IN_CORE_WAITED != 0 {
            crate::wait::wake_free_waiters();
        }
    }

    /// Sleeps until the free callback of this registration that `in_core`
    /// (a value of [`Registration::in_core`], not 0) names has come out of
    /// the core's invalidate (see
    /// [`InvalidationSlot::release_waits_for_invalidation`]). Nothing is
    /// held: on a core that needs the wait (MLNX_OFED 5.4-3 and later), the
    /// callback inside the core needs the core's mapping lock, which that
    /// core never holds while it calls release, and the driver lock it
    /// already holds, none of ours. Never called on the callback's own
    /// task (the caller checks): that task would wait for itself.
    ///
    /// [`InvalidationSlot::release_waits_for_invalidation`]:
    ///     crate::core_client::InvalidationSlot::release_waits_for_invalidation
    #[cold]
    #[inline(never)]
    pub(super) fn wait_out_of_core(&self, in_core: u32) {
        stats::inc(&STATS.release_waited_for_invalidation);
        let task = in_core & !IN_CORE_WAITED;
        crate::wait::free_wait(|| {
            match self.in_core.compare_exchange(
                task,
                task | IN_CORE_WAITED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // Now marked: the callback wakes us when it comes out.
                Ok(_) => false,
                // Marked already (by another release), or out: 0.
                Err(now) => now == 0,
            }
        });
    }

    /// The core called release on the task of this registration's free
    /// callback, from inside the core's invalidate: no wait (it would never
    /// end). Only a core this module does not know does so with the
    /// release wait on; said once a load.
    #[cold]
    #[inline(never)]
    pub(super) fn released_inside_own_callback(&self) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            pr_warn!(
                "registration {}: the PeerDirect core released it from inside its invalidation, on the free callback's own task: not waiting for the callback to leave the core (said once)\n",
                self.id
            );
        }
    }

    /// Invalidates through the core (the free callback, `ticket` from
    /// get_pages).
    #[inline(always)]
    pub(super) fn invalidate_core(&self, ticket: u64) {
        if let Err(e) = INVALIDATION.invalidate(ticket) {
            self.invalidate_failed(e);
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn invalidate_failed(&self, e: Error) {
        STATS.error(ErrorKind::Invalidate);
        pr_err!(
            "registration {}: the core's invalidate failed ({:?})\n",
            self.id,
            e
        );
    }

    /// Gives back the memory of pages whose free callback ran.
    #[inline(always)]
    pub(super) fn free_dead(&self, dead: DeadPages) {
        dead.free(|call, e| self.free_failed(call, e));
    }

    /// A provider call freeing a dead mapping or page table failed: what
    /// is left of them is the driver's.
    #[cold]
    #[inline(never)]
    pub(super) fn free_failed(&self, call: &str, e: Error) {
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
    fn end_invalidation(&self, callback: &InFreeCallback) {
        let mut waited = false;
        let mut taken = None;
        let look = || {
            let end = self.state.lock().end_invalidation();
            match end {
                Err(op) => {
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
                Ok(pinned) => {
                    taken = pinned;
                    true
                }
            }
        };
        crate::wait::free_wait(look);
        if let Some(pinned) = taken {
            self.free_dead(callback.kill(pinned));
        }
    }
}

/// Code holding this runs inside the provider's free callback of a
/// registration's page table, and deals with that registration only.
///
/// # Invariants
///
/// Made only by [`FreeCallback::on_free`], lent for that call only, to the
/// registration it was called for.
struct InFreeCallback(());

impl InFreeCallback {
    /// The registration's pages, `pinned`, as dead: the provider called
    /// their page table's free callback (this one).
    #[inline(always)]
    fn kill(&self, pinned: Pinned) -> DeadPages {
        // SAFETY: we are the page table's free callback (type invariant): a
        // registration's pages are its one page table with a callback.
        unsafe { pinned.into_dead() }
    }
}

impl FreeCallback for Registration {
    type Data = Arc<Registration>;

    // Into the callback's adapter: one function on the provider's call.
    #[inline(always)]
    fn on_free(this: ArcBorrow<'_, Registration>) {
        // INVARIANT: the provider's free callback of `this`, for this call.
        this.invalidate(&InFreeCallback(()));
    }
}
