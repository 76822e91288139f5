// SPDX-License-Identifier: GPL-2.0

//! User virtual address ranges aligned outward to GPU pages (64 KiB), the
//! unit of the NVIDIA P2P API.

use kernel::prelude::*;

/// log2 of the GPU page size of the P2P API.
pub(crate) const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size of the P2P API (64 KiB).
pub(crate) const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = GPU_PAGE_SIZE - 1;

/// A non-empty range of `pages` GPU pages from `start`.
///
/// Kept as the page count, packed to 4-byte alignment: 12 bytes, not 16,
/// in each registration and each page table handle, which keeps a
/// registration in the 128-byte kmalloc class (see `registration`). Its
/// fields are only ever copied out, never borrowed.
///
/// # Invariants
///
/// `start` is a multiple of [`GPU_PAGE_SIZE`], `pages > 0`, and
/// `start + pages * GPU_PAGE_SIZE` does not overflow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C, packed(4))]
pub(crate) struct GpuRange {
    start: u64,
    pages: u32,
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
        let pages = u32::try_from((end - start) >> GPU_PAGE_SHIFT).map_err(|_| ERANGE)?;
        // INVARIANT: both ends are aligned, `end > start` since `size > 0`
        // (so at least one page), and `end` did not overflow.
        Ok(Self { start, pages })
    }

    /// First byte of the first GPU page.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte of the last GPU page.
    pub(crate) fn end(&self) -> u64 {
        self.start() + self.len()
    }

    /// Length in bytes (a multiple of 64 KiB).
    pub(crate) fn len(&self) -> u64 {
        u64::from(self.pages()) << GPU_PAGE_SHIFT
    }

    /// Number of GPU pages.
    pub(crate) fn pages(&self) -> u32 {
        self.pages
    }
}
