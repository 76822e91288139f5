// SPDX-License-Identifier: GPL-2.0

//! The PeerDirect core's generation, told by the optional symbols its
//! `ib_core` exports, and the refusal of a client table that generation
//! would take and then never use.
//!
//! The PeerDirect calls themselves say nothing about the core: a legacy
//! core (MLNX_OFED 5.0 or older) registers an extended client without a
//! word, reading its `ex_size` as a private-data callback, and from then on
//! skips that client for every memory registration. Its exports tell it
//! apart: `ib_get_peer_private_data` exists only in 4.1 .. 5.0,
//! `ib_get_peer_client` only in 4.0 .. 5.0, and
//! `ib_umem_stop_invalidation_notifier` only from 5.4-3.0.3.0 (and the
//! 5.1-2.5.8.0.60 hotfix), the first cores that honour
//! `PEER_MEM_INVALIDATE_UNMAPS`.
//!
//! C header: `ffi/shim.h` (`pm_shim_core_has_*`).

use crate::client::ClientTable;
use crate::sys;
use kernel::prelude::*;

/// Which of MLNX_OFED's optional PeerDirect symbols a core exports.
#[derive(Clone, Copy, Default)]
pub(crate) struct CoreExports {
    /// `ib_get_peer_private_data` (4.1 .. 5.0).
    pub(crate) private_data: bool,
    /// `ib_get_peer_client` (4.0 .. 5.0).
    pub(crate) peer_client: bool,
    /// `ib_umem_activate_invalidation_notifier` (4.0 on).
    pub(crate) activate: bool,
    /// `ib_umem_stop_invalidation_notifier` (5.4-3.0.3.0 on, the
    /// 5.1-2.5.8.0.60 hotfix).
    pub(crate) stop: bool,
}

/// A PeerDirect core generation, as its exports tell it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CoreGeneration {
    /// MLNX_OFED 4.0 .. 5.0: exports `ib_get_peer_client` (4.1 .. 5.0 also
    /// `ib_get_peer_private_data`). Calls release from inside the
    /// invalidation, on the free callback's task; 4.1 .. 5.0 take an
    /// extended client and never offer it an MR.
    Legacy,
    /// MLNX_OFED 5.1-0.6.6.0 .. 5.4-2.4.1.3: the activate notifier without
    /// the stop notifier or `ib_get_peer_client`. Reads an extended client
    /// as a plain one and unmaps after every invalidation itself.
    NoStopNotifier,
    /// MLNX_OFED 5.4-3.0.3.0 and later, DOCA-OFED: the stop notifier, and
    /// `PEER_MEM_INVALIDATE_UNMAPS` honoured.
    StopNotifier,
    /// None of MLNX_OFED's optional exports: a core this module does not
    /// know.
    Unknown,
}

impl CoreGeneration {
    /// The generation of the loaded core.
    pub(crate) fn detect() -> Self {
        // SAFETY: FFI calls that only compare the addresses of weak
        // references, resolved when this module was loaded.
        let exports = unsafe {
            CoreExports {
                private_data: sys::pm_shim_core_has_private_data(),
                peer_client: sys::pm_shim_core_has_peer_client(),
                activate: sys::pm_shim_core_has_activate_notifier(),
                stop: sys::pm_shim_core_has_stop_notifier(),
            }
        };
        Self::from_exports(exports)
    }

    /// The generation a core with these exports belongs to.
    pub(crate) fn from_exports(exports: CoreExports) -> Self {
        let CoreExports {
            private_data,
            peer_client,
            activate,
            stop,
        } = exports;
        if private_data || peer_client {
            Self::Legacy
        } else if stop {
            Self::StopNotifier
        } else if activate {
            Self::NoStopNotifier
        } else {
            Self::Unknown
        }
    }

    /// The generation in words, for the load line.
    // Used by the module's init only, not by the KUnit module built from
    // the same sources.
    #[allow(dead_code)]
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Legacy => "MLNX_OFED 4.0 .. 5.0 (legacy PeerDirect ABI: exports ib_get_peer_client)",
            Self::NoStopNotifier => {
                "MLNX_OFED 5.1 .. 5.4-2 (no stop notifier: the extended ABI is read as the plain one)"
            }
            Self::StopNotifier => {
                "MLNX_OFED 5.4-3 or later (stop notifier: extended PeerDirect ABI honoured)"
            }
            Self::Unknown => "unknown (none of MLNX_OFED's optional PeerDirect exports)",
        }
    }

    /// Whether a refusal of an extended client may be this core being
    /// legacy: only where the exports could not tell.
    pub(crate) fn may_be_legacy(self) -> bool {
        matches!(self, Self::Legacy | Self::Unknown)
    }

    /// Refuses client tables this core would register and then never use:
    /// an extended client on a legacy core.
    // Used by the module's init only (as `describe`).
    #[allow(dead_code)]
    pub(crate) fn check<'a>(self, tables: impl IntoIterator<Item = &'a ClientTable>) -> Result {
        if self != Self::Legacy {
            return Ok(());
        }
        for table in tables {
            if table.ex().ex_size != 0 {
                pr_err!(
                    "not registering the extended client \"{}\" with a legacy PeerDirect core (MLNX_OFED 5.0 or older: it exports ib_get_peer_client), which would take it and never use it as one: load with peerdirect_support=1\n",
                    table.name()
                );
                return Err(EINVAL);
            }
        }
        Ok(())
    }
}
