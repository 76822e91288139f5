// SPDX-License-Identifier: GPL-2.0

//! `.modinfo` strings that 6.12's `module!` cannot emit: the version, which
//! also gives `/sys/module/<name>/version` (one of NCCL's detection paths).

/// Version of the module, also announced to the PeerDirect core as the client
/// version (it must fit 14 characters plus NUL, see [`crate::client`]).
///
/// Decided (issue 31): both `/sys/module/<name>/version` and
/// `/sys/kernel/mm/memory_peers/<client>/version` say this module's own
/// version, also in the drop-in build, where NVIDIA's module says the
/// driver's (`NV_VERSION_STRING`, e.g. `580.95.05`). NCCL, UCX and NVSHMEM
/// only test that those files exist; an operator who reads them learns
/// which module serves the node, and a driver version there would claim a
/// build this module is not (DKMS's version check of the drop-in is
/// handled by its override file, packaging/README.md).
pub(crate) const VERSION: &str = "0.1.0";

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

const VERSION_ENTRY: &str = "version=0.1.0\0";

#[link_section = ".modinfo"]
#[used(compiler)]
static MODINFO_VERSION: [u8; VERSION_ENTRY.len()] = modinfo_bytes(VERSION_ENTRY);

// The `.modinfo` entry and the constant must say the same thing.
const _: () = {
    let entry = VERSION_ENTRY.as_bytes();
    let version = VERSION.as_bytes();
    assert!(entry.len() == "version=".len() + version.len() + 1);
    let mut i = 0;
    while i < version.len() {
        assert!(entry["version=".len() + i] == version[i]);
        i += 1;
    }
};
