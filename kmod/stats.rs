// SPDX-License-Identifier: GPL-2.0

//! Counters of the module, shown in debugfs: pins, invalidations and errors
//! by kind. Plain atomics, so any context may update them.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What went wrong, for the per-kind error counters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ErrorKind {
    /// A range that is empty, wraps or is too large.
    Range,
    /// The module is going away: no new registration.
    ModuleGoing,
    /// Out of memory.
    NoMemory,
    /// The core's call sequence was violated (e.g. dma_map before get_pages).
    Sequence,
    /// `nvidia_p2p_get_pages[_persistent]` failed after acquire said "mine".
    GetPages,
    /// The persistent API is not supported (MIG, vGPU).
    PersistentUnsupported,
    /// A page table with a page size other than 64 KiB.
    PageSize,
    /// A page table of an incompatible version or inconsistent content.
    PageTableVersion,
    /// `nvidia_p2p_dma_map_pages` failed.
    DmaMap,
    /// A DMA mapping of an incompatible version or inconsistent content.
    DmaMappingVersion,
    /// The DMA device is not a PCI device.
    NotPci,
    /// Building the SG table failed.
    SgTable,
    /// `nvidia_p2p_dma_unmap_pages` failed.
    DmaUnmap,
    /// `nvidia_p2p_put_pages[_persistent]` failed.
    PutPages,
    /// `nvidia_p2p_free_page_table`/`free_dma_mapping` failed.
    Free,
    /// The core's invalidate function failed.
    Invalidate,
    /// The memory was freed (free callback) while it was being registered.
    FreedWhileRegistering,
}

impl ErrorKind {
    /// Every kind, in display order.
    pub(crate) const ALL: [ErrorKind; 17] = [
        ErrorKind::Range,
        ErrorKind::ModuleGoing,
        ErrorKind::NoMemory,
        ErrorKind::Sequence,
        ErrorKind::GetPages,
        ErrorKind::PersistentUnsupported,
        ErrorKind::PageSize,
        ErrorKind::PageTableVersion,
        ErrorKind::DmaMap,
        ErrorKind::DmaMappingVersion,
        ErrorKind::NotPci,
        ErrorKind::SgTable,
        ErrorKind::DmaUnmap,
        ErrorKind::PutPages,
        ErrorKind::Free,
        ErrorKind::Invalidate,
        ErrorKind::FreedWhileRegistering,
    ];

    /// The name shown in debugfs.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ErrorKind::Range => "range",
            ErrorKind::ModuleGoing => "module_going",
            ErrorKind::NoMemory => "no_memory",
            ErrorKind::Sequence => "sequence",
            ErrorKind::GetPages => "get_pages",
            ErrorKind::PersistentUnsupported => "persistent_unsupported",
            ErrorKind::PageSize => "page_size",
            ErrorKind::PageTableVersion => "page_table_version",
            ErrorKind::DmaMap => "dma_map",
            ErrorKind::DmaMappingVersion => "dma_mapping_version",
            ErrorKind::NotPci => "not_pci",
            ErrorKind::SgTable => "sg_table",
            ErrorKind::DmaUnmap => "dma_unmap",
            ErrorKind::PutPages => "put_pages",
            ErrorKind::Free => "free",
            ErrorKind::Invalidate => "invalidate",
            ErrorKind::FreedWhileRegistering => "freed_while_registering",
        }
    }
}

