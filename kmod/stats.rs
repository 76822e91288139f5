// SPDX-License-Identifier: GPL-2.0

//! Counters of the module, shown in sysfs (`crate::sysfs`) and debugfs:
//! pins, invalidations, declines and errors by kind, and per client the
//! counters of the core's `memory_peers` tree. Plain atomics, so any
//! context may update them.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::error::code::{EFAULT, EINVAL, ENOMEM, ENOTSUPP};

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

    /// The name shown in debugfs (`error_<name>`) and sysfs
    /// (`stats/errors/<name>`).
    pub(crate) fn name(self) -> &'static str {
        let name = self.c_name();
        name.strip_suffix('\0').unwrap_or(name)
    }

    /// [`Self::name`], NUL-terminated.
    pub(crate) const fn c_name(self) -> &'static str {
        match self {
            ErrorKind::Range => "range\0",
            ErrorKind::ModuleGoing => "module_going\0",
            ErrorKind::NoMemory => "no_memory\0",
            ErrorKind::Sequence => "sequence\0",
            ErrorKind::GetPages => "get_pages\0",
            ErrorKind::PersistentUnsupported => "persistent_unsupported\0",
            ErrorKind::PageSize => "page_size\0",
            ErrorKind::PageTableVersion => "page_table_version\0",
            ErrorKind::DmaMap => "dma_map\0",
            ErrorKind::DmaMappingVersion => "dma_mapping_version\0",
            ErrorKind::NotPci => "not_pci\0",
            ErrorKind::SgTable => "sg_table\0",
            ErrorKind::DmaUnmap => "dma_unmap\0",
            ErrorKind::PutPages => "put_pages\0",
            ErrorKind::Free => "free\0",
            ErrorKind::Invalidate => "invalidate\0",
            ErrorKind::FreedWhileRegistering => "freed_while_registering\0",
        }
    }
}

/// Why acquire answered "not mine", for the per-kind decline counters.
/// The core then offers the range to the next client, and with none left
/// `ibv_reg_mr` fails (EFAULT from `ib_umem_get`, which tried the range as
/// host memory): these counters say which cause it was.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DeclineKind {
    /// Empty, wrapping, or more GPU pages than a page table holds. Never
    /// for alignment: the range is aligned outward to 64 KiB first.
    Range,
    /// The module is going away (unloading, or a failed load).
    ModuleGoing,
    /// The driver refused the pin as an invalid argument: not GPU memory
    /// (host memory, another process's, freed), or a range spanning more
    /// than one allocation (cuMem VMM ranges, expandable segments); the
    /// driver answers both alike.
    NotGpuMemory,
    /// The driver refused a persistent pin as not supported (MIG, vGPU on
    /// older drivers): `persistent_api_support=0` pins with a callback.
    PersistentUnsupported,
    /// The driver had no memory for the pin: BAR1 space or kernel memory.
    DriverOutOfMemory,
    /// The driver refused the pin with any other error.
    DriverRefused,
    /// The driver's page table has a version this module cannot read.
    PageTableVersion,
    /// The memory was freed (free callback) while acquire pinned it.
    FreedWhileAcquiring,
    /// This module had no memory for the registration.
    NoMemory,
    /// A pin acquire could not use could not be unpinned either.
    UnpinFailed,
    /// Anything else (a cause this list does not name).
    Other,
}

impl DeclineKind {
    /// Every kind, in display order.
    pub(crate) const ALL: [DeclineKind; 11] = [
        DeclineKind::Range,
        DeclineKind::ModuleGoing,
        DeclineKind::NotGpuMemory,
        DeclineKind::PersistentUnsupported,
        DeclineKind::DriverOutOfMemory,
        DeclineKind::DriverRefused,
        DeclineKind::PageTableVersion,
        DeclineKind::FreedWhileAcquiring,
        DeclineKind::NoMemory,
        DeclineKind::UnpinFailed,
        DeclineKind::Other,
    ];

    /// The name of its file in sysfs (`stats/declines/<name>`) and of its
    /// debugfs line (`decline_<name>`).
    pub(crate) fn name(self) -> &'static str {
        let name = self.c_name();
        name.strip_suffix('\0').unwrap_or(name)
    }

    /// [`Self::name`], NUL-terminated.
    pub(crate) const fn c_name(self) -> &'static str {
        match self {
            DeclineKind::Range => "range\0",
            DeclineKind::ModuleGoing => "module_going\0",
            DeclineKind::NotGpuMemory => "not_gpu_memory\0",
            DeclineKind::PersistentUnsupported => "persistent_unsupported\0",
            DeclineKind::DriverOutOfMemory => "driver_out_of_memory\0",
            DeclineKind::DriverRefused => "driver_refused\0",
            DeclineKind::PageTableVersion => "page_table_version\0",
            DeclineKind::FreedWhileAcquiring => "freed_while_acquiring\0",
            DeclineKind::NoMemory => "no_memory\0",
            DeclineKind::UnpinFailed => "unpin_failed\0",
            DeclineKind::Other => "other\0",
        }
    }

    /// The cause of a pin the driver refused with `e`.
    pub(crate) fn of_pin_error(e: kernel::error::Error) -> Self {
        if e == EINVAL || e == EFAULT {
            DeclineKind::NotGpuMemory
        } else if e == ENOTSUPP {
            DeclineKind::PersistentUnsupported
        } else if e == ENOMEM {
            DeclineKind::DriverOutOfMemory
        } else {
            DeclineKind::DriverRefused
        }
    }

    /// The cause of a decline that came as a counted failure of `kind`.
    pub(crate) const fn of_failure(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Range => DeclineKind::Range,
            ErrorKind::ModuleGoing => DeclineKind::ModuleGoing,
            ErrorKind::NoMemory => DeclineKind::NoMemory,
            ErrorKind::PersistentUnsupported => DeclineKind::PersistentUnsupported,
            ErrorKind::PageTableVersion => DeclineKind::PageTableVersion,
            ErrorKind::PutPages => DeclineKind::UnpinFailed,
            ErrorKind::FreedWhileRegistering => DeclineKind::FreedWhileAcquiring,
            _ => DeclineKind::Other,
        }
    }
}

