// SPDX-License-Identifier: GPL-2.0

//! The kernel-compatibility layer: every difference between the kernel
//! crates this module builds against, in one place. Each is a `pm_<name>`
//! cfg that `kmod/compat.mk` sets by compiling a probe (`compat/<name>.rs`)
//! against the kernel's Rust metadata, and a wrapper here with one arm per
//! side. The rest of the module uses these wrappers and never tests a
//! kernel version itself.
//!
//! | cfg                    | 6.12                    | 7.1, 7.2                     |
//! |------------------------|-------------------------|------------------------------|
//! | `pm_module_authors`    | `module! { author: }`   | `module! { authors: [..] }`  |
//! | `pm_cstr_ext`          | `CStr::as_char_ptr`     | `CStrExt::as_char_ptr`       |
//! | `pm_kunit_cstr_file`   | `kunit_assert!(.., "f")`| `kunit_assert!(.., c"f")`    |
//! | `pm_list_item_field`   | `impl_list_item!` with `impl_has_list_links!` | `impl_list_item!` naming the field |
//!
//! Three facilities of 7.x's kernel crate that 6.12's lacks are not used
//! on 7.x either, each for a reason its file gives: `module!`'s
//! parameters (`params.rs`: no sysfs files, `parmtype` `i32`),
//! `kernel::debugfs` (`debugfs.rs`: an open file does not hold the module)
//! and `global_lock!` (6.12 has no static kernel-crate lock, so the
//! registry keeps one global lock for both kernels).
//!
//! C API differences are absorbed by the C shim (`ffi/shim.c`), which the
//! kernel's own headers compile either way: `debugfs_create_file` (a
//! function on 6.12, a `_Generic` macro since 6.13) is
//! `pm_shim_debugfs_create_file`.

/// `kernel::kunit_assert!` for this module's KUnit cases: reports a false
/// `$cond` to KUnit and ends the case.
#[cfg(not(pm_kunit_cstr_file))]
#[allow(unused_macros)]
macro_rules! peermem_kunit_assert {
    ($cond:expr) => {
        kernel::kunit_assert!("nvidia_peermem_rs", "kmod/kunit", 0, $cond)
    };
}

/// `kernel::kunit_assert!` for this module's KUnit cases: reports a false
/// `$cond` to KUnit and ends the case.
#[cfg(pm_kunit_cstr_file)]
#[allow(unused_macros)]
macro_rules! peermem_kunit_assert {
    ($cond:expr) => {
        kernel::kunit_assert!("nvidia_peermem_rs", c"kmod/kunit", 0, $cond)
    };
}

use kernel::ffi::c_char;
/// The C string of a `c_str!` literal, as the kernel's `char *`.
#[inline(always)]
#[allow(dead_code)] // (the KUnit module has no debugfs files)
pub(crate) fn c_str_ptr(s: &kernel::str::CStr) -> *const c_char {
    #[cfg(pm_cstr_ext)]
    use kernel::str::CStrExt;
    s.as_char_ptr()
}

/// `module!` with one author, in the key this kernel's macro takes.
#[cfg(not(pm_module_authors))]
macro_rules! peermem_module {
    (type: $t:tt, name: $n:tt, author: $a:tt, description: $d:tt, license: $l:tt $(,)?) => {
        ::kernel::prelude::module! {
            type: $t,
            name: $n,
            author: $a,
            description: $d,
            license: $l,
        }
    };
}

/// `module!` with one author, in the key this kernel's macro takes.
#[cfg(pm_module_authors)]
macro_rules! peermem_module {
    (type: $t:tt, name: $n:tt, author: $a:tt, description: $d:tt, license: $l:tt $(,)?) => {
        ::kernel::prelude::module! {
            type: $t,
            name: $n,
            authors: [$a],
            description: $d,
            license: $l,
        }
    };
}

/// `kernel::list::impl_list_item!` for `$t`, whose `ListLinks` is the field
/// `$field`: 6.12's macro takes the field from `impl_has_list_links!`.
#[cfg(not(pm_list_item_field))]
macro_rules! peermem_list_item {
    ($t:ident, $field:ident) => {
        ::kernel::list::impl_has_list_links! {
            impl HasListLinks<0> for $t { self.$field }
        }
        ::kernel::list::impl_list_item! {
            impl ListItem<0> for $t { using ListLinks; }
        }
    };
}

/// `kernel::list::impl_list_item!` for `$t`, whose `ListLinks` is the field
/// `$field`: 7.x's macro names the field itself.
#[cfg(pm_list_item_field)]
macro_rules! peermem_list_item {
    ($t:ident, $field:ident) => {
        ::kernel::list::impl_list_item! {
            impl ListItem<0> for $t { using ListLinks { self.$field }; }
        }
    };
}
