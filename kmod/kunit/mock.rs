// SPDX-License-Identifier: GPL-2.0

//! A mock NVIDIA P2P provider and PeerDirect core, linked into the KUnit
//! test module only: it defines the `nvidia_p2p_*` and
//! `ib_*register_peer_memory_client` symbols the product code calls, so the
//! test module needs no other module, and it lets tests drive every path
//! (page sizes, versions, failures, free callbacks, invalidation from the
//! core, release during an invalidation).
//!
//! KUnit runs the cases of a suite one after the other on one thread, and
//! the mock is only touched from there; the state is never borrowed across
//! a call into the client (callbacks run after the borrow ends).

use crate::sys;
use core::cell::UnsafeCell;
use core::ptr;
use kernel::{
    ffi::{c_int, c_void},
    prelude::*,
};

mod peerdirect;
mod provider;

/// Start of the mock GPU's virtual addresses.
pub(crate) const GPU_VA: u64 = 0x0000_9000_0000_0000;
/// DMA address of the first GPU page.
pub(crate) const DMA_BASE: u64 = 0x10_0000_0000;

/// How the mock core behaves when the client invalidates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CoreMode {
    /// Marks the MR invalidated, calls nothing (PEER_MEM_INVALIDATE_UNMAPS).
    Unmaps,
    /// Calls dma_unmap and put_pages from inside (legacy/mofed51).
    CallsBack,
    /// Calls release from inside: a deregistration that ran concurrently
    /// and finished while the client's free callback was still running.
    ReleasesInside,
}

type FreeCb = unsafe extern "C" fn(*mut c_void);

/// Bytes of a version-2 page table past the header's struct: none with a
/// header that declares `flags` (580 on, ffi/include), 8 with an older
/// NVIDIA header (NVIDIA_SRC), whose struct ends with `gpu_uuid`.
const PT_TAIL: usize = 40 - core::mem::size_of::<sys::nvidia_p2p_page_table>();

/// A page table handed out. `pt` first: its address is the pin's address.
/// `pt` and `pt_tail` are the 40 bytes a driver allocates for a version-2
/// page table, whichever header this module was built with, so the flags
/// word at `PAGE_TABLE_FLAGS_OFFSET` is inside the pin.
#[repr(C)]
struct MockPin {
    pt: sys::nvidia_p2p_page_table,
    pt_tail: [u8; PT_TAIL],
    pages: KVec<sys::nvidia_p2p_page>,
    page_ptrs: KVec<*mut sys::nvidia_p2p_page>,
    va: u64,
    persistent: bool,
    dead: bool,
    free_cb: Option<FreeCb>,
    data: *mut c_void,
}

/// A DMA mapping handed out. `m` first.
#[repr(C)]
struct MockMap {
    m: sys::nvidia_p2p_dma_mapping,
    addresses: KVec<u64>,
    pin: *mut MockPin,
}

/// Calls into the mock, for the tests' checks.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Calls {
    pub(crate) get_pages: u32,
    pub(crate) put_pages: u32,
    pub(crate) dma_map: u32,
    pub(crate) dma_unmap: u32,
    pub(crate) free_page_table: u32,
    pub(crate) free_dma_mapping: u32,
    pub(crate) invalidate: u32,
    pub(crate) last_ticket: u64,
}

/// Which provider call to fail once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FailOp {
    /// `nvidia_p2p_get_pages[_persistent]`, counting from 1.
    GetPages(u32),
    /// `nvidia_p2p_put_pages[_persistent]`, the next one.
    PutPages,
    /// `nvidia_p2p_dma_map_pages`, the next one.
    DmaMap,
}

struct State {
    gpu_len: u64,
    page_size_type: u32,
    pt_version: u32,
    pt_flags: u32,
    map_version: u32,
    dma_stride: u64,
    fail: Option<(FailOp, c_int)>,
    get_pages_seen: u32,
    fire_on_pin: bool,
    null_page_table: bool,
    persistent_supported: bool,
    pins: KVec<Option<KBox<MockPin>>>,
    maps: KVec<Option<KBox<MockMap>>>,
    calls: Calls,
    core_mode: CoreMode,
    core_client: *const sys::peer_memory_client,
    core_context: *mut c_void,
    registered: u32,
}

impl State {
    const fn new() -> Self {
        Self {
            gpu_len: 0,
            page_size_type: sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB,
            pt_version: sys::NVIDIA_P2P_PAGE_TABLE_VERSION,
            pt_flags: 0,
            map_version: sys::NVIDIA_P2P_DMA_MAPPING_VERSION,
            dma_stride: 0x1_0000,
            fail: None,
            get_pages_seen: 0,
            fire_on_pin: false,
            null_page_table: false,
            persistent_supported: true,
            pins: KVec::new(),
            maps: KVec::new(),
            calls: Calls {
                get_pages: 0,
                put_pages: 0,
                dma_map: 0,
                dma_unmap: 0,
                free_page_table: 0,
                free_dma_mapping: 0,
                invalidate: 0,
                last_ticket: 0,
            },
            core_mode: CoreMode::Unmaps,
            core_client: ptr::null(),
            core_context: ptr::null_mut(),
            registered: 0,
        }
    }

