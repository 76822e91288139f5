// SPDX-License-Identifier: GPL-2.0

//! The state machine of a registration: where its pages stand ([`Stage`]),
//! which operation holds them outside the lock ([`Op`]), and how far a free
//! callback got ([`Invalidation`]), all kept in one [`State`] under the
//! registration's state lock, and every transition between them: the
//! methods of [`State`], each called with that lock held and calling
//! nothing of the provider's or the core's. The rest of the registration
//! sees the state through them only.

use super::{Pinned, Registration};
use crate::p2p::PageTable;
use crate::sg::SgTable;
use crate::stats::{self, ErrorKind, Failure, STATS};
use kernel::{bindings, prelude::*};

/// Where an invalidation (free callback) stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Invalidation {
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
pub(super) enum Op {
    /// Inside the provider's get_pages (takes the driver lock).
    Pinning,
    /// Inside the provider's dma_map_pages (takes the driver lock).
    Mapping,
    /// Out of dma_map_pages, reading the new mapping into what was
    /// allocated before the call (the SG table, or room for the DMA
    /// addresses when coalescing), and unmapping it again on a refusal;
    /// nothing is allocated here. acquire reads its new page table under
    /// the lock instead ([`State::end_pinning`]).
    Reading,
    /// Out of dma_map_pages, the DMA addresses copied out: building the
    /// coalesced SG table from that copy (an allocation), reading nothing
    /// of the provider's.
    Building,
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
    pub(super) fn reads_provider_objects(self) -> bool {
        matches!(self, Op::Reading | Op::Unmapping)
    }