/// The counters of one client, with the names and meanings of the core's
/// `/sys/kernel/mm/memory_peers/<client>/` files, kept by the client itself
/// so that they exist on every core (that tree does not, from DOCA-OFED
/// 23.10 on kernels that do not export `mm_kobj`). An MR is counted as the
/// core's is: registered when dma_map succeeded, deregistered when the
/// core releases it.
pub(crate) struct ClientStats {
    /// MRs mapped for the core (`num_alloc_mrs`).
    pub(crate) alloc_mrs: AtomicU64,
    /// Of those, MRs the core released since (`num_dealloc_mrs`).
    pub(crate) dealloc_mrs: AtomicU64,
    /// GPU pages (64 KiB) of the MRs mapped (`num_reg_pages`).
    pub(crate) reg_pages: AtomicU64,
    /// GPU pages of the MRs released (`num_dereg_pages`).
    pub(crate) dereg_pages: AtomicU64,
    /// Bytes of the MRs mapped, the user's length (`num_reg_bytes`).
    pub(crate) reg_bytes: AtomicU64,
    /// Bytes of the MRs released, the user's length (`num_dereg_bytes`).
    pub(crate) dereg_bytes: AtomicU64,
}

impl ClientStats {
    const fn new() -> Self {
        Self {
            alloc_mrs: AtomicU64::new(0),
            dealloc_mrs: AtomicU64::new(0),
            reg_pages: AtomicU64::new(0),
            dereg_pages: AtomicU64::new(0),
            reg_bytes: AtomicU64::new(0),
            dereg_bytes: AtomicU64::new(0),
        }
    }

    /// Counts an MR of `pages` GPU pages and `bytes` user bytes mapped.
    pub(crate) fn mapped(&self, pages: u64, bytes: u64) {
        inc(&self.alloc_mrs);
        self.reg_pages.fetch_add(pages, Ordering::Relaxed);
        self.reg_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts the release of an MR that [`Self::mapped`] counted.
    pub(crate) fn released(&self, pages: u64, bytes: u64) {
        inc(&self.dealloc_mrs);
        self.dereg_pages.fetch_add(pages, Ordering::Relaxed);
        self.dereg_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The counters of each client, by how it pins: one client of each kind
/// is registered at a time (`nv_mem` invalidating or persistent,
/// `nv_mem_nc` persistent).
pub(crate) static CLIENT_STATS: [ClientStats; 2] = [ClientStats::new(), ClientStats::new()];

/// The counters of the client that pins as `kind`.
pub(crate) fn client_stats(kind: crate::registration::PinKind) -> &'static ClientStats {
    match kind {
        crate::registration::PinKind::Invalidating => &CLIENT_STATS[0],
        crate::registration::PinKind::Persistent => &CLIENT_STATS[1],
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
    declines: [AtomicU64; DeclineKind::ALL.len()],
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
            declines: [const { AtomicU64::new(0) }; DeclineKind::ALL.len()],
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

    /// Counts one decline (acquire's "not mine") of `kind`.
    pub(crate) fn decline(&self, kind: DeclineKind) {
        inc(&self.declined);
        self.declines[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Declines of `kind` so far.
    pub(crate) fn declines(&self, kind: DeclineKind) -> u64 {
        self.declines[kind as usize].load(Ordering::Relaxed)
    }

    /// The calls into the core's invalidate function: the free callbacks
    /// less those that made none (read first: a callback between the two
    /// reads shows as a call into the core until it counts itself, never
    /// as less than 0).
    pub(crate) fn core_invalidations(&self) -> u64 {
        let without_core = get(&self.invalidations_without_core);
        get(&self.invalidations).saturating_sub(without_core)
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

// `ErrorKind as usize` indexes `errors`, `DeclineKind as usize`
// `declines`: the discriminants must follow `ALL`.
const _: () = {
    let mut i = 0;
    while i < ErrorKind::ALL.len() {
        assert!(ErrorKind::ALL[i] as usize == i);
        i += 1;
    }
    let mut i = 0;
    while i < DeclineKind::ALL.len() {
        assert!(DeclineKind::ALL[i] as usize == i);
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
