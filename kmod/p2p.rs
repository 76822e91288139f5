// SPDX-License-Identifier: GPL-2.0

//! Page tables and DMA mappings of the NVIDIA P2P kernel API as owned Rust
//! values: pinning returns a [`PageTable`], mapping a [`DmaMapping`] kept in
//! a [`Pinned`]. Their owner releases them explicitly: [`Pinned::unmap`] and
//! [`Pinned::unpin`] while they live, [`Pinned::into_dead`] and
//! [`DeadPages::free`] once the provider's free callback killed them. Only
//! the owner knows which applies (the driver answers a put after the
//! callback with 0 too, CONTRACT 2), so dropping pages pinned with a free
//! callback calls nothing in the provider and leaves the callback's data to
//! it: a drop after the callback cannot touch dead objects nor free the data
//! twice. Persistent pins (no callback) are unmapped and unpinned when
//! dropped.
//!
//! C header: `nvidia/nv-p2p.h` (NVIDIA driver), or `ffi/include/nvidia/nv-p2p.h`.

use crate::foreign::Foreign;
use crate::range::GpuRange;
use crate::stats::{self, ErrorKind, Failure, STATS};
use crate::sys;
use crate::sys::check;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{bindings, ffi::c_void, prelude::*};

/// What the provider's free callback does with the data it was given.
pub(crate) trait FreeCallback {
    /// The data handed to the provider with the pin. The provider owns it
    /// until it calls the callback, or until a put unpins the pages before
    /// any callback (a put's 0 alone does not say which: CONTRACT 2); it is
    /// dropped on whichever thread gets it back.
    type Data: Foreign + Send;

    /// Called by the provider when the application frees the memory
    /// (cudaFree, process exit), with the provider's lock held. After this
    /// returns, the page table and its mappings are dead.
    fn on_free(data: <Self::Data as Foreign>::Borrowed<'_>);
}

/// The `free_callback` given to `nvidia_p2p_get_pages`.
///
/// # Safety
///
/// Called by the provider only, once at most, with the `data` that
/// [`PageTable::<T>::pin_invalidating`] passed while the provider owns it:
/// never after a put that unpinned the pages (a put that returns 0 after
/// the callback ran unpinned nothing, and took nothing back).
unsafe extern "C" fn free_callback<T: FreeCallback>(data: *mut c_void) {
    // SAFETY: `data` came from `T::Data::into_foreign` and, by the function's
    // safety requirements, the provider still owns it: nothing reclaimed it.
    let borrowed = unsafe { T::Data::borrow(data) };
    T::on_free(borrowed);
    // This reference may be the last one, and with it goes the module
    // reference of the registration: an rmmod (or a failed load) may then
    // unload the module while this function still returns through its
    // text. The loader frees the text only after an RCU grace period, so
    // the drop runs inside a read-side section: what is left afterwards is
    // the return itself, which only a preemption at exactly that point
    // could hold up for a grace period. The drop does not sleep: the
    // callback has taken the pages out (see `on_free`).
    let _rcu = RcuReadSection::enter();
    // SAFETY: as above; the provider hands its ownership back with this call,
    // and `borrowed` is gone.
    drop(unsafe { T::Data::from_foreign(data) });
}

/// An RCU read-side critical section, left when dropped. Nothing in it may
/// sleep.
struct RcuReadSection(());

impl RcuReadSection {
    fn enter() -> Self {
        // SAFETY: FFI call without preconditions; paired with the unlock in
        // `drop`, on this thread.
        unsafe { sys::pm_shim_rcu_read_lock() };
        Self(())
    }
}

impl Drop for RcuReadSection {
    fn drop(&mut self) {
        // SAFETY: the section entered by `enter`, on this thread.
        unsafe { sys::pm_shim_rcu_read_unlock() };
    }
}

/// Takes back the data the provider was given with a pin.
///
/// # Safety
///
/// `data` must come from `T::Data::into_foreign`, and the provider must have
/// given it up without calling the callback, and never call it: the pin
/// failed, or a put unpinned the pages before any free callback. The
/// driver's 0 from a put does not say that alone (CONTRACT 2): the owner's
/// state must.
unsafe fn reclaim_callback_data<T: FreeCallback>(data: *mut c_void) {
    // SAFETY: guaranteed by the function's safety requirements.
    drop(unsafe { T::Data::from_foreign(data) });
}

/// Whether a version word is compatible with ours (same major, minor not
/// older).
pub(crate) const fn version_compatible(theirs: u32, ours: u32) -> bool {
    theirs >> 16 == ours >> 16 && (theirs & 0xffff) >= (ours & 0xffff)
}

/// The oldest page table version this module reads (drivers up to 575.x).
pub(crate) const PAGE_TABLE_OLDEST: u32 = 0x0001_0002;
/// The newest page table version this module knows (580.65.06 and later).
pub(crate) const PAGE_TABLE_NEWEST: u32 = 0x0002_0000;
/// Where a version-2 page table keeps its flags word: right after
/// `gpu_uuid`, at the end of the version-1 layout (pinned in `abi`).
pub(crate) const PAGE_TABLE_FLAGS_OFFSET: usize = 32;
/// `NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE`.
pub(crate) const PAGE_TABLE_FLAGS_CPU_CACHEABLE: u32 = 0x1;

/// The layouts of `nvidia_p2p_page_table` this module reads, by the version
/// the driver stamps on each page table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PageTableLayout {
    /// 0x0001xxxx from 0x00010002 (drivers up to 575.x): 32 bytes, ending
    /// with `gpu_uuid`. A later minor of the same major only adds meaning.
    V1,
    /// 0x0002xxxx (580.65.06 and later): 40 bytes, a trailing `flags` word.
    V2,
}

