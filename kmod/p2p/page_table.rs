// SPDX-License-Identifier: GPL-2.0

//! A range of GPU memory pinned through the P2P API ([`PageTable`]) and
//! what a put of it leaves ([`Unpinned`]).

use super::{
    free_callback, page_size_name, reclaim_callback_data, FreeCallback, PageTableLayout, Process,
};
use super::{
    PAGE_TABLE_FLAGS_CPU_CACHEABLE, PAGE_TABLE_FLAGS_OFFSET, PAGE_TABLE_NEWEST, PAGE_TABLE_OLDEST,
};
use crate::foreign::Foreign;
use crate::range::GpuRange;
use crate::stats::{self, ErrorKind, Failure, STATS};
use crate::sys;
use crate::sys::check;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{ffi::c_void, prelude::*};

/// A range of GPU memory pinned through the P2P API, by a user whose free
/// callback is `T`'s.
///
/// The driver keeps the pins of `nvidia_p2p_get_pages` with a free
/// callback per process: its `nvidia_p2p_put_pages` looks such a pin up
/// among the calling process's pins only, and from any other process finds
/// nothing and returns 0 without unpinning, the free callback still armed.
/// So a pin with a free callback is unpinned only from its `owner`, the
/// process that pinned it ([`PageTable::unpins_here`]). A persistent pin
/// goes by the driver's own object, from any process: the persistent calls
/// of 535 and later, and on 515-530 `nvidia_p2p_get_pages` without a
/// callback too, which the driver marks persistent, pins as a duplicate of
/// the memory in its internal client and puts with
/// `rm_p2p_put_pages_persistent` (no process lookup; the owner's exit does
/// not end it).
///
/// # Invariants
///
/// `ptr` is the page table that `nvidia_p2p_get_pages` (with
/// `free_callback::<T>` and the data `callback`, which came from
/// `T::Data::into_foreign` and which the provider owns) or
/// `nvidia_p2p_get_pages_persistent` (with `callback` `None`) returned for
/// `range` to the process `owner`, and it has been neither put nor freed.
/// Its pages are counted in the statistics.
pub(crate) struct PageTable<T: FreeCallback> {
    pub(super) ptr: NonNull<sys::nvidia_p2p_page_table>,
    range: GpuRange,
    owner: Process,
    pub(super) callback: Option<NonNull<c_void>>,
    _callback: PhantomData<fn(T)>,
}

// SAFETY: the page table is a provider object usable from any thread; the
// callback data is never dereferenced here, only dropped once given back,
// and it is `Send` (`FreeCallback::Data`).
unsafe impl<T: FreeCallback> Send for PageTable<T> {}

impl<T: FreeCallback> PageTable<T> {
    /// Pins `range` with a free callback carrying `data`.
    #[inline(always)]
    pub(crate) fn pin_invalidating(
        range: GpuRange,
        data: T::Data,
    ) -> core::result::Result<Self, Error> {
        let data = data.into_foreign();
        let Some(callback) = NonNull::new(data) else {
            // SAFETY: `data` came from `into_foreign` and nobody else has it.
            unsafe { reclaim_callback_data::<T>(data) };
            return Err(EINVAL);
        };
        let mut ptr = core::ptr::null_mut();
        // SAFETY: FFI call; `ptr` is a valid out-pointer, `free_callback::<T>`
        // matches the callback type and is given the data it expects.
        let rc = unsafe {
            sys::nvidia_p2p_get_pages(
                0,
                0,
                range.start(),
                range.len(),
                &mut ptr,
                Some(free_callback::<T>),
                data,
            )
        };
        if let Err(e) = check(rc) {
            // SAFETY: the pin failed: the driver armed no callback and kept
            // nothing of the data.
            unsafe { reclaim_callback_data::<T>(data) };
            return Err(e);
        }
        let Some(ptr) = NonNull::new(ptr) else {
            // The driver says it pinned, with the callback and its data, but
            // gives no page table to put: the callback may still run with
            // the data, so the data stays the driver's (a leak if it never
            // runs, never a use after free).
            pr_err!(
                "nvidia_p2p_get_pages returned 0 but no page table for [{:#x}, {:#x}): refused; its free callback data is left to the driver\n",
                range.start(),
                range.end()
            );
            return Err(EINVAL);
        };
        Ok(Self::new(ptr, range, Some(callback)))
    }

