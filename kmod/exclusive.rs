// SPDX-License-Identifier: GPL-2.0

//! The module refuses to load beside another peer-memory client module.
//!
//! The core offers each MR to its clients in registration order and the
//! first that takes it serves it, so two GPU peer-memory clients loaded
//! together split the work by load order, and unloading one does not hand
//! anything to the other. Where the core publishes
//! `/sys/kernel/mm/memory_peers`, that directory refuses a second client
//! named `nv_mem`; DOCA-OFED 23.10 and later on Linux 6.6 and later have
//! no such directory and no other check, so the second client would load
//! without a word. This module therefore looks for the others by module
//! name before it registers. A client loaded after this one is the
//! packaging guard's and `peermem-check doctor`'s to catch.

use crate::sys;
use kernel::prelude::*;

/// A peer-memory client module: its name, and the same NUL-terminated for C.
struct Other {
    name: &'static str,
    c_name: &'static [u8],
    who: &'static str,
}

/// The client modules this one must not load beside. NVIDIA's module and
/// the drop-in build of this project share the name `nvidia_peermem`: the
/// kernel itself refuses a second module of one name.
#[cfg(not(peermem_dropin))]
const OTHERS: [Other; 2] = [
    Other {
        name: "nvidia_peermem",
        c_name: b"nvidia_peermem\0",
        who: "NVIDIA's nvidia-peermem, or this project's drop-in build",
    },
    Other {
        name: "nv_peer_mem",
        c_name: b"nv_peer_mem\0",
        who: "the legacy nv_peer_mem",
    },
];

#[cfg(peermem_dropin)]
const OTHERS: [Other; 2] = [
    Other {
        name: "nvidia_peermem_rs",
        c_name: b"nvidia_peermem_rs\0",
        who: "this project's module under its own name",
    },
    Other {
        name: "nv_peer_mem",
        c_name: b"nv_peer_mem\0",
        who: "the legacy nv_peer_mem",
    },
];

/// Fails with `EBUSY`, and one kernel-log line naming what to unload, when
/// another peer-memory client module is loaded.
pub(crate) fn refuse_beside_others() -> Result {
    for other in &OTHERS {
        // SAFETY: FFI call with a NUL-terminated string that lives for ever;
        // the callee only reads it.
        if unsafe { sys::pm_shim_module_loaded(other.c_name.as_ptr().cast()) } {
            pr_err!(
                "{} is loaded ({}): two peer-memory clients would split GPU memory between them, and this PeerDirect core may not refuse the second; unload it first (rmmod {})\n",
                other.name,
                other.who,
                other.name
            );
            return Err(EBUSY);
        }
    }
    Ok(())
}