impl PageTableLayout {
    /// The layout of a page table of `version`; `None` if this module cannot
    /// read it (older than 0x00010002, or a major it does not know).
    pub(crate) const fn of(version: u32) -> Option<Self> {
        match version >> 16 {
            1 if version >= PAGE_TABLE_OLDEST => Some(Self::V1),
            2 => Some(Self::V2),
            _ => None,
        }
    }
}

/// How the loaded NVIDIA driver pins persistently.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PersistentApi {
    /// `nvidia_p2p_get_pages_persistent`/`put_pages_persistent` (535 on).
    Dedicated,
    /// `nvidia_p2p_get_pages` with no free callback and
    /// `nvidia_p2p_put_pages` (515, 525: the persistent calls do not exist).
    GetPagesWithoutCallback,
}

impl PersistentApi {
    /// What the loaded driver offers. Stable while this module is loaded:
    /// a resolved symbol pins the driver's module.
    pub(crate) fn of_driver() -> Self {
        // SAFETY: FFI call without arguments.
        if unsafe { sys::pm_shim_p2p_has_persistent_api() } {
            Self::Dedicated
        } else {
            Self::GetPagesWithoutCallback
        }
    }
}

/// A process as the driver tells its pins apart: its thread group
/// (`current->tgid`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Process(i32);

impl Process {
    /// The calling process.
    #[inline(always)]
    pub(crate) fn current() -> Self {
        // SAFETY: FFI call without arguments, from process context.
        Self(unsafe { sys::pm_shim_current_tgid() })
    }
}

impl Process {
    /// Its thread group id, for the log.
    pub(crate) fn id(self) -> i32 {
        self.0
    }
}

/// Human name of a `nvidia_p2p_page_size_type`.
pub(crate) const fn page_size_name(page_size: u32) -> &'static str {
    match page_size {
        sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_4KB => "4 KiB",
        sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB => "64 KiB",
        sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_128KB => "128 KiB",
        _ => "unknown",
    }
}