    /// Pins `range` for good: no free callback, the memory stays until put.
    /// The shim picks the driver's persistent call, or `get_pages` with no
    /// callback before 535 (see [`PersistentApi`]).
    #[inline(always)]
    pub(crate) fn pin_persistent(range: GpuRange) -> core::result::Result<Self, Error> {
        let mut ptr = core::ptr::null_mut();
        // SAFETY: FFI call; `ptr` is a valid out-pointer.
        let rc = unsafe { sys::pm_shim_p2p_pin_persistent(range.start(), range.len(), &mut ptr) };
        check(rc)?;
        let ptr = NonNull::new(ptr).ok_or(EINVAL)?;
        Ok(Self::new(ptr, range, None))
    }

    fn new(
        ptr: NonNull<sys::nvidia_p2p_page_table>,
        range: GpuRange,
        callback: Option<NonNull<c_void>>,
    ) -> Self {
        STATS.pinned_bytes.fetch_add(range.len(), Ordering::Relaxed);
        // INVARIANT: the caller pinned `range` and got `ptr`, in this
        // process; counted above.
        Self {
            ptr,
            range,
            owner: Process::current(),
            callback,
            _callback: PhantomData,
        }
    }

    /// The process that pinned.
    pub(crate) fn owner(&self) -> Process {
        self.owner
    }

    /// Whether the driver's put finds this pin from the calling process:
    /// always for a persistent pin (by the driver's object, on every driver
    /// generation), only in the owner for a pin with a free callback (by
    /// process: see the type's doc).
    #[inline(always)]
    pub(crate) fn unpins_here(&self) -> bool {
        let by_process = self.callback.is_some();
        !by_process || self.owner == Process::current()
    }

    fn raw(&self) -> &sys::nvidia_p2p_page_table {
        // SAFETY: by the type invariant the page table is alive, and the
        // provider does not change it while pinned.
        unsafe { self.ptr.as_ref() }
    }

    /// The pinned range.
    pub(crate) fn range(&self) -> GpuRange {
        self.range
    }

    /// The page table's flags: only a version-2 page table has the word
    /// (an older driver allocates the 32 bytes of version 1).
    fn flags(&self, layout: PageTableLayout) -> u32 {
        match layout {
            PageTableLayout::V1 => 0,
            // SAFETY: a page table stamped with major version 2 is at least
            // 40 bytes, 8-byte aligned, with the flags word at
            // `PAGE_TABLE_FLAGS_OFFSET`; it is alive (type invariant).
            PageTableLayout::V2 => unsafe {
                self.ptr
                    .as_ptr()
                    .cast::<u8>()
                    .add(PAGE_TABLE_FLAGS_OFFSET)
                    .cast::<u32>()
                    .read()
            },
        }
    }

    /// The layout of this page table, by the version the driver stamped on
    /// it. A version this module cannot read is refused with one line, said
    /// once per version and load (the same driver stamps every page table
    /// alike; each refusal is counted by the caller's [`Failure`]).
    /// acquire asks first, so such memory is "not ours" before the core
    /// commits an MR to us.
    #[inline(always)]
    pub(crate) fn layout(&self) -> core::result::Result<PageTableLayout, Failure> {
        /// The last version refused with a line (above `u32::MAX`: none).
        static REFUSED: AtomicU64 = AtomicU64::new(u64::MAX);
        let version = self.raw().version;
        if let Some(layout) = PageTableLayout::of(version) {
            return Ok(layout);
        }
        if REFUSED.swap(u64::from(version), Ordering::Relaxed) != u64::from(version) {
            pr_err!(
                "the driver's page table version {:#010x} is not supported (this module reads {:#010x} to {:#010x}, the newest it knows): its GPU memory is not taken; update nvidia-peermem-rs for this driver (said once; debugfs stats error_page_table_version counts the refusals)\n",
                version,
                PAGE_TABLE_OLDEST,
                PAGE_TABLE_NEWEST
            );
        }
        Err(Failure::new(ErrorKind::PageTableVersion, EINVAL))
    }

