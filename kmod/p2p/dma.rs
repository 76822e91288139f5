// SPDX-License-Identifier: GPL-2.0

//! DMA mappings of pinned GPU memory for the HCA's PCI device.

use crate::stats::STATS;
use crate::sys;
use crate::sys::check;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use kernel::{bindings, prelude::*};

/// The DMA device the core maps for (the HCA), as a PCI device.
///
/// # Invariants
///
/// `0` is a valid `struct pci_dev` that the core keeps alive while the
/// registration it is used for is mapped.
#[derive(Clone, Copy)]
pub(crate) struct PciDevice(pub(super) NonNull<bindings::pci_dev>);

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
pub(super) struct DmaMapping {
    pub(super) ptr: NonNull<sys::nvidia_p2p_dma_mapping>,
    pub(super) peer: PciDevice,
}

// SAFETY: the mapping is a provider object usable from any thread.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    pub(super) fn raw(&self) -> &sys::nvidia_p2p_dma_mapping {
        // SAFETY: by the type invariant the mapping is alive.
        unsafe { self.ptr.as_ref() }
    }

    /// Unmaps; `page_table` is the one mapped (the owner's).
    #[inline(always)]
    pub(super) fn unmap(
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

impl DmaMapping {
    pub(super) fn dma_addresses(&self) -> &[u64] {
        let m = self.raw();
        // SAFETY: checked by `Pinned::dma_addresses`: `dma_addresses` is non-null with
        // `entries` elements, alive as long as the mapping.
        unsafe { core::slice::from_raw_parts(m.dma_addresses, m.entries as usize) }
    }
}
