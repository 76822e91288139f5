// SPDX-License-Identifier: GPL-2.0

//! Pinned GPU memory with its mapping ([`Pinned`]), and what a free
//! callback leaves of it ([`DeadPages`]).

use super::dma::{DmaMapping, PciDevice};
use super::page_table::{PageTable, Unpinned};
use super::{page_size_name, version_compatible, FreeCallback, Process};
use crate::range::GpuRange;
use crate::stats::{ErrorKind, Failure, STATS};
use crate::sys;
use crate::sys::check;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// Pinned GPU memory and, once mapped, its DMA mapping. Dropping it unmaps
/// and unpins only without a free callback (see the module's doc).
pub(crate) struct Pinned<T: FreeCallback> {
    mapping: Option<DmaMapping>,
    page_table: PageTable<T>,
}

impl<T: FreeCallback> Drop for Pinned<T> {
    // Out of line (no path of ours drops pinned pages but on a failure):
    // the drop glue of `Option<Pinned>` stays small enough to inline, so
    // storing pinned pages into an empty state slot costs no call.
    #[inline(never)]
    fn drop(&mut self) {
        if self.page_table.callback.is_some() {
            // As `PageTable::drop`, which says so: the mapping is left too.
            if self.mapping.take().is_some() {
                STATS.mappings.fetch_sub(1, Ordering::Relaxed);
            }
            return;
        }
        // Unmap first; the page table is unpinned when its field drops.
        if let Err(e) = self.unmap() {
            STATS.error(ErrorKind::DmaUnmap);
            pr_err!(
                "nvidia_p2p_dma_unmap_pages failed ({:?}): mapping left\n",
                e
            );
        }
    }
}

impl<T: FreeCallback> Pinned<T> {
    /// Pinned memory, not mapped yet.
    pub(crate) fn new(page_table: PageTable<T>) -> Self {
        Self {
            mapping: None,
            page_table,
        }
    }

    /// The pinned range.
    pub(crate) fn range(&self) -> GpuRange {
        self.page_table.range()
    }

