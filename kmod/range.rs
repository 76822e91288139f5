// SPDX-License-Identifier: GPL-2.0

//! User virtual address ranges aligned outward to GPU pages (64 KiB), the
//! unit of the NVIDIA P2P API.

use kernel::prelude::*;

/// log2 of the GPU page size of the P2P API.
pub(crate) const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size of the P2P API (64 KiB).
pub(crate) const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = GPU_PAGE_SIZE - 1;

/// A non-empty range `[start, start + len)` of GPU pages.
///
/// # Invariants
///
/// `start` and `len` are multiples of [`GPU_PAGE_SIZE`], `len > 0`,
/// `start + len` does not overflow and `len / GPU_PAGE_SIZE` fits in `u32`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct GpuRange {
    start: u64,
    len: u64,
}

impl GpuRange {
    /// Aligns the user range `[addr, addr + size)` outward to GPU pages.
    ///
    /// Fails with `EINVAL` for an empty range and `ERANGE` when the range
    /// or its aligned end does not fit the address space, or has more pages
    /// than a page table can describe.
    pub(crate) fn new(addr: u64, size: u64) -> Result<Self> {
        if size == 0 {
            return Err(EINVAL);
        }
        let end = addr.checked_add(size).ok_or(ERANGE)?;
        let start = addr & !GPU_PAGE_MASK;
        let end = end.checked_add(GPU_PAGE_MASK).ok_or(ERANGE)? & !GPU_PAGE_MASK;
        let len = end - start;
        if len >> GPU_PAGE_SHIFT > u64::from(u32::MAX) {
            return Err(ERANGE);
        }
        // INVARIANT: both ends are aligned, `end > start` since `size > 0`,
        // `end` did not overflow, and the page count was checked.
        Ok(Self { start, len })
    }

    /// First byte of the first GPU page.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte of the last GPU page.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Length in bytes (a multiple of 64 KiB).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Number of GPU pages.
    pub(crate) fn pages(&self) -> u32 {
        // The type invariant guarantees the page count fits.
        (self.len >> GPU_PAGE_SHIFT) as u32
    }
}
