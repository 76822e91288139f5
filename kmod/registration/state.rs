// SPDX-License-Identifier: GPL-2.0

//! The state machine of a registration: where its pages stand ([`Stage`]),
//! which operation holds them outside the lock ([`Op`]), and how far a free
//! callback got ([`Invalidation`]), all kept in one [`State`] under the
//! registration's state lock.

use super::Pinned;
use crate::sg::SgTable;
use crate::stats::ErrorKind;

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
/// lockdep's (the assertion after [`Registration`], the KUnit case
/// `registration_size`).
pub(super) struct State {
    /// The pinned pages, unless none or `in_flight`.
    pub(super) pinned: Option<Pinned>,
    /// The SG table given to the core, freed at release.
    pub(super) sg: Option<SgTable>,
    pub(super) stage: Stage,
    /// The operation holding the resources outside the lock, if any.
    pub(super) in_flight: Option<Op>,
    pub(super) invalidation: Invalidation,
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

/// What to do with resources handed back after a provider call.
pub(super) enum HandBack {
    /// Keep them in the state.
    Kept,
    /// Kept in the state for a running free callback, which may be waiting
    /// for this thread: wake it.
    WakeCallback,
    /// The invalidation is over: free them (dead) now.
    FreeDead(Pinned),
}
