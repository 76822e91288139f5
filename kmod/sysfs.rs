// SPDX-License-Identifier: GPL-2.0

//! The counters in sysfs, under the module's own directory, so that they
//! exist on every PeerDirect core and without debugfs (world-readable, one
//! value a file, names kept stable; docs/sysfs.md is the reference):
//!
//! - `/sys/module/<module>/memory_peers/<client>/`: per registered client
//!   (`nv_mem`, `nv_mem_nc`), the files of the core's
//!   `/sys/kernel/mm/memory_peers/<client>/`, which only cores built
//!   against a kernel that exports `mm_kobj` publish;
//! - `/sys/module/<module>/stats/`: the module's own counters (those of
//!   debugfs' `stats`), with `errors/<kind>` and `declines/<kind>`.
//!
//! Each directory is a kobject made by the C shim
//! (`pm_shim_sysfs_dir_create`): its files' names, and a show function
//! that asks a [`Files`] implementation for file `i`'s value. The kernel
//! crate of 6.12 has no sysfs attributes: one C helper serves every
//! kernel this module builds for.

use crate::client::ClientTable;
use crate::p2p::PersistentApi;
use crate::registration::{registry, PinKind};
use crate::stats::{self, ClientStats, DeclineKind, ErrorKind, STATS};
use crate::sys;
use core::fmt::{self, Write};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use kernel::{
    ffi::{c_char, c_uint, c_void},
    prelude::*,
};

/// The value of one file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Value {
    /// A count or a size, in decimal.
    Count(u64),
    /// A version word, in hexadecimal as `0x` and 8 digits.
    Version(u32),
    /// A word.
    Text(&'static str),
}

/// A byte buffer that [`fmt::Write`] fills, failing when it is full.
struct SliceWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        let dest = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dest.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes `value` and a newline into `buf`, as a sysfs file shows it;
/// returns the length written. `E2BIG` if `buf` is too small.
pub(crate) fn format_value(value: Value, buf: &mut [u8]) -> Result<usize> {
    let mut w = SliceWriter { buf, len: 0 };
    match value {
        Value::Count(n) => writeln!(w, "{}", n),
        Value::Version(v) => writeln!(w, "{:#010x}", v),
        Value::Text(s) => writeln!(w, "{}", s),
    }
    .map_err(|_| E2BIG)?;
    Ok(w.len)
}

/// The files of one directory.
pub(crate) trait Files: Sync + 'static {
    /// How many files.
    const COUNT: usize;

    /// The name of file `index`, NUL-terminated.
    fn name(index: usize) -> &'static str;

    /// The value of file `index` now; `None` past the last file.
    fn value(&self, index: usize) -> Option<Value>;
}

/// Whether `name` is a C string: one NUL, at its end.
fn is_c_name(name: &str) -> bool {
    name.len() > 1 && name.find('\0') == Some(name.len() - 1)
}

/// # Safety
///
/// Called by the shim's show function only, with the `ctx` given to
/// `pm_shim_sysfs_dir_create` (a `&'static T`) and `buf` valid for writes
/// of `size` bytes.
unsafe extern "C" fn show_callback<T: Files>(
    ctx: *const c_void,
    index: c_uint,
    buf: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: `ctx` is the `&'static T` `Dir::create` gave the shim
    // (function's requirements).
    let files = unsafe { &*ctx.cast::<T>() };
    let result = match files.value(index as usize) {
        // SAFETY: `buf` is valid for writes of `size` bytes for the call
        // (function's requirements), and nothing else uses it meanwhile.
        Some(value) => format_value(value, unsafe {
            core::slice::from_raw_parts_mut(buf.cast::<u8>(), size)
        }),
        None => Err(EIO),
    };
    match result {
        Ok(len) => isize::try_from(len).unwrap_or(0),
        Err(e) => e.to_errno() as isize,
    }
}

/// One directory of value files; removed when dropped.
///
/// # Invariants
///
/// `0` is what `pm_shim_sysfs_dir_create` returned, not yet removed.
pub(crate) struct Dir(NonNull<sys::pm_sysfs_dir>);

