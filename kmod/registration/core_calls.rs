// SPDX-License-Identifier: GPL-2.0

//! The core's calls on a registration after acquire: get_pages, dma_map,
//! dma_unmap, put_pages, get_page_size and release.

use super::state::Op;
use super::{in_core_mark, registry, CoreRef, PinKind, Pinned, Registration, IN_CORE_WAITED};
use crate::core_client::INVALIDATION;
use crate::p2p::PciDevice;
use crate::range::{GpuRange, GPU_PAGE_SIZE};
use crate::sg::{SgPlan, SgTable};
use crate::stats::{self, ErrorKind, Failure, STATS};
use core::sync::atomic::Ordering;
use kernel::alloc::KVVec;
use kernel::sync::ArcBorrow;
use kernel::{bindings, prelude::*};

impl Registration {
    /// The core's get_pages: takes the pin acquire kept (no provider call).
    pub(crate) fn get_pages(
        this: ArcBorrow<'_, Self>,
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

    pub(super) fn try_get_pages(
        this: ArcBorrow<'_, Self>,
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
        // The pin acquire kept becomes the core's; from now on a free
        // callback invalidates through the core with this ticket, written
        // under the same lock.
        st.take_pin_for_core()?;
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

    pub(super) fn try_dma_map(
        &self,
        sg_head: &mut bindings::sg_table,
        peer: Option<PciDevice>,
    ) -> core::result::Result<u32, Failure> {
        let peer = peer.ok_or(Failure::new(ErrorKind::NotPci, EINVAL))?;
        let coalesce = crate::params::coalesce_sg();
        // Allocated before the provider call, so that reading the mapping
        // (the phase a free callback waits for, holding the driver lock)
        // only stores: one entry a GPU page, the SG table itself; coalesced,
        // whose size depends on the addresses, room for a copy of them, from
        // which the table is built once the callback no longer waits.
        let pages = self.range.pages() as usize;
        let scratch = if coalesce {
            Scratch::Addresses(
                KVVec::from_elem(0u64, pages, GFP_KERNEL)
                    .map_err(|_| Failure::new(ErrorKind::NoMemory, ENOMEM))?,
            )
        } else {
            Scratch::Table(SgTable::alloc(pages).map_err(|e| Failure::new(ErrorKind::SgTable, e))?)
        };
        let mut pinned = self.state.lock().take_for_mapping()?;

        let mapped = pinned.map(peer);
        if !self.out_of_provider() {
            // The mapping (if made) died with the page table before we read
            // it; the driver frees both.
            self.finish_in_flight(pinned, None);
            return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
        }
        let reading = crate::test_delay::ReadingPhase::begin();
        let read =
            mapped
                .and_then(|()| pinned.dma_addresses())
                .and_then(|addresses| match scratch {
                    Scratch::Table(table) => table
                        .fill(SgPlan::new(addresses, GPU_PAGE_SIZE, false))
                        .map(Read::Built)
                        .map_err(|e| Failure::new(ErrorKind::SgTable, e)),
                    Scratch::Addresses(mut copy) => {
                        // `dma_addresses` checked one address a GPU page.
                        if copy.len() != addresses.len() {
                            return Err(Failure::new(ErrorKind::DmaMappingVersion, EINVAL));
                        }
                        copy.copy_from_slice(addresses);
                        Ok(Read::Copied(copy))
                    }
                });
        let sg = match read {
            Ok(Read::Built(sg)) => Ok(sg),
            Ok(Read::Copied(copy)) => {
                drop(reading);
                self.end_reading();
                let built = SgTable::build(SgPlan::new(&copy, GPU_PAGE_SIZE, true))
                    .map_err(|e| Failure::new(ErrorKind::SgTable, e));
                drop(copy);
                if built.is_err() && !self.start_unmapping() {
                    // The callback did not wait for an unmap: the mapping
                    // is the driver's to free with the page table.
                    self.finish_in_flight(pinned, None);
                    return Err(Failure::new(ErrorKind::FreedWhileRegistering, EFAULT));
                }
                built
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
    pub(super) fn take_for(&self, op: Op, sg_head: &bindings::sg_table) -> Option<Pinned> {
        self.state.lock().take_for_core(op, sg_head, self.id)
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
            let (sg, leftover) = st.release();
            // A free callback that set this did so under this lock, and
            // none sets it after (the stage is no longer `GotPages`).
            let in_core = this.in_core.load(Ordering::Relaxed);
            (sg, leftover, in_core)
        };
        drop(sg);
        if let Some(pinned) = leftover {
            // The core did not unpin (or unpinning failed before): do it now.
            this.unpin_in_flight(pinned);
        }
        if in_core != 0 && INVALIDATION.release_waits_for_invalidation() {
            if in_core & !IN_CORE_WAITED == in_core_mark() {
                // The core releases from inside the invalidation, on the
                // callback's own task: that callback cannot come out before
                // this returns.
                this.released_inside_own_callback();
            } else {
                this.wait_out_of_core(in_core);
            }
        }
    }
}

/// What dma_map allocates before the provider call (see
/// [`Registration::try_dma_map`]).
enum Scratch {
    /// The SG table, one entry a GPU page.
    Table(SgTable),
    /// Room for the DMA addresses, one a GPU page, to build a coalesced
    /// table from.
    Addresses(KVVec<u64>),
}

/// What dma_map has once it read the mapping.
enum Read {
    /// The SG table, filled.
    Built(SgTable),
    /// The DMA addresses, copied out.
    Copied(KVVec<u64>),
}
