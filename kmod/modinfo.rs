// SPDX-License-Identifier: GPL-2.0

//! `.modinfo` strings that 6.12's `module!` cannot emit: the version, which
//! also gives `/sys/module/<name>/version` (for the module named
//! `nvidia_peermem`, the file NCCL and UCX test on a core without
//! `/sys/kernel/mm/memory_peers`).

/// Version of the module, also announced to the PeerDirect core as the client
/// version (it must fit 14 characters plus NUL, see [`crate::client`]).
///
/// Both `/sys/module/<name>/version` and
/// `/sys/kernel/mm/memory_peers/<client>/version` (where the core publishes
/// that tree) say this module's own
/// version, also in the drop-in build, where NVIDIA's module says the
/// driver's (`NV_VERSION_STRING`, e.g. `580.95.05`). NCCL, UCX and NVSHMEM
/// only test that those files exist; an operator who reads them learns
/// which module serves the node, and a driver version there would claim a
/// build this module is not (DKMS's version check of the drop-in is
/// handled by its override file, packaging/README.md).
///
/// It is the repository's `VERSION` file (one line), the one version of the
/// module, the tool, the DKMS tree and the packages (CHANGELOG.md).
pub(crate) const VERSION: &str = version_line(include_str!("../VERSION"));

/// The version in a `VERSION` file: its one line, without the newline.
///
/// Evaluated at compile time: a file that is not one line ending in a
/// newline, or longer than a client version may be, fails the build.
const fn version_line(file: &str) -> &str {
    let bytes = file.as_bytes();
    assert!(bytes.len() >= 2 && bytes[bytes.len() - 1] == b'\n');
    let (line, _) = bytes.split_at(bytes.len() - 1);
    let mut i = 0;
    while i < line.len() {
        assert!(line[i].is_ascii_alphanumeric() || line[i] == b'.' || line[i] == b'-');
        i += 1;
    }
    match core::str::from_utf8(line) {
        Ok(v) => v,
        Err(_) => panic!("VERSION is not UTF-8"),
    }
}

/// Copies a string into a fixed-size byte array, for `.modinfo` statics.
///
/// `N` must be the string's length in bytes; the compile-time evaluation
/// fails otherwise.
pub(crate) const fn modinfo_bytes<const N: usize>(s: &str) -> [u8; N] {
    let bytes = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// `KEY=` followed by `value` and a NUL, as a fixed-size byte array for a
/// `.modinfo` static.
///
/// `N` must be `key.len() + value.len() + 1`; the compile-time evaluation
/// fails otherwise.
pub(crate) const fn modinfo_entry<const N: usize>(key: &str, value: &str) -> [u8; N] {
    let k = key.as_bytes();
    let v = value.as_bytes();
    assert!(N == k.len() + v.len() + 1);
    let mut out = [0u8; N];
    let mut i = 0;
    while i < k.len() {
        out[i] = k[i];
        i += 1;
    }
    let mut j = 0;
    while j < v.len() {
        out[i + j] = v[j];
        j += 1;
    }
    out
}

const VERSION_KEY: &str = "version=";

#[link_section = ".modinfo"]
#[used(compiler)]
static MODINFO_VERSION: [u8; VERSION_KEY.len() + VERSION.len() + 1] =
    modinfo_entry(VERSION_KEY, VERSION);
