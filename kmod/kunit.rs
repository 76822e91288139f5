// SPDX-License-Identifier: GPL-2.0

//! Hand-declared KUnit suites (6.12 has no `#[kunit_tests]`): the layout
//! 6.15's macro generates, a `static mut` suite and case array (KUnit writes
//! their status) and a pointer in `.kunit_test_suites`.
//!
//! Failed checks go through `kernel::kunit_assert!`, which reports to KUnit
//! and ends the case; never `assert!`/`unwrap()` (a panic is a `BUG()`).

use kernel::bindings;

pub(crate) mod mock;

mod client_tables;
mod debugfs;
mod invalidation;
mod layouts;
mod lifecycle;
mod p2p;
mod range_params;
mod refusals;
mod sg;

/// Checks a condition inside a KUnit case; reports and ends the case when
/// false.
macro_rules! check {
    ($cond:expr $(,)?) => {
        peermem_kunit_assert!($cond)
    };
}

/// Checks that two expressions are equal inside a KUnit case.
macro_rules! check_eq {
    ($left:expr, $right:expr $(,)?) => {
        peermem_kunit_assert!(($left) == ($right))
    };
}

/// Declares a KUnit suite: `kunit_suite!(name_literal, [case_fn, ...]);`.
/// Each case is a plain `fn()` run by an `unsafe extern "C"` wrapper.
macro_rules! kunit_suite {
    ($name:literal, [$($case:path),* $(,)?]) => {
        const _: () = {
            use kernel::bindings;
            use $crate::kunit::{case, suite, CASE_END};

            static mut CASES: [bindings::kunit_case; [$(stringify!($case)),*].len() + 1] = [
                $(case(
                    concat!(stringify!($case), "\0"),
                    {
                        /// # Safety
                        ///
                        /// Called by KUnit only, with the running test.
                        unsafe extern "C" fn run(_test: *mut bindings::kunit) {
                            $case()
                        }
                        run
                    },
                ),)*
                CASE_END,
            ];

            // `CASES` is a static that lives as long as the suite and ends with
            // the all-zero terminator.
            static mut SUITE: bindings::kunit_suite = suite($name, (&raw mut CASES).cast());

            #[used(compiler)]
            #[link_section = ".kunit_test_suites"]
            static mut SUITE_ENTRY: *const bindings::kunit_suite = &raw const SUITE;
        };
    };
}

pub(crate) use {check, check_eq};

/// A test case named `name` (a NUL-terminated string) running `run`.
pub(crate) const fn case(
    name: &'static str,
    run: unsafe extern "C" fn(*mut bindings::kunit),
) -> bindings::kunit_case {
    // The other fields (no parameters, the module name and log KUnit
    // fills in; 7.x adds parameter hooks) are all zero.
    bindings::kunit_case {
        run_case: Some(run),
        name: name.as_ptr(),
        attr: bindings::kunit_attributes {
            speed: bindings::kunit_speed_KUNIT_SPEED_NORMAL,
        },
        status: bindings::kunit_status_KUNIT_SUCCESS,
        ..CASE_END
    }
}

/// The all-zero case that ends a case array.
// SAFETY: an all-zero `kunit_case` is valid: null pointers and `None`.
pub(crate) const CASE_END: bindings::kunit_case = unsafe { core::mem::zeroed() };

/// A suite named `name` running the cases at `cases`.
pub(crate) const fn suite(name: &str, cases: *mut bindings::kunit_case) -> bindings::kunit_suite {
    let mut name_buf = [0u8; 256];
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() && i < name_buf.len() - 1 {
        name_buf[i] = bytes[i];
        i += 1;
    }
    bindings::kunit_suite {
        name: name_buf,
        suite_init: None,
        suite_exit: None,
        init: None,
        exit: None,
        test_cases: cases,
        attr: bindings::kunit_attributes {
            speed: bindings::kunit_speed_KUNIT_SPEED_NORMAL,
        },
        status_comment: [0; 256],
        debugfs: core::ptr::null_mut(),
        log: core::ptr::null_mut(),
        suite_init_err: 0,
        is_init: false,
    }
}

// The one suite, its cases in the order they run (they share the mock).
use client_tables::*;
use debugfs::*;
use invalidation::*;
use layouts::*;
use lifecycle::*;
use p2p::*;
use range_params::*;
use refusals::*;
use sg::*;

kunit_suite!(
    "nvidia_peermem_rs",
    [
        kernel_crate_layouts_match_c,
        range_aligns_outward,
        range_rejects_empty_and_overflow,
        params_validate,
        client_tables_per_mode,
        client_selection_per_params,
        sg_one_entry_per_page,
        sg_coalescing,
        sg_table_build,
        core_registration_and_unregistration,
        registration_lifecycle_invalidating,
        registration_lifecycle_persistent,
        acquire_declines_non_gpu_memory,
        refusals_release_everything,
        failed_unpin_is_retried_at_release,
        refused_pin_unpin_failure_is_not_mine,
        invalidation_with_invalidate_unmaps,
        invalidation_core_calls_back_inside,
        release_during_invalidation,
        freed_while_pinning,
        debugfs_lines_and_counters,
        registration_size,
        page_table_versions_per_driver,
        drop_after_free_callback,
        null_page_table_keeps_callback_data,
        sg_entries_fit_nmap,
        registrations_counted_alive,
    ]
);