/// The counters.
pub(crate) struct Stats {
    /// Successful acquires ("mine").
    pub(crate) acquired: AtomicU64,
    /// Acquires answered "not mine".
    pub(crate) declined: AtomicU64,
    /// Registrations released by the core.
    pub(crate) released: AtomicU64,
    /// Bytes of GPU memory pinned through the P2P API right now (debugfs
    /// says the pages too: 64 KiB each). Bytes, not pages: a range's length
    /// is what a pin and an unpin have at hand.
    pub(crate) pinned_bytes: AtomicU64,
    /// DMA mappings alive right now.
    pub(crate) mappings: AtomicU64,
    /// Free callbacks received (invalidations).
    pub(crate) invalidations: AtomicU64,
    /// Free callbacks that did not call the core's invalidate function (no
    /// ticket, released, or the pages held by a thread): debugfs shows the
    /// calls into the core, `invalidations` less these, so that the common
    /// callback counts once.
    pub(crate) invalidations_without_core: AtomicU64,
    /// dma_unmap/put_pages calls made no-ops by an invalidation.
    pub(crate) skipped_after_invalidation: AtomicU64,
    /// dma_unmap calls that lost the race with a free callback (graceful).
    pub(crate) dma_unmap_after_free: AtomicU64,
    /// Free callbacks that waited for a dma_unmap in flight to return.
    pub(crate) free_waited_for_unmap: AtomicU64,
    /// Free callbacks that waited for a dma_map reading what the provider
    /// had just returned.
    pub(crate) free_waited_for_registration: AtomicU64,
    /// Times a waiting free callback looked at its registration again and
    /// still found the reader it waits for (a wait that sleeps until the
    /// reader wakes it finds it gone).
    pub(crate) free_wait_rechecks: AtomicU64,
    /// Page tables the driver marked CPU-cacheable (coherent platforms).
    pub(crate) cpu_cacheable_page_tables: AtomicU64,
    /// Registrations whose pages a deregistration from another process
    /// left pinned to the process that pinned them, right now: each ends
    /// with that process's free callback (and holds the module till then).
    pub(crate) left_to_owner: AtomicU64,
    /// Unpins asked from a process other than the one that pinned: pins
    /// with a free callback, which the driver cannot put from there (left
    /// to their owner), and persistent pins, which it puts from anywhere.
    pub(crate) unpins_from_other_process: AtomicU64,
    /// Releases that waited for a free callback of their registration to
    /// come out of the core's invalidate.
    pub(crate) release_waited_for_invalidation: AtomicU64,
    /// The version of the last page table the driver gave (0: none yet).
    pub(crate) page_table_version: AtomicU32,
    errors: [AtomicU64; ErrorKind::ALL.len()],
}

impl Stats {
    const fn new() -> Self {
        Self {
            acquired: AtomicU64::new(0),
            declined: AtomicU64::new(0),
            released: AtomicU64::new(0),
            pinned_bytes: AtomicU64::new(0),
            mappings: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
            invalidations_without_core: AtomicU64::new(0),
            skipped_after_invalidation: AtomicU64::new(0),
            dma_unmap_after_free: AtomicU64::new(0),
            free_waited_for_unmap: AtomicU64::new(0),
            free_waited_for_registration: AtomicU64::new(0),
            free_wait_rechecks: AtomicU64::new(0),
            cpu_cacheable_page_tables: AtomicU64::new(0),
            left_to_owner: AtomicU64::new(0),
            unpins_from_other_process: AtomicU64::new(0),
            release_waited_for_invalidation: AtomicU64::new(0),
            page_table_version: AtomicU32::new(0),
            errors: [const { AtomicU64::new(0) }; ErrorKind::ALL.len()],
        }
    }

    /// Counts one error of `kind`.
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Errors of `kind` so far.
    pub(crate) fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize].load(Ordering::Relaxed)
    }
}

/// Adds one to a counter.
pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Reads a counter.
pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The module's counters.
pub(crate) static STATS: Stats = Stats::new();

// `ErrorKind as usize` indexes `errors`: the discriminants must follow `ALL`.
const _: () = {
    let mut i = 0;
    while i < ErrorKind::ALL.len() {
        assert!(ErrorKind::ALL[i] as usize == i);
        i += 1;
    }
};

/// An error together with its kind, for the counters and the log.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Failure {
    /// What went wrong.
    pub(crate) kind: ErrorKind,
    /// The error returned to the caller.
    pub(crate) error: kernel::error::Error,
}

impl Failure {
    /// A failure of `kind` returning `error`.
    pub(crate) const fn new(kind: ErrorKind, error: kernel::error::Error) -> Self {
        Self { kind, error }
    }

    /// Counts the failure and returns its error.
    pub(crate) fn count(self) -> kernel::error::Error {
        STATS.error(self.kind);
        self.error
    }
}
