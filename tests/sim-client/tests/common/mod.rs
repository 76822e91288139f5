// SPDX-License-Identifier: GPL-2.0
//! Shared by the integration tests of this crate and of peermem-check
//! (which includes this file by path).

use std::io::Write;

/// Reports that test `test` could not run (a prerequisite is missing) and
/// must not count as passed: a line `PKG/TARGET::test: reason`
/// appended to `$PEERMEM_HOST_SKIPS` when set (make test and make check set
/// it; their summary moves the test from passed to skipped), and to stderr.
/// The caller returns right after.
pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIP: {test}: {reason}");
    let Some(path) = std::env::var_os("PEERMEM_HOST_SKIPS") else {
        return;
    };
    let line = format!(
        "{}/{}::{test}: {reason}\n",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME")
    );
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("cannot record the skip of {test} in {path:?}: {e}");
    }
}