    /// Checks that the provider gave what we can use: a compatible version,
    /// 64 KiB pages and one entry per GPU page of the range.
    #[inline(always)]
    pub(crate) fn validate(&self) -> core::result::Result<(), Failure> {
        let layout = self.layout()?;
        let pt = self.raw();
        STATS
            .page_table_version
            .store(pt.version, Ordering::Relaxed);
        if self.flags(layout) & PAGE_TABLE_FLAGS_CPU_CACHEABLE != 0 {
            // Coherent platforms (GPU memory the CPU may cache): the peer's
            // DMA goes through the mapping the driver makes, which the
            // platform keeps coherent; nothing to do but count it.
            stats::inc(&STATS.cpu_cacheable_page_tables);
        }
        if pt.page_size != sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
            pr_err!(
                "refusing [{:#x}, {:#x}): GPU page size is {} (type {}), only 64 KiB pages are supported\n",
                self.range.start(),
                self.range.end(),
                page_size_name(pt.page_size),
                pt.page_size
            );
            return Err(Failure::new(ErrorKind::PageSize, EINVAL));
        }
        if pt.entries != self.range.pages() || pt.pages.is_null() {
            pr_err!(
                "refusing [{:#x}, {:#x}): page table has {} entries for {} GPU pages\n",
                self.range.start(),
                self.range.end(),
                pt.entries,
                self.range.pages()
            );
            return Err(Failure::new(ErrorKind::PageTableVersion, EINVAL));
        }
        Ok(())
    }

    /// Unpins. On failure the page table is handed back, still pinned; from
    /// a process whose put the driver would answer with 0 without unpinning
    /// (see [`PageTable::unpins_here`]) that is `ESRCH`, and the driver is
    /// not called. On success the callback data comes back as [`Unpinned`],
    /// for the caller to say whether the free callback ran (see there).
    #[inline(always)]
    pub(crate) fn unpin(self) -> core::result::Result<Unpinned<T>, (Self, Error)> {
        if !self.unpins_here() {
            return Err((self, ESRCH));
        }
        let rc = match self.callback {
            // SAFETY: FFI call with the page table and address we pinned.
            Some(_) => unsafe {
                sys::nvidia_p2p_put_pages(0, 0, self.range.start(), self.ptr.as_ptr())
            },
            // SAFETY: FFI call with the page table and address we pinned
            // persistently (the shim unpins the way it pinned).
            None => unsafe {
                sys::pm_shim_p2p_unpin_persistent(self.range.start(), self.ptr.as_ptr())
            },
        };
        if let Err(e) = check(rc) {
            return Err((self, e));
        }
        let this = ManuallyDrop::new(self);
        this.uncount();
        // INVARIANT: the data, if any, came from `T::Data::into_foreign`
        // and the provider calls the callback no more: the put of a pin with
        // a callback, made by the pin's own process (checked above),
        // returned 0, so either it unpinned, or the callback had run; `ptr`
        // is the page table put.
        Ok(Unpinned {
            callback: this.callback.map(|data| (this.ptr, data)),
            _callback: PhantomData,
        })
    }

    #[inline(always)]
    pub(super) fn uncount(&self) {
        STATS
            .pinned_bytes
            .fetch_sub(self.range.len(), Ordering::Relaxed);
    }
}