// SAFETY: a kobject may be removed from any thread.
unsafe impl Send for Dir {}
// SAFETY: `&Dir` only lends the directory as a parent, which the shim
// reads under the kernel's own locking.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates directory `name` (NUL-terminated) under `parent`, or under
    /// the module's `/sys/module/<module>/` without one, with the files of
    /// `files`.
    pub(crate) fn create<T: Files>(
        parent: Option<&Dir>,
        name: &str,
        files: &'static T,
    ) -> Result<Self> {
        if !is_c_name(name) {
            return Err(EINVAL);
        }
        let mut names = KVec::with_capacity(T::COUNT, GFP_KERNEL)?;
        for index in 0..T::COUNT {
            let file = T::name(index);
            if !is_c_name(file) {
                return Err(EINVAL);
            }
            names.push(file.as_ptr().cast::<c_char>(), GFP_KERNEL)?;
        }
        let count = c_uint::try_from(T::COUNT).map_err(|_| EINVAL)?;
        let mut out = core::ptr::null_mut();
        // SAFETY: FFI call. `parent` is a live directory (its invariant),
        // `name` and every file name are NUL-terminated (checked) and the
        // latter `'static`, as the directory keeps them; `names` holds
        // `count` pointers and is only read during the call;
        // `show_callback::<T>` gets `files`, a `&'static T`, as its
        // context; `out` is a valid out-pointer.
        let rc = unsafe {
            sys::pm_shim_sysfs_dir_create(
                parent.map_or(core::ptr::null_mut(), |p| p.0.as_ptr()),
                name.as_ptr().cast(),
                names.as_ptr(),
                count,
                Some(show_callback::<T>),
                core::ptr::from_ref(files).cast(),
                &mut out,
            )
        };
        sys::check(rc)?;
        // INVARIANT: the shim's directory, just created.
        NonNull::new(out).map(Self).ok_or(ENOMEM)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: FFI call with a directory of `pm_shim_sysfs_dir_create`,
        // removed once (type invariant). Its subdirectories are `Dir`s that
        // borrowed it as their parent and went first (see `Counters`).
        unsafe { sys::pm_shim_sysfs_dir_remove(self.0.as_ptr()) };
    }
}

/// `memory_peers/<client>/`: the core's files, with its names.
pub(crate) struct ClientFiles {
    stats: &'static ClientStats,
    invalidating: bool,
}

/// The files of each client, by how it pins (see [`stats::client_stats`]).
static CLIENT_FILES: [ClientFiles; 2] = [
    ClientFiles {
        stats: &stats::CLIENT_STATS[0],
        invalidating: true,
    },
    ClientFiles {
        stats: &stats::CLIENT_STATS[1],
        invalidating: false,
    },
];

impl ClientFiles {
    /// The files of the client that pins as `kind`.
    pub(crate) fn of(kind: PinKind) -> &'static Self {
        match kind {
            PinKind::Invalidating => &CLIENT_FILES[0],
            PinKind::Persistent => &CLIENT_FILES[1],
        }
    }
}

/// The file names of a client directory, as the core's `memory_peers`.
const CLIENT_NAMES: [&str; 8] = [
    "version\0",
    "num_alloc_mrs\0",
    "num_dealloc_mrs\0",
    "num_reg_pages\0",
    "num_dereg_pages\0",
    "num_reg_bytes\0",
    "num_dereg_bytes\0",
    "num_free_callbacks\0",
];

impl Files for ClientFiles {
    const COUNT: usize = CLIENT_NAMES.len();

    fn name(index: usize) -> &'static str {
        CLIENT_NAMES.get(index).copied().unwrap_or("\0")
    }

    fn value(&self, index: usize) -> Option<Value> {
        let s = self.stats;
        Some(match index {
            0 => Value::Text(crate::modinfo::VERSION),
            1 => Value::Count(stats::get(&s.alloc_mrs)),
            2 => Value::Count(stats::get(&s.dealloc_mrs)),
            3 => Value::Count(stats::get(&s.reg_pages)),
            4 => Value::Count(stats::get(&s.dereg_pages)),
            5 => Value::Count(stats::get(&s.reg_bytes)),
            6 => Value::Count(stats::get(&s.dereg_bytes)),
            // The calls into the core's invalidate function, as the core
            // counts them: only the invalidating client makes any.
            7 => Value::Count(if self.invalidating {
                STATS.core_invalidations()
            } else {
                0
            }),
            _ => return None,
        })
    }
}

/// `stats/`: the module's counters, as debugfs' `stats` shows them.
pub(crate) struct ModuleFiles;

/// The file names of `stats/`.
const MODULE_NAMES: [&str; 20] = [
    "registrations_live\0",
    "acquired\0",
    "declined\0",
    "released\0",
    "pinned_pages\0",
    "pinned_bytes\0",
    "dma_mappings\0",
    "invalidations\0",
    "core_invalidations\0",
    "skipped_after_invalidation\0",
    "dma_unmap_after_free\0",
    "free_waited_for_unmap\0",
    "free_waited_for_registration\0",
    "free_wait_rechecks\0",
    "cpu_cacheable_page_tables\0",
    "left_to_owner\0",
    "unpins_from_other_process\0",
    "release_waited_for_invalidation\0",
    "page_table_version\0",
    "persistent_api\0",
];

impl Files for ModuleFiles {
    const COUNT: usize = MODULE_NAMES.len();

