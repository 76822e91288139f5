// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the debugfs text and of the registration's size.

use super::lifecycle::*;
use super::mock::{self, CoreMode, DMA_BASE};
use super::{check, check_eq};
use crate::nv_mem;
use crate::params::{ClientSet, Config, PeerDirectAbi};
use crate::registration::registry;

/// A small text buffer for formatting checks.
pub(super) struct Text {
    buf: [u8; 256],
    len: usize,
}

impl Text {
    fn new() -> Self {
        Self {
            buf: [0; 256],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    fn contains(&self, needle: &str) -> bool {
        self.as_str().contains(needle)
    }
}

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

pub(super) fn debugfs_lines_and_counters() {
    use crate::stats::{self, ErrorKind, STATS};
    // The parameters as loaded (defaults in this module) are valid.
    check!(
        Config::from_params()
            == Ok(Config {
                abi: PeerDirectAbi::Extended,
                clients: ClientSet::PersistentOnly,
                coalesce_sg: false,
            })
    );
    let table = &nv_mem::NV_MEM_INVALIDATING_EX;
    mock::reset(1 << 20);
    mock::set_dma_stride(2 * K64);
    let Some(_core) = register(table, true) else {
        return;
    };
    let dev = TestPciDevice::get();
    let Some(mut mr) = pinned_mr(table) else {
        return;
    };
    let line = |registry_state: &str| {
        let mut text = Text::new();
        // Checked once the registry's lock is dropped: a failed check
        // allocates (KUnit's report), which must not happen under a
        // spinlock.
        let (ok, live) = {
            let entries = registry::lock();
            let ok = entries.iter().all(|r| r.describe(&mut text).is_ok());
            (ok, entries.len())
        };
        check!(ok);
        check_eq!(live, 1);
        let range = "[0x900000000000, 0x900000050000) pages=5";
        check!(text.contains(range));
        check!(text.contains(registry_state));
        check!(text.contains("invalidating"));
    };
    line("sg_entries=0 state=pinned");
    check_eq!(mr.dma_map(dev.0).0, 0);
    line("sg_entries=5 state=mapped");
    // The SG entries follow the provider's (non-contiguous) DMA addresses.
    let mut entries = [(0u64, 0u32); 8];
    check_eq!(mr.entries(&mut entries), 5);
    check_eq!(entries[1].0, DMA_BASE + 2 * K64);
    check_eq!(entries[4].0, DMA_BASE + 8 * K64);
    let invalidations = stats::get(&STATS.invalidations);
    mock::set_core(CoreMode::Unmaps, &raw const table.ex().client, mr.context);
    check_eq!(mock::cuda_free(), 1);
    line("state=invalidated");
    check_eq!(stats::get(&STATS.invalidations), invalidations + 1);
    let errors = STATS.errors(ErrorKind::PageSize);
    STATS.error(ErrorKind::PageSize);
    check_eq!(STATS.errors(ErrorKind::PageSize), errors + 1);
    check_eq!(ErrorKind::PageSize.name(), "page_size");
    mr.put_pages();
    mr.release();
    mock::reset(0);
}

/// The registration's allocation (the kernel crate's `Arc`: a 4-byte count
/// padded to 8, then the registration) takes at most 192 bytes as long as a spinlock takes at
/// most 64 bytes (lockdep without lock statistics), and at most 128 with
/// the 4-byte spinlock of a kernel without lock debugging (a 64 KiB
/// registration then takes 160 bytes with its SG table, not 224). The second check holds on any kernel:
/// it takes this kernel's spinlock out and puts a 4-byte one (padded to 8
/// before the state) in.
pub(super) fn registration_size() {
    use crate::registration::allocation_size;
    use core::mem::size_of;
    check!(size_of::<kernel::sync::SpinLock<()>>() > 64 || allocation_size() <= 192);
    let lock = size_of::<kernel::bindings::spinlock_t>().next_multiple_of(8);
    check!(allocation_size() - lock + 8 <= 128);
}
