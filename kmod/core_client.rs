// SPDX-License-Identifier: GPL-2.0

//! Registration of a client table with the PeerDirect core, and the core's
//! invalidate function for the invalidating client.
//!
//! C header: `rdma/peer_mem.h` (MLNX_OFED), or `ffi/include/rdma/peer_mem.h`.

use crate::client::ClientTable;
use crate::core_generation::CoreGeneration;
use crate::sys;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use kernel::{ffi::c_void, prelude::*};

/// The core's `invalidate_peer_memory` function type.
type InvalidateFn = unsafe extern "C" fn(*mut c_void, u64) -> kernel::ffi::c_int;

/// Where the registration handle and the invalidate function of the
/// invalidating client are published for its registrations.
///
/// # Invariants
///
/// When `handle` is non-null, `invalidate` holds the non-null invalidate
/// function the core returned with that handle (stored before it with
/// release ordering), and both stay valid until `handle` is cleared, which
/// happens only after `ib_unregister_peer_memory_client` returned.
pub(crate) struct InvalidationSlot {
    handle: AtomicPtr<c_void>,
    invalidate: AtomicUsize,
    /// Whether the client's release must wait for a free callback of the
    /// same registration still inside the core's invalidate (see
    /// [`Self::release_waits_for_invalidation`]).
    release_waits: AtomicBool,
}

impl InvalidationSlot {
    const fn new() -> Self {
        Self {
            handle: AtomicPtr::new(core::ptr::null_mut()),
            invalidate: AtomicUsize::new(0),
            release_waits: AtomicBool::new(false),
        }
    }

    /// Whether release must not return while a free callback of the same
    /// registration is inside the core's invalidate: decided by the core's
    /// generation, whichever client table was registered. A core with the
    /// stop notifier (MLNX_OFED 5.4-3 and later, the 5.1-2.5.8.0.60 hotfix)
    /// finds the registration by its ticket in invalidate, waits for the
    /// registration's mapping lock, then reads the registration's pointer
    /// to the client, which its release path clears as soon as the client's
    /// release returned: an invalidation that found the ticket before the
    /// release and takes the lock after it dereferences NULL, with the
    /// plain table as with the extended one. That core calls release
    /// outside the mapping lock, so release can wait. MLNX_OFED 5.1 ..
    /// 5.4-2 read the client only while the MR is mapped: no wait needed.
    /// The legacy cores (4.0 .. 5.0) call release from inside the
    /// invalidation itself, on the callback's own task, where a wait would
    /// never end; a core this module does not know gets no wait either.
    /// Release never waits on the callback's own task in any case.
    pub(crate) fn release_waits_for_invalidation(&self) -> bool {
        self.release_waits.load(Ordering::Relaxed)
    }

    /// Makes release wait as on a core with the stop notifier, which the
    /// KUnit module's mock core does not export.
    #[allow(dead_code)] // (the KUnit module's only)
    pub(crate) fn set_release_waits_for_invalidation(&self, waits: bool) {
        self.release_waits.store(waits, Ordering::Relaxed);
    }

    /// Whether the client is registered with the core.
    pub(crate) fn is_ready(&self) -> bool {
        !self.handle.load(Ordering::Acquire).is_null()
    }

    /// Asks the core to invalidate the registration with `ticket`.
    pub(crate) fn invalidate(&self, ticket: u64) -> Result {
        let handle = self.handle.load(Ordering::Acquire);
        if handle.is_null() {
            return Err(ENODEV);
        }
        let f = self.invalidate.load(Ordering::Relaxed);
        // SAFETY: by the type invariant a non-null handle comes with a valid
        // invalidate function stored as `usize`, so the transmute gives it back.
        let f: InvalidateFn = unsafe { core::mem::transmute::<usize, InvalidateFn>(f) };
        // SAFETY: FFI call to the core's invalidate function with its handle,
        // both valid while the client is registered (type invariant).
        sys::check(unsafe { f(handle, ticket) })
    }
}

/// The slot of the invalidating `nv_mem` client.
pub(crate) static INVALIDATION: InvalidationSlot = InvalidationSlot::new();

