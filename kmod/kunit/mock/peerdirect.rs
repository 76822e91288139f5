// SPDX-License-Identifier: GPL-2.0

//! The mock PeerDirect core: client registration and the invalidate
//! function.

use super::*;
use crate::sys;
use core::ptr;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
};

/// The mock core's invalidate function.
///
/// # Safety
///
/// Called by the client under test, with the handle of its registration.
unsafe extern "C" fn mock_invalidate(_reg_handle: *mut c_void, core_context: u64) -> c_int {
    let (mode, client, context) = with(|s| {
        s.calls.invalidate += 1;
        s.calls.last_ticket = core_context;
        (s.core_mode, s.core_client, s.core_context)
    });
    if client.is_null() || context.is_null() {
        return 0;
    }
    // SAFETY: the test set a registered client table and a live context.
    let client = unsafe { &*client };
    let mut sg = bindings::sg_table::default();
    match mode {
        CoreMode::Unmaps => {}
        CoreMode::CallsBack => {
            // SAFETY: calls into the client as the core does, with its context.
            unsafe {
                if let Some(f) = client.dma_unmap {
                    f(&mut sg, context, ptr::null_mut());
                }
                if let Some(f) = client.put_pages {
                    f(&mut sg, context);
                }
            }
        }
        CoreMode::ReleasesInside => {
            with(|s| s.core_context = ptr::null_mut());
            // SAFETY: as above; the core gives its context up here.
            unsafe {
                if let Some(f) = client.release {
                    f(context);
                }
            }
        }
    }
    0
}

/// # Safety
///
/// Called by the product code as the C function of the same name.
#[no_mangle]
pub(crate) unsafe extern "C" fn ib_register_peer_memory_client(
    peer_client: *const sys::peer_memory_client,
    invalidate_callback: *mut sys::invalidate_peer_memory,
) -> *mut c_void {
    if peer_client.is_null() {
        return ptr::null_mut();
    }
    if !invalidate_callback.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *invalidate_callback = Some(mock_invalidate) };
    }
    with(|s| s.registered += 1);
    // Any non-null handle: the mock never dereferences it.
    peer_client.cast_mut().cast()
}

/// # Safety
///
/// As [`ib_register_peer_memory_client`].
#[no_mangle]
pub(crate) unsafe extern "C" fn ib_unregister_peer_memory_client(_reg_handle: *mut c_void) {
    with(|s| s.registered = s.registered.saturating_sub(1));
}
