// SPDX-License-Identifier: GPL-2.0

//! debugfs `nvidia_peermem_rs/` (root only, 0400): `registrations` lists
//! the live registrations, `stats` the counters.
//!
//! Each file is a `seq_file` whose show function comes from a [`SeqShow`]
//! implementation through a generic adapter and a const-built
//! `file_operations` in a `Sync` static, whose `owner` is this module.
//!
//! One implementation for every kernel. 6.12's kernel crate has no
//! debugfs. 7.x's `kernel::debugfs` would give the same names, mode (its
//! `read_only_file` is 0400) and text (a `Writer` over the same show
//! functions), but its `file_operations` have no `owner`: an open file
//! does not hold the module, `rmmod` succeeds under it, and the close that
//! follows calls the file's release through the `file_operations` in the
//! freed module (debugfs' `full_proxy_release`; a page fault on 7.2,
//! reproduced in the test VM). With ours `rmmod` is refused until the file
//! is closed, as for any C module's debugfs file (the `module_debugfs_open`
//! scenario checks it).

use crate::compat;
use crate::p2p::{PersistentApi, PAGE_TABLE_NEWEST, PAGE_TABLE_OLDEST};
use crate::registration::registry;
use crate::stats::{self, ErrorKind, STATS};
use crate::sys;
use core::fmt::{self, Write};
use core::sync::atomic::Ordering;
use kernel::{
    bindings, c_str,
    ffi::{c_int, c_void},
};

/// Writes formatted text into a `seq_file`.
///
/// # Invariants
///
/// `0` is the `seq_file` of a show callback that is running.
pub(crate) struct SeqWriter(*mut bindings::seq_file);

impl Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // SAFETY: the `seq_file` is valid during the show callback (type
        // invariant); `s` is valid for `s.len()` bytes.
        unsafe { bindings::seq_write(self.0, s.as_ptr().cast(), s.len()) };
        // On overflow seq_file retries the whole show with a bigger buffer.
        Ok(())
    }
}

/// The content of one debugfs file.
pub(crate) trait SeqShow {
    /// Writes the whole content.
    fn show(w: &mut SeqWriter) -> fmt::Result;
}

/// # Safety
///
/// Called by `seq_read` only, with a valid `seq_file`.
unsafe extern "C" fn show_callback<T: SeqShow>(
    m: *mut bindings::seq_file,
    _v: *mut c_void,
) -> c_int {
    // INVARIANT: `m` is valid for the duration of this callback.
    let mut w = SeqWriter(m);
    let _ = T::show(&mut w);
    0
}

/// # Safety
///
/// Called by the VFS only, with valid `inode` and `file`.
unsafe extern "C" fn open_callback<T: SeqShow>(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: FFI call with the VFS's file; `show_callback::<T>` has the
    // signature `single_open` expects.
    unsafe { bindings::single_open(file, Some(show_callback::<T>), core::ptr::null_mut()) }
}

/// A `file_operations` table, never written after const initialisation.
#[repr(transparent)]
struct FileOps(bindings::file_operations);

// SAFETY: immutable; only function pointers and the module pointer inside.
unsafe impl Sync for FileOps {}

impl FileOps {
    const fn new<T: SeqShow>() -> Self {
        Self(bindings::file_operations {
            owner: crate::THIS_MODULE.as_ptr(),
            open: Some(open_callback::<T>),
            read: Some(bindings::seq_read),
            llseek: Some(bindings::seq_lseek),
            release: Some(bindings::single_release),
            // SAFETY: all-zero is valid for the remaining fields (null
            // pointers, `None` callbacks, zero flags).
            ..unsafe { core::mem::zeroed() }
        })
    }
}

/// `registrations`: a count line, then one line per live registration.
struct RegistrationsFile;

impl SeqShow for RegistrationsFile {
    fn show(w: &mut SeqWriter) -> fmt::Result {
        let entries = registry::lock();
        writeln!(w, "count {}", entries.len())?;
        for registration in entries.iter() {
            registration.describe(w)?;
        }
        Ok(())
    }
}

/// `stats`: `name value` lines.
struct StatsFile;

