// SPDX-License-Identifier: GPL-2.0

//! Page tables and DMA mappings of the NVIDIA P2P kernel API as owned Rust
//! values: pinning returns a [`PageTable`], mapping a [`DmaMapping`] kept in
//! a [`Pinned`]. Their owner releases them explicitly: [`Pinned::unmap`] and
//! [`Pinned::unpin`] while they live, [`Pinned::into_dead`] and
//! [`DeadPages::free`] once the provider's free callback killed them. Only
//! the owner knows which applies (the driver answers a put after the
//! callback with 0 too: docs/contract.md, what a put's 0 means), so dropping pages pinned with a free
//! callback calls nothing in the provider and leaves the callback's data to
//! it: a drop after the callback cannot touch dead objects nor free the data
//! twice. Persistent pins (no callback) are unmapped and unpinned when
//! dropped.
//!
//! C header: `nvidia/nv-p2p.h` (NVIDIA driver), or `ffi/include/nvidia/nv-p2p.h`.
mod dma;
mod page_table;
mod pinned;

pub(crate) use dma::PciDevice;
pub(crate) use page_table::PageTable;
pub(crate) use pinned::{DeadPages, Pinned};

use crate::foreign::Foreign;
use crate::sys;
use kernel::ffi::c_void;

/// What the provider's free callback does with the data it was given.
pub(crate) trait FreeCallback {
    /// The data handed to the provider with the pin. The provider owns it
    /// until it calls the callback, or until a put unpins the pages before
    /// any callback (a put's 0 alone does not say which: docs/contract.md);
    /// it is
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
    // SAFETY: as above; the provider hands its ownership back with this call,
    // and `borrowed` is gone.
    let data = unsafe { T::Data::from_foreign(data) };
    // Whichever reference is dropped here, the holder of the other one may
    // drop the last right after (release, while this callback is still in
    // its tail), and with it the registration's module reference: an rmmod
    // (or a failed load) may then unload the module while this function
    // still runs in its text. The loader frees the text only after an RCU
    // grace period, so the drop runs inside a read-side section, entered
    // before the decrement: the grace period cannot end before the
    // callback has left the section. What the section cannot cover is the
    // tail after its unlock (the unlock's own return and ours to the
    // driver): a preemption exactly there (preemptible RCU), or a tick
    // there followed by a long interrupt or a stalled virtual CPU, can
    // outlast a grace period and an unload.
    // NVIDIA's module has the same tail after its last `module_put`; only
    // a tail call into the kernel could close it. The drop does not sleep:
    // the callback has taken the pages out (see `on_free`).
    let _rcu = RcuReadSection::enter();
    match data.release_shared() {
        Some(last) => drop(last),
        None => crate::test_delay::at(crate::test_delay::Point::FreeCallbackTail),
    }
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
/// driver's 0 from a put does not say that alone (docs/contract.md): the
/// owner's
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