/// A client table registered with the core; unregistered when dropped.
///
/// # Invariants
///
/// `handle` is what `ib_register_peer_memory_client(table)` returned, not
/// yet unregistered. `slot` is published for it when set.
pub(crate) struct CoreRegistration {
    handle: NonNull<c_void>,
    name: &'static str,
    slot: Option<&'static InvalidationSlot>,
}

// SAFETY: the core's handle may be used from any thread.
unsafe impl Send for CoreRegistration {}
// SAFETY: `&CoreRegistration` gives no access to the handle.
unsafe impl Sync for CoreRegistration {}

impl CoreRegistration {
    /// Registers `table`. With `slot`, as an invalidating client whose
    /// invalidate function is published there; without, as a persistent
    /// client (no invalidate function).
    pub(crate) fn register(
        table: &'static ClientTable,
        slot: Option<&'static InvalidationSlot>,
    ) -> Result<Self> {
        let mut invalidate: Option<InvalidateFn> = None;
        let out = match slot {
            Some(_) => &raw mut invalidate,
            None => core::ptr::null_mut(),
        };
        // SAFETY: FFI call; `table` is a complete client table that lives
        // for ever, `out` is null or points at `invalidate`, which has the
        // layout of a nullable C function pointer.
        let handle = unsafe { sys::ib_register_peer_memory_client(table.as_raw(), out.cast()) };
        let Some(handle) = NonNull::new(handle) else {
            // The core says only "no". The two causes seen in the field: the
            // name is taken, or (extended ABI) a legacy core (MLNX_OFED 5.0
            // or older) read `ex_size`/`flags` as function pointers.
            let legacy_hint = if table.ex().ex_size != 0 && CoreGeneration::detect().may_be_legacy()
            {
                "; or the core is MLNX_OFED 5.0 or older (legacy PeerDirect ABI): load with peerdirect_support=1"
            } else {
                ""
            };
            pr_err!(
                "the PeerDirect core refused client \"{}\": another peer-memory client named \"{}\" may be loaded; unload it first (rmmod nvidia_peermem nv_peer_mem){}\n",
                table.name(),
                table.name(),
                legacy_hint
            );
            // The load's error codes: EBUSY here, where
            // NVIDIA's module returns EINVAL. The core's NULL almost always
            // means the name is owned by another client, i.e. busy, and
            // `modprobe` then prints "Device or resource busy" instead of
            // "Invalid argument", which points at the parameters, wrongly
            // here. Nothing reads the code but people: the GPU Operator and
            // the unit only look at the exit status, NCCL and UCX at the
            // sysfs files. A parameter out of range is EINVAL (as NVIDIA's),
            // a core that gives no invalidate function EINVAL, a missing
            // core the loader's "Unknown symbol" (ENOENT).
            return Err(EBUSY);
        };
        // INVARIANT: registered just above.
        let mut this = Self {
            handle,
            name: table.name(),
            slot: None,
        };
        if let Some(slot) = slot {
            let Some(f) = invalidate else {
                pr_err!(
                    "the PeerDirect core gave no invalidate function to \"{}\"\n",
                    table.name()
                );
                return Err(EINVAL); // `this` unregisters.
            };
            slot.invalidate.store(f as usize, Ordering::Relaxed);
            slot.release_waits.store(
                CoreGeneration::detect() == CoreGeneration::StopNotifier,
                Ordering::Relaxed,
            );
            slot.handle.store(handle.as_ptr(), Ordering::Release);
            this.slot = Some(slot);
        }
        Ok(this)
    }
}

impl Drop for CoreRegistration {
    fn drop(&mut self) {
        // Blocks until every registration of this client is released.
        // SAFETY: FFI call with the handle we registered (type invariant).
        unsafe { sys::ib_unregister_peer_memory_client(self.handle.as_ptr()) };
        if let Some(slot) = self.slot {
            slot.handle.store(core::ptr::null_mut(), Ordering::Release);
            slot.invalidate.store(0, Ordering::Relaxed);
        }
        pr_info!("unregistered client \"{}\"\n", self.name);
    }
}