    fn fail(&mut self, op: FailOp) -> Option<c_int> {
        match self.fail {
            Some((f, e)) if f == op => {
                self.fail = None;
                Some(e)
            }
            _ => None,
        }
    }

    fn find_pin(&mut self, pt: *mut sys::nvidia_p2p_page_table) -> Option<&mut KBox<MockPin>> {
        self.pins.iter_mut().flatten().find(|p| ptr::eq(&p.pt, pt))
    }

    fn live_pins(&self) -> usize {
        self.pins.iter().flatten().count()
    }

    fn live_maps(&self) -> usize {
        self.maps.iter().flatten().count()
    }
}

/// The mock's state.
///
/// # Invariants
///
/// Only the KUnit test thread touches it, one borrow at a time ([`with`]).
struct Mock(UnsafeCell<State>);

// SAFETY: one thread only (type invariant).
unsafe impl Sync for Mock {}

static MOCK: Mock = Mock(UnsafeCell::new(State::new()));

/// Runs `f` on the state; `f` must not call into the client.
fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    // SAFETY: one thread, and `f` never re-enters (type invariant).
    f(unsafe { &mut *MOCK.0.get() })
}

/// Resets the mock: a GPU allocation of `gpu_len` bytes at [`GPU_VA`],
/// default knobs, nothing live (what is live is freed).
pub(crate) fn reset(gpu_len: u64) {
    let old = with(|s| core::mem::replace(s, State::new()));
    with(|s| {
        s.gpu_len = gpu_len;
        // Registrations with the core outlive resets.
        s.registered = old.registered;
    });
    drop(old);
}

/// Sets the flags word of the page tables handed out.
pub(crate) fn set_page_table_flags(flags: u32) {
    with(|s| s.pt_flags = flags);
}

/// Sets the page size type, page table and mapping versions.
pub(crate) fn set_format(page_size_type: u32, pt_version: u32, map_version: u32) {
    with(|s| {
        s.page_size_type = page_size_type;
        s.pt_version = pt_version;
        s.map_version = map_version;
    });
}

/// DMA addresses of consecutive GPU pages are `stride` apart.
pub(crate) fn set_dma_stride(stride: u64) {
    with(|s| s.dma_stride = stride);
}

/// Fails `op` once with `-errno`.
pub(crate) fn fail_once(op: FailOp, errno: c_int) {
    with(|s| {
        s.fail = Some((op, errno));
        s.get_pages_seen = 0;
    });
}

/// Fires the free callback right inside the next invalidating pins.
pub(crate) fn set_fire_on_pin(on: bool) {
    with(|s| s.fire_on_pin = on);
}

/// A broken driver: get_pages pins (its free callback armed, the data
/// kept) and returns 0, but hands out a NULL page table.
pub(crate) fn set_null_page_table(on: bool) {
    with(|s| s.null_page_table = on);
}

/// Whether the persistent calls work.
pub(crate) fn set_persistent_supported(on: bool) {
    with(|s| s.persistent_supported = on);
}

/// The core's behaviour on invalidation, and the client and context it
/// calls back with.
pub(crate) fn set_core(
    mode: CoreMode,
    client: *const sys::peer_memory_client,
    context: *mut c_void,
) {
    with(|s| {
        s.core_mode = mode;
        s.core_client = client;
        s.core_context = context;
    });
}

/// Calls so far.
pub(crate) fn calls() -> Calls {
    with(|s| s.calls)
}

/// Live page tables and mappings (not put/unmapped nor freed).
pub(crate) fn live() -> (usize, usize) {
    with(|s| (s.live_pins(), s.live_maps()))
}

/// Clients registered with the mock core.
pub(crate) fn registered_clients() -> u32 {
    with(|s| s.registered)
}

/// cudaFree: kills every invalidating pin and calls its free callback.
/// Returns how many callbacks ran.
pub(crate) fn cuda_free() -> u32 {
    let mut fired = 0;
    loop {
        let next = with(|s| {
            s.pins
                .iter_mut()
                .flatten()
                .find(|p| !p.persistent && !p.dead)
                .map(|p| {
                    p.dead = true;
                    (p.free_cb, p.data)
                })
        });
        match next {
            Some((Some(cb), data)) => {
                // SAFETY: the callback and data the client gave with the pin.
                unsafe { cb(data) };
                fired += 1;
            }
            Some((None, _)) => {}
            None => return fired,
        }
    }
}