    fn name(index: usize) -> &'static str {
        MODULE_NAMES.get(index).copied().unwrap_or("\0")
    }

    fn value(&self, index: usize) -> Option<Value> {
        let s = &STATS;
        let count = |c| Value::Count(stats::get(c));
        Some(match index {
            0 => Value::Count(registry::count() as u64),
            1 => count(&s.acquired),
            2 => count(&s.declined),
            3 => count(&s.released),
            // Every pinned page is a GPU page.
            4 => Value::Count(stats::get(&s.pinned_bytes) >> crate::range::GPU_PAGE_SHIFT),
            5 => count(&s.pinned_bytes),
            6 => count(&s.mappings),
            7 => count(&s.invalidations),
            8 => Value::Count(s.core_invalidations()),
            9 => count(&s.skipped_after_invalidation),
            10 => count(&s.dma_unmap_after_free),
            11 => count(&s.free_waited_for_unmap),
            12 => count(&s.free_waited_for_registration),
            13 => count(&s.free_wait_rechecks),
            14 => count(&s.cpu_cacheable_page_tables),
            15 => count(&s.left_to_owner),
            16 => count(&s.unpins_from_other_process),
            17 => count(&s.release_waited_for_invalidation),
            18 => Value::Version(s.page_table_version.load(Ordering::Relaxed)),
            19 => Value::Text(match PersistentApi::of_driver() {
                PersistentApi::Dedicated => "get_pages_persistent",
                PersistentApi::GetPagesWithoutCallback => "get_pages_without_callback",
            }),
            _ => return None,
        })
    }
}

// Every name above is a C string.
const _: () = {
    let mut i = 0;
    while i < CLIENT_NAMES.len() {
        let b = CLIENT_NAMES[i].as_bytes();
        assert!(b.len() > 1 && b[b.len() - 1] == 0);
        i += 1;
    }
    let mut i = 0;
    while i < MODULE_NAMES.len() {
        let b = MODULE_NAMES[i].as_bytes();
        assert!(b.len() > 1 && b[b.len() - 1] == 0);
        i += 1;
    }
};

/// `stats/errors/`: errors by kind.
pub(crate) struct ErrorFiles;

impl Files for ErrorFiles {
    const COUNT: usize = ErrorKind::ALL.len();

    fn name(index: usize) -> &'static str {
        ErrorKind::ALL.get(index).map_or("\0", |k| k.c_name())
    }

    fn value(&self, index: usize) -> Option<Value> {
        ErrorKind::ALL
            .get(index)
            .map(|&k| Value::Count(STATS.errors(k)))
    }
}

/// `stats/declines/`: acquire's "not mine" by cause.
pub(crate) struct DeclineFiles;

impl Files for DeclineFiles {
    const COUNT: usize = DeclineKind::ALL.len();

    fn name(index: usize) -> &'static str {
        DeclineKind::ALL.get(index).map_or("\0", |k| k.c_name())
    }

    fn value(&self, index: usize) -> Option<Value> {
        DeclineKind::ALL
            .get(index)
            .map(|&k| Value::Count(STATS.declines(k)))
    }
}

/// Directories without files of their own.
pub(crate) struct NoFiles;

impl Files for NoFiles {
    const COUNT: usize = 0;

    fn name(_index: usize) -> &'static str {
        "\0"
    }

    fn value(&self, _index: usize) -> Option<Value> {
        None
    }
}

/// The whole tree; removed when dropped, each directory before its parent
/// (fields drop in their order).
pub(crate) struct Counters {
    _clients: KVec<Dir>,
    _memory_peers: Dir,
    _errors: Dir,
    _declines: Dir,
    _stats: Dir,
}

impl Counters {
    /// Creates the tree, with a `memory_peers/` directory for each client
    /// of `clients` (its table and how it pins).
    pub(crate) fn create(
        clients: impl Iterator<Item = (&'static ClientTable, PinKind)>,
    ) -> Result<Self> {
        let stats = Dir::create(None, "stats\0", &ModuleFiles)?;
        let errors = Dir::create(Some(&stats), "errors\0", &ErrorFiles)?;
        let declines = Dir::create(Some(&stats), "declines\0", &DeclineFiles)?;
        let memory_peers = Dir::create(None, "memory_peers\0", &NoFiles)?;
        let mut dirs = KVec::new();
        for (table, kind) in clients {
            let dir = Dir::create(
                Some(&memory_peers),
                table.name_with_nul(),
                ClientFiles::of(kind),
            )?;
            dirs.push(dir, GFP_KERNEL)?;
        }
        Ok(Self {
            _clients: dirs,
            _memory_peers: memory_peers,
            _errors: errors,
            _declines: declines,
            _stats: stats,
        })
    }
}