    /// Whether a DMA mapping exists.
    pub(crate) fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }

    /// Whether the driver's put finds these pages from the calling process
    /// (see [`PageTable::unpins_here`]).
    #[inline(always)]
    pub(crate) fn unpins_here(&self) -> bool {
        self.page_table.unpins_here()
    }

    /// The process that pinned.
    pub(crate) fn owner(&self) -> Process {
        self.page_table.owner()
    }

    /// Maps the pages for `peer`: the provider call only, nothing of the
    /// mapping is read (see [`Pinned::dma_addresses`]). The mapping stays in
    /// `self`.
    #[inline(always)]
    pub(crate) fn map(&mut self, peer: PciDevice) -> core::result::Result<(), Failure> {
        if self.mapping.is_some() {
            return Err(Failure::new(ErrorKind::Sequence, EINVAL));
        }
        let mut ptr = core::ptr::null_mut();
        // SAFETY: FFI call; `peer` and the page table are alive (type
        // invariants), `ptr` is a valid out-pointer.
        let rc = unsafe {
            sys::nvidia_p2p_dma_map_pages(peer.0.as_ptr(), self.page_table.ptr.as_ptr(), &mut ptr)
        };
        check(rc).map_err(|e| Failure::new(ErrorKind::DmaMap, e))?;
        let ptr = NonNull::new(ptr).ok_or(Failure::new(ErrorKind::DmaMap, EINVAL))?;
        STATS.mappings.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: just mapped from this page table, which `self` owns.
        self.mapping = Some(DmaMapping { ptr, peer });
        Ok(())
    }

    /// Checks the mapping made by [`Pinned::map`] and returns the DMA address
    /// of each GPU page. An unusable mapping stays in `self` for the caller
    /// to unmap (or to free, should the memory die meanwhile).
    #[inline(always)]
    pub(crate) fn dma_addresses(&self) -> core::result::Result<&[u64], Failure> {
        let range = self.range();
        let Some(mapping) = self.mapping.as_ref() else {
            return Err(Failure::new(ErrorKind::Sequence, EINVAL));
        };
        let m = mapping.raw();
        if !version_compatible(m.version, sys::NVIDIA_P2P_DMA_MAPPING_VERSION) {
            pr_err!(
                "refusing [{:#x}, {:#x}): DMA mapping version {:#010x} is incompatible with {:#010x}\n",
                range.start(),
                range.end(),
                m.version,
                sys::NVIDIA_P2P_DMA_MAPPING_VERSION
            );
            return Err(Failure::new(ErrorKind::DmaMappingVersion, EINVAL));
        }
        if m.page_size_type != sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
            pr_err!(
                "refusing [{:#x}, {:#x}): DMA mapping page size is {}, only 64 KiB pages are supported\n",
                range.start(),
                range.end(),
                page_size_name(m.page_size_type)
            );
            return Err(Failure::new(ErrorKind::PageSize, EINVAL));
        }
        if m.entries != range.pages() || m.dma_addresses.is_null() {
            pr_err!(
                "refusing [{:#x}, {:#x}): DMA mapping has {} entries for {} GPU pages\n",
                range.start(),
                range.end(),
                m.entries,
                range.pages()
            );
            return Err(Failure::new(ErrorKind::DmaMappingVersion, EINVAL));
        }
        Ok(mapping.dma_addresses())
    }

    /// Unmaps, if mapped. On failure the mapping is kept.
    #[inline(always)]
    pub(crate) fn unmap(&mut self) -> Result {
        match self.mapping.take() {
            None => Ok(()),
            Some(mapping) => mapping.unmap(self.page_table.ptr).map_err(|(mapping, e)| {
                self.mapping = Some(mapping);
                e
            }),
        }
    }

    /// Takes the mapping and the page table out, without running `Drop`.
    #[inline(always)]
    fn into_parts(self) -> (Option<DmaMapping>, PageTable<T>) {
        let mut this = ManuallyDrop::new(self);
        let mapping = this.mapping.take();
        // SAFETY: `this` is never used or dropped again, so the page table is
        // moved out exactly once.
        let page_table = unsafe { core::ptr::read(&this.page_table) };
        (mapping, page_table)
    }

    /// Unpins. The mapping must be gone first ([`Pinned::unmap`]: it reads
    /// the page table without the driver lock, which a free callback must
    /// wait for, and put_pages takes that lock: two phases for the owner);
    /// still mapped, `EBUSY`. On failure everything is handed back.
    #[inline(always)]
    pub(crate) fn unpin(self) -> core::result::Result<Unpinned<T>, (Self, Error)> {
        if self.is_mapped() {
            return Err((self, EBUSY));
        }
        let (_, page_table) = self.into_parts();
        page_table.unpin().map_err(|(page_table, e)| {
            (
                Pinned {
                    mapping: None,
                    page_table,
                },
                e,
            )
        })
    }

    /// The pages after the provider's free callback for this page table:
    /// no longer pinned (uncounted here), the mapping and the page table
    /// only memory for [`DeadPages::free`] to give back.
    ///
    /// # Safety
    ///
    /// The provider has called the free callback of this page table.
    #[inline(always)]
    pub(crate) unsafe fn into_dead(self) -> DeadPages {
        let (mapping, page_table) = self.into_parts();
        page_table.uncount();
        let page_table = ManuallyDrop::new(page_table);
        let mapping = mapping.map(|mapping| {
            STATS.mappings.fetch_sub(1, Ordering::Relaxed);
            ManuallyDrop::new(mapping).ptr
        });
        // INVARIANT: the callback ran (function's safety requirements); both
        // were moved out of `self`, and their `Drop` will not run.
        DeadPages {
            mapping,
            page_table: page_table.ptr,
        }
    }
}

/// A page table and its mapping, if any, that the provider's free callback
/// killed: what is left of them is memory to give back. Taken apart from
/// [`Pinned`] (and uncounted) where the owner finds them, freed after
/// whatever else the callback does: nothing of [`Pinned`] lives across
/// those calls. Dropped without [`DeadPages::free`], their memory
/// is leaked.
///
/// # Invariants
///
/// Both came from a [`Pinned`] whose page table's free callback ran, and are
/// owned by this value alone.
#[must_use]
pub(crate) struct DeadPages {
    mapping: Option<NonNull<sys::nvidia_p2p_dma_mapping>>,
    page_table: NonNull<sys::nvidia_p2p_page_table>,
}

// SAFETY: provider objects, usable from any thread.
unsafe impl Send for DeadPages {}

impl DeadPages {
    /// Gives the mapping and the page table back to the provider. A provider
    /// call that fails is given to `failed` (its name and error), which the
    /// caller keeps out of line and makes name the registration.
    #[inline(always)]
    pub(crate) fn free(self, failed: impl Fn(&'static str, Error)) {
        if let Some(mapping) = self.mapping {
            // SAFETY: FFI call; the mapping is dead and ours alone (type
            // invariant), and freed once (`self` is consumed).
            let rc = unsafe { sys::nvidia_p2p_free_dma_mapping(mapping.as_ptr()) };
            if let Err(e) = check(rc) {
                failed("nvidia_p2p_free_dma_mapping", e);
            }
        }
        // SAFETY: as above, for the page table.
        let rc = unsafe { sys::nvidia_p2p_free_page_table(self.page_table.as_ptr()) };
        if let Err(e) = check(rc) {
            failed("nvidia_p2p_free_page_table", e);
        }
    }
}