    /// What a thread that unpins `pinned` touches first: a mapping left
    /// mapped is unmapped before the pages are put.
    pub(super) fn unpinning(pinned: &Pinned) -> Self {
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
/// lockdep's (the assertion after [`super::Registration`], the KUnit case
/// `registration_size`).
pub(super) struct State {
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
/// pins again at get_pages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Stage {
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
    /// given up, [`State::give_up`]): no ticket, nothing
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

/// What to do with resources handed back after a provider call
/// ([`State::hand_back`], [`State::leave_to_owner`]).
///
/// # Invariants
///
/// `FreeDead` holds pages of the registration whose state made it, once
/// that registration's invalidation is `Done`.
pub(super) enum HandBack {
    /// Keep them in the state.
    Kept,
    /// Kept in the state for a running free callback, which may be waiting
    /// for this thread: wake it.
    WakeCallback,
    /// The invalidation is over: free them (dead) now.
    FreeDead(Pinned),
}

/// How acquire's invalidating pin came out of the provider
/// ([`State::end_pinning`]).
pub(super) enum PinningEnd<U> {
    /// Usable: kept for the core's get_pages.
    Kept,
    /// Not usable (`U` says why): in flight again, to be unpinned.
    Unusable(Pinned, U),
    /// An invalidation started meanwhile: the running callback frees it.
    Invalidated,
    /// The invalidation has finished: the pages are dead, the caller's to
    /// free.
    Dead(Pinned),
}

/// What a free callback found ([`State::invalidate_other`]), when the
/// registration was not a live, idle one of the core's.
pub(super) enum OtherInvalidation {
    /// A callback already ran or runs: nothing to do.
    Again,
    /// Nothing in flight: the invalidation is done; what was pinned, if
    /// anything, is the callback's to free, and whether the pages had been
    /// left to their owner.
    Done(Option<Pinned>, bool),
    /// A thread holds or reads the resources: the invalidation runs until
    /// it no longer reads them.
    Running,
}

impl State {
    /// The state of a new registration at `stage`, with `in_flight` under
    /// way, holding `pinned`.
    pub(super) fn new(stage: Stage, in_flight: Option<Op>, pinned: Option<Pinned>) -> Self {
        Self {
            pinned,
            sg: None,
            stage,
            in_flight,
            invalidation: Invalidation::None,
        }
    }

    /// Whether no invalidation started.
    fn live(&self) -> bool {
        self.invalidation == Invalidation::None
    }

    /// acquire's invalidating pin is out of the provider. Unless an
    /// invalidation started meanwhile, `check` reads its page table (alive:
    /// a free callback takes this lock first) and it is kept for the core's
    /// get_pages, or taken back out to be unpinned.
    pub(super) fn end_pinning<U>(
        &mut self,
        page_table: PageTable<Registration>,
        check: impl FnOnce(&PageTable<Registration>) -> core::result::Result<(), U>,
    ) -> PinningEnd<U> {
        match self.invalidation {
            Invalidation::None => match check(&page_table) {
                Ok(()) => {
                    self.in_flight = None;
                    self.pinned = Some(Pinned::new(page_table));
                    self.stage = Stage::PinKept;
                    PinningEnd::Kept
                }
                Err(why) => {
                    self.in_flight = Some(Op::Unpinning);
                    PinningEnd::Unusable(Pinned::new(page_table), why)
                }
            },
            Invalidation::Running => {
                // The callback (not waiting for a pin) frees it after it
                // returns from the core.
                self.in_flight = None;
                self.pinned = Some(Pinned::new(page_table));
                PinningEnd::Invalidated
            }
            Invalidation::Done => {
                self.in_flight = None;
                PinningEnd::Dead(Pinned::new(page_table))
            }
        }
    }

    /// acquire's pin was unpinned as unusable: the core's get_pages fails
    /// with `kind`.
    pub(super) fn refuse(&mut self, kind: ErrorKind) {
        self.stage = Stage::Refused(kind);
    }

    /// acquire's refused pin could not be unpinned: the core never gets
    /// the registration.
    pub(super) fn give_up(&mut self) {
        self.stage = Stage::Released;
    }

    /// The core's get_pages takes the pin acquire kept, unless the memory
    /// was freed since, acquire refused it, or the call is out of order.
    pub(super) fn take_pin_for_core(&mut self) -> core::result::Result<(), Failure> {
        if !self.live() {
            // Freed since acquire pinned it: the callback freed the pin.
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        match self.stage {
            Stage::PinKept if self.in_flight.is_none() => {}
            // Said when acquire checked the pin; unpinned then.
            Stage::Refused(kind) => return Err(Failure::new(kind, EINVAL)),
            _ => return Err(Failure::new(ErrorKind::Sequence, EINVAL)),
        }
        self.stage = Stage::GotPages;
        Ok(())
    }

    /// Takes the pages out for the core's dma_map ([`Op::Mapping`]): pinned
    /// by the core's get_pages, not mapped, nothing in flight.
    pub(super) fn take_for_mapping(&mut self) -> core::result::Result<Pinned, Failure> {
        if !self.live() {
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        if self.in_flight.is_some()
            || self.stage != Stage::GotPages
            || self.sg.is_some()
            // (a match: `map_or(true, ..)` and its replacement
            // `is_none_or` each fail clippy on one of our kernels' MSRVs)
            || match &self.pinned {
                Some(p) => p.is_mapped(),
                None => true,
            }
        {
            return Err(Failure::new(ErrorKind::Sequence, EINVAL));
        }
        self.in_flight = Some(Op::Mapping);
        self.pinned
            .take()
            .ok_or(Failure::new(ErrorKind::Sequence, EINVAL))
    }

    /// Out of dma_map_pages: from now on a free callback waits while the
    /// mapping is read ([`Op::Reading`]). False, changing nothing, if an
    /// invalidation started meanwhile.
    pub(super) fn start_reading(&mut self) -> bool {
        if !self.live() {
            return false;
        }
        self.in_flight = Some(Op::Reading);
        true
    }

    /// The mapping is read (its DMA addresses copied out): a free callback
    /// no longer waits for this thread, which builds the SG table from the
    /// copy ([`Op::Building`]). Returns whether an invalidation is running,
    /// whose callback may be waiting: the caller wakes it.
    pub(super) fn end_reading(&mut self) -> bool {
        if self.in_flight == Some(Op::Reading) {
            self.in_flight = Some(Op::Building);
        }
        self.invalidation == Invalidation::Running
    }

    /// Unmapping again after a refusal, from [`Op::Building`]: from now on
    /// a free callback waits for this thread. False, changing nothing, if
    /// an invalidation started meanwhile (its callback did not wait: the
    /// mapping is the driver's to free).
    pub(super) fn start_unmapping(&mut self) -> bool {
        if !self.live() {
            return false;
        }
        self.in_flight = Some(Op::Unmapping);
        true
    }

    /// Takes the pages out for an unmap (`op` [`Op::Unmapping`]) or unpin
    /// (`op` [`Op::Unpinning`]) the core asks for, with `sg_head`; `None`
    /// if an invalidation made it a no-op, or there is nothing of the
    /// core's. `id` names the registration in the log.
    pub(super) fn take_for_core(
        &mut self,
        op: Op,
        sg_head: &bindings::sg_table,
        id: u32,
    ) -> Option<Pinned> {
        if !self.live() {
            // From inside our own free callback (same task), during it or
            // after it: the callback unmaps and unpins.
            stats::inc(&STATS.skipped_after_invalidation);
            return None;
        }
        if let Some(sg) = &self.sg {
            if !sg.is(sg_head) {
                STATS.error(ErrorKind::Sequence);
                pr_warn!(
                    "registration {}: {:?} with an SG table that is not ours\n",
                    id,
                    op
                );
            }
        }
        if self.in_flight.is_some() {
            STATS.error(ErrorKind::Sequence);
            return None;
        }
        if matches!(self.stage, Stage::PinKept | Stage::LeftToOwner) {
            // Before the core's get_pages took acquire's pin (release
            // unpins it), or after the pages were left to their owner:
            // nothing of the core's to unmap or unpin.
            return None;
        }
        let pinned = self.pinned.take()?;
        self.in_flight = Some(match op {
            Op::Unpinning => Op::unpinning(&pinned),
            op => op,
        });
        Some(pinned)
    }

    /// Ends the operation in flight, which held `pinned` (and, for
    /// dma_map, made the SG table `sg`): kept unless an invalidation
    /// started meanwhile. Also returns the SG table to free: the one
    /// replaced, or `sg` itself if not kept.
    pub(super) fn hand_back(
        &mut self,
        pinned: Pinned,
        sg: Option<SgTable>,
    ) -> (HandBack, Option<SgTable>) {
        self.in_flight = None;
        match self.invalidation {
            // INVARIANT: the invalidation is `Done`.
            Invalidation::Done => (HandBack::FreeDead(pinned), sg),
            Invalidation::Running => {
                // The callback frees it after the core's invalidate; it
                // may be waiting for us.
                self.pinned = Some(pinned);
                (HandBack::WakeCallback, sg)
            }
            Invalidation::None => {
                self.pinned = Some(pinned);
                let replaced = match sg {
                    Some(sg) => self.sg.replace(sg),
                    None => None,
                };
                (HandBack::Kept, replaced)
            }
        }
    }

    /// Pages unmapped before an unpin are to be put ([`Op::Unpinning`]),
    /// unless an invalidation started meanwhile (false, changing nothing).
    pub(super) fn start_unpinning(&mut self) -> bool {
        if !self.live() {
            return false;
        }
        self.in_flight = Some(Op::Unpinning);
        true
    }

    /// The put of the operation in flight returned 0: ends it, and says
    /// whether an invalidation started before.
    pub(super) fn end_unpinning(&mut self) -> bool {
        self.in_flight = None;
        !self.live()
    }

    /// Hands back pages unpinned from a process other than the one that
    /// pinned them, with their free callback armed: kept, left to their
    /// owner ([`Stage::LeftToOwner`]), unless an invalidation started.
    pub(super) fn leave_to_owner(&mut self, pinned: Pinned) -> HandBack {
        let (hand_back, _) = self.hand_back(pinned, None);
        if matches!(hand_back, HandBack::Kept) {
            self.stage = Stage::LeftToOwner;
        }
        hand_back
    }

    /// The core releases the registration: its SG table, and the pages it
    /// did not unpin (in flight now, to be unpinned), unless an
    /// invalidation, a thread in flight or their owner has them.
    pub(super) fn release(&mut self) -> (Option<SgTable>, Option<Pinned>) {
        // Pages left to their owner stay so: its free callback ends them.
        let left_to_owner = self.stage == Stage::LeftToOwner;
        if !left_to_owner {
            self.stage = Stage::Released;
        }
        let leftover = if self.live() && self.in_flight.is_none() && !left_to_owner {
            self.pinned.take()
        } else {
            None
        };
        if let Some(pinned) = &leftover {
            self.in_flight = Some(Op::unpinning(pinned));
        }
        (self.sg.take(), leftover)
    }

    /// The free callback, on a live registration of the core's, pinned,
    /// that no thread holds or reads: nobody will from now on (every call
    /// sees the invalidation and leaves the pages alone), so the pages are
    /// the callback's and the invalidation as good as done. `None`,
    /// changing nothing, for any other registration.
    pub(super) fn invalidate_idle(&mut self) -> Option<Pinned> {
        if !self.live() || self.in_flight.is_some() || self.stage != Stage::GotPages {
            return None;
        }
        let pinned = self.pinned.take()?;
        self.invalidation = Invalidation::Done;
        Some(pinned)
    }

    /// The free callback, on any other registration than
    /// [`State::invalidate_idle`]'s.
    pub(super) fn invalidate_other(&mut self) -> OtherInvalidation {
        if !self.live() {
            return OtherInvalidation::Again;
        }
        if self.in_flight.is_none() {
            // No ticket (acquire's pin before the core's get_pages took
            // it, a registration the core released, or pages left to their
            // owner), or nothing pinned (the core unpinned it).
            self.invalidation = Invalidation::Done;
            OtherInvalidation::Done(self.pinned.take(), self.stage == Stage::LeftToOwner)
        } else {
            // A thread holds the resources (the core tearing down or still
            // setting up, on another thread: it sees the invalidation and
            // fails or skips), or reads them.
            self.invalidation = Invalidation::Running;
            OtherInvalidation::Running
        }
    }

    /// A running invalidation ends unless a thread reads the page table or
    /// its mapping (`Err` with its operation): it is done, and what is
    /// left pinned is the callback's to free.
    pub(super) fn end_invalidation(&mut self) -> core::result::Result<Option<Pinned>, Op> {
        match self.in_flight {
            Some(op) if op.reads_provider_objects() => Err(op),
            _ => {
                self.invalidation = Invalidation::Done;
                Ok(self.pinned.take())
            }
        }
    }

    /// The registration in one word, for debugfs.
    pub(super) fn name(&self) -> &'static str {
        match (self.invalidation, self.in_flight, &self.pinned) {
            (Invalidation::Running, _, _) => "invalidating",
            (Invalidation::Done, _, _) => "invalidated",
            (_, Some(Op::Pinning), _) => "pinning",
            (_, Some(Op::Mapping), _) => "mapping",
            (_, Some(Op::Reading), _) => "reading",
            (_, Some(Op::Building), _) => "building",
            (_, Some(Op::Unmapping), _) => "unmapping",
            (_, Some(Op::Unpinning), _) => "unpinning",
            (_, None, Some(p)) if p.is_mapped() => "mapped",
            (_, None, Some(_)) => "pinned",
            (_, None, None) => "acquired",
        }
    }

    /// The number of entries of the SG table given to the core (0 for
    /// none).
    pub(super) fn sg_entries(&self) -> u32 {
        self.sg.as_ref().map_or(0, SgTable::entries)
    }
}