/// A range of GPU memory pinned through the P2P API, by a user whose free
/// callback is `T`'s.
///
/// The driver keeps the pins of `nvidia_p2p_get_pages` per process: its
/// `nvidia_p2p_put_pages` looks the pin up among the calling process's pins
/// only, and from any other process finds nothing and returns 0 without
/// unpinning, the free callback still armed. So a pin made through that
/// call (with a free callback, or the persistent pin of drivers before 535)
/// is unpinned only from its `owner`, the process that pinned it
/// ([`PageTable::unpins_here`]); the persistent calls of 535 and later go by
/// the page table alone.
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
    ptr: NonNull<sys::nvidia_p2p_page_table>,
    range: GpuRange,
    owner: Process,
    callback: Option<NonNull<c_void>>,
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
    /// always for the persistent calls (by page table), only in the owner
    /// for `nvidia_p2p_get_pages` pins (by process: see the type's doc).
    #[inline(always)]
    pub(crate) fn unpins_here(&self) -> bool {
        let by_process = self.callback.is_some()
            || PersistentApi::of_driver() == PersistentApi::GetPagesWithoutCallback;
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
    /// commits an MR to us (issue 31).
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
        // INVARIANT: the data came from `T::Data::into_foreign` and the
        // provider calls the callback no more: the put, made by the pin's
        // own process, returned 0, so either it unpinned, or the callback
        // had run; `ptr` is the page table put.
        Ok(Unpinned {
            callback: this.callback.map(|data| (this.ptr, data)),
            _callback: PhantomData,
        })
    }

    #[inline(always)]
    fn uncount(&self) {
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

/// The DMA device the core maps for (the HCA), as a PCI device.
///
/// # Invariants
///
/// `0` is a valid `struct pci_dev` that the core keeps alive while the
/// registration it is used for is mapped.
#[derive(Clone, Copy)]
pub(crate) struct PciDevice(NonNull<bindings::pci_dev>);

// SAFETY: a `pci_dev` may be used from any thread.
unsafe impl Send for PciDevice {}

impl PciDevice {
    /// The PCI device of the core's `dma_device`; `None` for a non-PCI one.
    ///
    /// # Safety
    ///
    /// `dev` must be null or a valid device that stays alive while the
    /// registration it is used for is mapped.
    pub(crate) unsafe fn from_dma_device(dev: *mut bindings::device) -> Option<Self> {
        // SAFETY: FFI call; `dev` is null or valid (function's requirements).
        let pci = unsafe { sys::pm_shim_to_pci_dev(dev) };
        // INVARIANT: the shim returns the `pci_dev` containing `dev`, which
        // lives as long as `dev`.
        NonNull::new(pci).map(Self)
    }
}

/// A DMA mapping of a page table for a PCI device. It has no `Drop`: the
/// [`Pinned`] that owns it unmaps it, with its page table.
///
/// # Invariants
///
/// `ptr` is the mapping that `nvidia_p2p_dma_map_pages(peer, page_table)`
/// returned for the page table of the [`Pinned`] that owns this mapping,
/// neither unmapped nor freed.
struct DmaMapping {
    ptr: NonNull<sys::nvidia_p2p_dma_mapping>,
    peer: PciDevice,
}

// SAFETY: the mapping is a provider object usable from any thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    fn raw(&self) -> &sys::nvidia_p2p_dma_mapping {
        // SAFETY: by the type invariant the mapping is alive.
        unsafe { self.ptr.as_ref() }
    }

    /// Unmaps; `page_table` is the one mapped (the owner's).
    #[inline(always)]
    fn unmap(
        self,
        page_table: NonNull<sys::nvidia_p2p_page_table>,
    ) -> core::result::Result<(), (Self, Error)> {
        // SAFETY: FFI call with the objects the mapping was made from, all
        // alive by the type invariant.
        let rc = unsafe {
            sys::nvidia_p2p_dma_unmap_pages(
                self.peer.0.as_ptr(),
                page_table.as_ptr(),
                self.ptr.as_ptr(),
            )
        };
        match check(rc) {
            Ok(()) => {
                STATS.mappings.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

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

    /// Whether the pages were pinned with a free callback.
    pub(crate) fn has_free_callback(&self) -> bool {
        self.page_table.callback.is_some()
    }

    /// Leaves pages pinned without a free callback, and not mapped, to the
    /// driver: for a pin another process made through `nvidia_p2p_get_pages`
    /// (the persistent pin of drivers before 535), which the driver unpins
    /// only for that process, when it exits. Nothing of ours stays with the
    /// driver (no callback data), so the handle simply goes, uncounted.
    /// Pages with a free callback, or mapped, are handed back.
    pub(crate) fn leave_to_driver(self) -> core::result::Result<(), Self> {
        if self.has_free_callback() || self.is_mapped() {
            return Err(self);
        }
        let (_, page_table) = self.into_parts();
        page_table.uncount();
        core::mem::forget(page_table);
        Ok(())
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
/// those calls (issue 35). Dropped without [`DeadPages::free`], their memory
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

impl DmaMapping {
    fn dma_addresses(&self) -> &[u64] {
        let m = self.raw();
        // SAFETY: checked by `Pinned::dma_addresses`: `dma_addresses` is non-null with
        // `entries` elements, alive as long as the mapping.
        unsafe { core::slice::from_raw_parts(m.dma_addresses, m.entries as usize) }
    }
}