impl SeqShow for StatsFile {
    fn show(w: &mut SeqWriter) -> fmt::Result {
        let s = &STATS;
        writeln!(w, "registrations_live {}", registry::count())?;
        writeln!(w, "acquired {}", stats::get(&s.acquired))?;
        writeln!(w, "declined {}", stats::get(&s.declined))?;
        writeln!(w, "released {}", stats::get(&s.released))?;
        // Every pinned page is a GPU page: one counter, not two.
        let pinned_bytes = stats::get(&s.pinned_bytes);
        writeln!(
            w,
            "pinned_pages {}",
            pinned_bytes >> crate::range::GPU_PAGE_SHIFT
        )?;
        writeln!(w, "pinned_bytes {}", pinned_bytes)?;
        writeln!(w, "dma_mappings {}", stats::get(&s.mappings))?;
        // The calls into the core are the callbacks less those that made
        // none (read first: a callback between the two reads shows as a
        // call into the core until it counts itself, never as less than 0).
        let without_core = stats::get(&s.invalidations_without_core);
        let invalidations = stats::get(&s.invalidations);
        writeln!(w, "invalidations {}", invalidations)?;
        writeln!(
            w,
            "core_invalidations {}",
            invalidations.saturating_sub(without_core)
        )?;
        writeln!(
            w,
            "skipped_after_invalidation {}",
            stats::get(&s.skipped_after_invalidation)
        )?;
        writeln!(
            w,
            "dma_unmap_after_free {}",
            stats::get(&s.dma_unmap_after_free)
        )?;
        writeln!(
            w,
            "free_waited_for_unmap {}",
            stats::get(&s.free_waited_for_unmap)
        )?;
        writeln!(
            w,
            "free_waited_for_registration {}",
            stats::get(&s.free_waited_for_registration)
        )?;
        writeln!(
            w,
            "free_wait_rechecks {}",
            stats::get(&s.free_wait_rechecks)
        )?;
        writeln!(
            w,
            "cpu_cacheable_page_tables {}",
            stats::get(&s.cpu_cacheable_page_tables)
        )?;
        writeln!(w, "left_to_owner {}", stats::get(&s.left_to_owner))?;
        writeln!(
            w,
            "unpins_from_other_process {}",
            stats::get(&s.unpins_from_other_process)
        )?;
        writeln!(
            w,
            "release_waited_for_invalidation {}",
            stats::get(&s.release_waited_for_invalidation)
        )?;
        writeln!(
            w,
            "page_table_version {:#010x}",
            s.page_table_version.load(Ordering::Relaxed)
        )?;
        writeln!(
            w,
            "page_table_versions_supported {:#010x}-{:#010x}",
            PAGE_TABLE_OLDEST, PAGE_TABLE_NEWEST
        )?;
        writeln!(
            w,
            "persistent_api {}",
            match PersistentApi::of_driver() {
                PersistentApi::Dedicated => "get_pages_persistent",
                PersistentApi::GetPagesWithoutCallback => "get_pages_without_callback",
            }
        )?;
        for kind in ErrorKind::ALL {
            writeln!(w, "error_{} {}", kind.name(), s.errors(kind))?;
        }
        Ok(())
    }
}

static REGISTRATIONS_FOPS: FileOps = FileOps::new::<RegistrationsFile>();
static STATS_FOPS: FileOps = FileOps::new::<StatsFile>();

/// The debugfs directory; removed (with its files) when dropped.
///
/// # Invariants
///
/// `0` is what `debugfs_create_dir` returned (possibly an error pointer,
/// which debugfs functions accept and ignore).
pub(crate) struct Dir(*mut bindings::dentry);

// SAFETY: a dentry may be removed from any thread.
unsafe impl Send for Dir {}
// SAFETY: `&Dir` gives no access to the dentry.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates `nvidia_peermem_rs/` and its files. Failures (e.g. no
    /// debugfs) only lose the files.
    pub(crate) fn create() -> Self {
        // SAFETY: FFI call with a NUL-terminated name and no parent.
        let dir = unsafe {
            sys::debugfs_create_dir(
                compat::c_str_ptr(c_str!("nvidia_peermem_rs")),
                core::ptr::null_mut(),
            )
        };
        for (name, fops) in [
            (c_str!("registrations"), &REGISTRATIONS_FOPS),
            (c_str!("stats"), &STATS_FOPS),
        ] {
            // SAFETY: FFI call; the name is NUL-terminated, `dir` came from
            // debugfs, `fops` is a static table whose `owner` pins us while
            // the file is open.
            unsafe {
                sys::pm_shim_debugfs_create_file(
                    compat::c_str_ptr(name),
                    0o400,
                    dir,
                    core::ptr::null_mut(),
                    &fops.0,
                )
            };
        }
        // INVARIANT: `dir` is what debugfs returned.
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: FFI call with what `debugfs_create_dir` returned (type
        // invariant); removes the files too.
        unsafe { sys::debugfs_remove(self.0) };
    }
}