impl<T: FreeCallback> Drop for PageTable<T> {
    // Out of line, as `Pinned::drop`.
    #[inline(never)]
    fn drop(&mut self) {
        if self.callback.is_some() {
            // Whether the free callback ran only the owner's state says: a
            // put now could use a page table the driver freed, or take back
            // data the callback dropped. Nothing is called; the pages and the
            // data are left to the driver and its callback (no path of ours
            // drops a page table with a callback: they are unpinned or freed
            // dead explicitly).
            self.uncount();
            pr_err!(
                "[{:#x}, {:#x}) dropped while pinned with a free callback: left to the driver\n",
                self.range.start(),
                self.range.end()
            );
            return;
        }
        // No free callback (persistent): nothing can have killed it. Unpin
        // through a copy of the handle; on failure the pages stay pinned (and
        // counted).
        let this = PageTable::<T> {
            ptr: self.ptr,
            range: self.range,
            owner: self.owner,
            callback: None,
            _callback: PhantomData,
        };
        if let Err((leaked, e)) = this.unpin() {
            STATS.error(ErrorKind::PutPages);
            pr_err!(
                "unpinning [{:#x}, {:#x}) failed ({:?}): left pinned\n",
                leaked.range.start(),
                leaked.range.end(),
                e
            );
            core::mem::forget(leaked);
        }
    }
}

/// What is left of a page table with a free callback that the driver
/// answered a put of with 0, the put made by the process that pinned: the
/// page table and the callback data.
///
/// NVIDIA's driver (515.43.04 and later) answers `nvidia_p2p_put_pages`
/// with 0 also when it finds no such pin among the calling process's: the
/// free callback got there first (it unlinked the page table and ran,
/// consuming its data; the page table is dead, to be freed with
/// `nvidia_p2p_free_page_table`), or the caller is another process (then
/// nothing was unpinned and the callback is still armed: [`PageTable::unpin`]
/// never puts from there). From the owning process only the registration's
/// state tells the first case from an unpin, so it says:
/// [`Unpinned::callback_never_ran`] takes the data back;
/// [`Unpinned::callback_ran`] frees the dead page table and leaves the data
/// to the callback. Dropping this calls nothing and takes nothing back (at
/// worst a leak, never a second drop).
///
/// # Invariants
///
/// `callback`, if any, is the page table that was put, and the data that
/// came with it from `T::Data::into_foreign`; the provider no longer calls
/// the callback with it.
#[must_use]
pub(crate) struct Unpinned<T: FreeCallback> {
    callback: Option<(NonNull<sys::nvidia_p2p_page_table>, NonNull<c_void>)>,
    _callback: PhantomData<fn(T)>,
}

impl<T: FreeCallback> Unpinned<T> {
    /// The free callback ran for this page table before it was put: the put
    /// found it unlinked, so the page table is dead (freed here, as after
    /// any callback) and the data is the callback's, which dropped it.
    ///
    /// # Safety
    ///
    /// The provider called the free callback of this page table.
    pub(crate) unsafe fn callback_ran(self) {
        if let Some((page_table, _)) = self.callback {
            // SAFETY: FFI call; the free callback for this page table has
            // run (function's safety requirements).
            let rc = unsafe { sys::nvidia_p2p_free_page_table(page_table.as_ptr()) };
            if let Err(e) = check(rc) {
                STATS.error(ErrorKind::Free);
                pr_err!("nvidia_p2p_free_page_table failed ({:?})\n", e);
            }
        }
    }

    /// The put unpinned the pages before any free callback: the provider
    /// gives the data back.
    ///
    /// # Safety
    ///
    /// The provider did not call the free callback of this page table
    /// before the put (the owner's state shows no invalidation started by
    /// then; the callback starts with one).
    pub(crate) unsafe fn callback_never_ran(self) {
        if let Some((_, data)) = self.callback {
            // SAFETY: the data came from `T::Data::into_foreign` (type
            // invariant) and the callback never ran and no longer can
            // (function's safety requirements).
            unsafe { reclaim_callback_data::<T>(data.as_ptr()) };
        }
    }
}
