// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table handed to the core by `dma_map`: one entry per
//! GPU page, or (with `coalesce_sg=1`) one entry per run of DMA-contiguous
//! GPU pages. Every entry starts and ends on a GPU page boundary.
//!
//! C header: [`include/linux/scatterlist.h`](srctree/include/linux/scatterlist.h)

use crate::sys;
use core::ptr::NonNull;
use kernel::{bindings, ffi::c_int, prelude::*};

/// The longest entry a coalesced run may make: the largest multiple of
/// 64 KiB that fits the `unsigned int` length of a scatterlist entry.
const MAX_ENTRY_BYTES: u64 = (u32::MAX as u64) & !0xffff;

/// The entries `(dma_address, length)` to build from the DMA address of each
/// GPU page.
#[derive(Clone)]
pub(crate) struct SgPlan<'a> {
    addresses: &'a [u64],
    page_size: u64,
    coalesce: bool,
}

impl<'a> SgPlan<'a> {
    /// Plans the entries for `addresses`, one per GPU page of `page_size`
    /// bytes, merging DMA-contiguous pages when `coalesce` is set.
    pub(crate) fn new(addresses: &'a [u64], page_size: u64, coalesce: bool) -> Self {
        Self {
            addresses,
            page_size,
            coalesce,
        }
    }
}

impl SgPlan<'_> {
    /// The number of entries the plan makes: one per GPU page unless it
    /// coalesces (then it walks the addresses to count the runs).
    pub(crate) fn entries(&self) -> usize {
        if self.coalesce {
            self.clone().count()
        } else {
            self.addresses.len()
        }
    }
}

impl Iterator for SgPlan<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let (&first, rest) = self.addresses.split_first()?;
        let mut len = self.page_size;
        let mut taken = 1;
        if self.coalesce {
            for &next in rest {
                let contiguous = first.checked_add(len) == Some(next);
                if !contiguous || len + self.page_size > MAX_ENTRY_BYTES {
                    break;
                }
                len += self.page_size;
                taken += 1;
            }
        }
        self.addresses = &self.addresses[taken..];
        Some((first, len))
    }
}

/// The number of entries of a table for `count` planned entries: at least
/// one, and at most what the core's `int *nmap` holds (`sg_alloc_table`
/// takes an `unsigned int`), so the count given to the core is never
/// negative.
pub(crate) fn table_entries(count: usize) -> Result<u32> {
    match c_int::try_from(count) {
        Ok(entries) if entries > 0 => Ok(entries.unsigned_abs()),
        _ => Err(EINVAL),
    }
}

/// A scatter-gather table allocated and filled by this module, kept as the
/// words of its `sg_table` (`sg_alloc_table` sets `nents` and `orig_nents`
/// alike, so one count is kept). Packed to 4-byte alignment, so that it
/// takes 12 bytes in the registration's state, not 16: that keeps the
/// registration in the 128-byte kmalloc class (see `registration`). Its
/// fields are only ever copied out, never borrowed.
///
/// # Invariants
///
/// `{ sgl, nents, orig_nents: nents }` is an `sg_table` that
/// `sg_alloc_table` set up with `nents` entries (1 to `c_int::MAX`, see
/// [`table_entries`]), each filled with a DMA address and length; it is
/// freed only by `Drop`.
#[repr(C, packed(4))]
pub(crate) struct SgTable {
    sgl: NonNull<bindings::scatterlist>,
    nents: u32,
}

// SAFETY: the table is plain memory owned by this value.
unsafe impl Send for SgTable {}

impl SgTable {
    /// Allocates and fills a table with the entries of `plan`.
    #[inline(always)]
    pub(crate) fn build(plan: SgPlan<'_>) -> Result<Self> {
        Self::alloc(plan.entries())?.fill(plan)
    }

    /// Allocates a table of `count` entries, to be filled by
    /// [`SgTable::fill`]: where the count is known before the DMA
    /// addresses are, the allocation (which may sleep in reclaim) need not
    /// happen while a free callback waits for the addresses to be read.
    #[inline(always)]
    pub(crate) fn alloc(count: usize) -> Result<Self> {
        let entries = table_entries(count)?;
        let mut table = bindings::sg_table::default();
        // SAFETY: FFI call on a zeroed table we own.
        sys::check(unsafe { bindings::sg_alloc_table(&mut table, entries, bindings::GFP_KERNEL) })?;
        let Some(sgl) = NonNull::new(table.sgl) else {
            // SAFETY: set up by `sg_alloc_table` just above, not freed.
            unsafe { bindings::sg_free_table(&mut table) };
            return Err(ENOMEM);
        };
        if table.nents != entries || table.orig_nents != entries {
            // SAFETY: set up by `sg_alloc_table` just above, not freed.
            unsafe { bindings::sg_free_table(&mut table) };
            return Err(EINVAL);
        }
        // INVARIANT: allocated with `entries` entries (both counts); the
        // owner fills them (`fill`) before the table is used.
        Ok(Self {
            sgl,
            nents: entries,
        })
    }

    /// Fills the table with the entries of `plan`, which must make as many
    /// as the table has (`EINVAL` otherwise; the table is freed). Only
    /// stores: no allocation, no sleep.
    #[inline(always)]
    pub(crate) fn fill(self, plan: SgPlan<'_>) -> Result<Self> {
        let this = self;
        let entries = this.entries();
        if plan.entries() != entries as usize {
            return Err(EINVAL);
        }
        if !plan.coalesce {
            // One entry per GPU page: filled by the shim in one call.
            let len = u32::try_from(plan.page_size).map_err(|_| EINVAL)?;
            // SAFETY: `sgl` is the table `sg_alloc_table` set up with
            // `entries` entries; `plan.addresses` has `entries` elements,
            // readable for the call.
            let filled = unsafe {
                sys::pm_shim_sg_fill_pages(
                    this.sgl().as_ptr(),
                    plan.addresses.as_ptr(),
                    entries,
                    len,
                )
            };
            if filled != entries {
                return Err(EINVAL);
            }
            return Ok(this);
        }
        let mut sg = this.sgl().as_ptr();
        for (address, len) in plan {
            if sg.is_null() {
                return Err(EINVAL);
            }
            // The plan never makes an entry longer than `MAX_ENTRY_BYTES`.
            let len = u32::try_from(len).map_err(|_| EINVAL)?;
            // SAFETY: `sg` is one of the table's `entries` entries (the plan
            // yields exactly `entries` items and `sg_next` walks them).
            unsafe {
                sys::pm_shim_sg_set_dma(sg, address, len);
                sg = bindings::sg_next(sg);
            }
        }
        Ok(this)
    }

    /// The first entry (a copy: the field may be unaligned).
    fn sgl(&self) -> NonNull<bindings::scatterlist> {
        self.sgl
    }

    /// The table to give the core (it shares our entries).
    pub(crate) fn raw(&self) -> bindings::sg_table {
        bindings::sg_table {
            sgl: self.sgl().as_ptr(),
            nents: self.entries(),
            orig_nents: self.entries(),
        }
    }

    /// Number of entries.
    pub(crate) fn entries(&self) -> u32 {
        self.nents
    }

    /// Whether `table` shares our entries.
    pub(crate) fn is(&self, table: &bindings::sg_table) -> bool {
        table.sgl == self.sgl().as_ptr()
    }
}

impl Drop for SgTable {
    fn drop(&mut self) {
        let mut table = self.raw();
        // SAFETY: the table `sg_alloc_table` set up, not freed (invariant).
        unsafe { bindings::sg_free_table(&mut table) };
    }
}
