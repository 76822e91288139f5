// SPDX-License-Identifier: GPL-2.0
//! One version for everything (issue 34): the repository's `VERSION` file.
//! The kernel module reads it at compile time (`kmod/modinfo.rs`), the DKMS
//! tree and the packages through packaging/packaging.mk; Cargo and dkms.conf
//! cannot read a file, so they repeat it and this test fails when any of
//! them says something else.

use std::fs;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The version in `VERSION`: one line, nothing else.
fn version() -> String {
    let v = read("VERSION");
    assert!(
        v.ends_with('\n') && v.lines().count() == 1,
        "VERSION must be one line ending in a newline: {v:?}"
    );
    let v = v.trim_end().to_string();
    assert!(
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'),
        "VERSION {v:?}: only letters, digits, '.' and '-'"
    );
    v
}

#[test]
fn cargo_workspace_version_is_the_version_file() {
    assert_eq!(
        env!("CARGO_PKG_VERSION"),
        version(),
        "Cargo.toml [workspace.package] version vs VERSION"
    );
}

#[test]
fn dkms_conf_version_is_the_version_file() {
    let conf = read("packaging/dkms/dkms.conf");
    let v: Vec<&str> = conf
        .lines()
        .filter_map(|l| l.strip_prefix("PACKAGE_VERSION=\""))
        .filter_map(|l| l.strip_suffix('"'))
        .collect();
    assert_eq!(
        v,
        vec![version().as_str()],
        "dkms.conf PACKAGE_VERSION vs VERSION"
    );
}

#[test]
fn module_reads_the_version_file() {
    let src = read("kmod/modinfo.rs");
    assert!(
        src.contains("include_str!(\"../VERSION\")"),
        "kmod/modinfo.rs must take its version from VERSION"
    );
    // No version literal of its own next to it.
    assert!(
        !src.contains(&format!("{}\"", version())),
        "kmod/modinfo.rs repeats the version as a literal"
    );
}

#[test]
fn changelog_has_the_version() {
    let log = read("CHANGELOG.md");
    let first = log
        .lines()
        .find(|l| l.starts_with("## ") && !l.contains("Unreleased"))
        .unwrap_or_else(|| panic!("CHANGELOG.md has no release section"));
    assert!(
        first.starts_with(&format!("## [{}]", version())),
        "CHANGELOG.md's newest release is {first:?}, VERSION says {}",
        version()
    );
}

#[test]
fn packaging_takes_the_version_file() {
    let mk = read("packaging/packaging.mk");
    assert!(
        mk.contains("PKG_VERSION := $(shell cat $(PKG_ROOT)/VERSION"),
        "packaging/packaging.mk must read VERSION"
    );
}
