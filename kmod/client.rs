// SPDX-License-Identifier: GPL-2.0

//! The `peer_memory_client` tables given to the PeerDirect core: a Rust
//! trait, `unsafe extern "C"` adapters from the C callbacks to it, and the
//! const-built tables in `#[repr(transparent)]` `Sync` statics: the
//! invalidating `nv_mem` in both ABIs, the persistent clients plain.
//!
//! As NVIDIA's nvidia-peermem, only the invalidating client is an extended
//! client (`peerdirect_support=0`: the mark in `version[15]`, `ex_size`,
//! `PEER_MEM_INVALIDATE_UNMAPS`); a persistent client (`nv_mem` at
//! `persistent_api_support=1`, `nv_mem_nc`) is a plain `peer_memory_client`
//! whatever `peerdirect_support` says. It has no free callback, so the flag
//! would change nothing it needs, and a plain table also registers with a
//! MLNX_OFED 5.0 or older core, which reads the extension words as two
//! private-data callbacks.
//!
//! C header: `rdma/peer_mem.h` (MLNX_OFED), or `ffi/include/rdma/peer_mem.h`.

use crate::foreign::Foreign;
use crate::modinfo::VERSION;
use crate::p2p::PciDevice;
use crate::sys;
use core::marker::PhantomData;
use core::mem::{offset_of, size_of};
use kernel::{
    bindings,
    ffi::{c_char, c_int, c_ulong, c_void},
    prelude::*,
};

/// `IB_PEER_MEMORY_NAME_MAX`.
const NAME_MAX: usize = 64;
/// `IB_PEER_MEMORY_VER_MAX`.
const VERSION_MAX: usize = 16;
/// The byte of `version` that announces the extended client.
pub(crate) const EX_MARK_INDEX: usize = VERSION_MAX - 1;
/// `PEER_MEM_INVALIDATE_UNMAPS`.
pub(crate) const INVALIDATE_UNMAPS: u32 = 1 << 0;

/// `struct peer_memory_client_ex`: the client and its extension. In a plain
/// table the two extension words overlay the legacy private-data callbacks
/// and stay zero (NULL).
#[repr(C)]
pub(crate) struct PeerMemoryClientEx {
    pub(crate) client: sys::peer_memory_client,
    pub(crate) ex_size: usize,
    pub(crate) flags: u32,
}

const _: () = {
    assert!(size_of::<PeerMemoryClientEx>() == size_of::<sys::peer_memory_client_ex>());
    assert!(
        offset_of!(PeerMemoryClientEx, ex_size) == offset_of!(sys::peer_memory_client_ex, ex_size)
    );
    assert!(offset_of!(PeerMemoryClientEx, flags) == offset_of!(sys::peer_memory_client_ex, flags));
    // The legacy core reads `get_context_private_data` and
    // `put_context_private_data` exactly there.
    assert!(offset_of!(PeerMemoryClientEx, ex_size) == 136);
    assert!(offset_of!(PeerMemoryClientEx, flags) == 144);
    assert!(size_of::<PeerMemoryClientEx>() == 152);
    // The version plus NUL must leave `version[15]` free for the mark.
    assert!(VERSION.len() < EX_MARK_INDEX);
};

/// What a peer-memory client does; the core calls it through [`Adapter`].
pub(crate) trait PeerMemoryClient {
    /// The context the core keeps from acquire to release.
    type Context: Foreign;

    /// "Is `[addr, addr + size)` yours?": `Some(context)` if so.
    fn acquire(addr: u64, size: u64) -> Option<Self::Context>;

    /// Pins the memory; `core_context` is the invalidation ticket.
    fn get_pages(
        context: <Self::Context as Foreign>::Borrowed<'_>,
        addr: u64,
        size: u64,
        core_context: u64,
    ) -> Result;

    /// Maps for `peer` and fills `sg_head`; returns the number of entries.
    fn dma_map(
        context: <Self::Context as Foreign>::Borrowed<'_>,
        sg_head: &mut bindings::sg_table,
        peer: Option<PciDevice>,
    ) -> Result<u32>;

    /// Unmaps (a no-op after an invalidation).
    fn dma_unmap(context: <Self::Context as Foreign>::Borrowed<'_>, sg_head: &bindings::sg_table);

    /// Unpins (a no-op after an invalidation).
    fn put_pages(context: <Self::Context as Foreign>::Borrowed<'_>, sg_head: &bindings::sg_table);

    /// The page size the core trims the SG table with.
    fn page_size(context: <Self::Context as Foreign>::Borrowed<'_>) -> u64;

    /// Undoes acquire.
    fn release(context: Self::Context);
}

/// The C callbacks of a [`PeerMemoryClient`].
pub(crate) struct Adapter<T>(PhantomData<T>);

impl<T: PeerMemoryClient> Adapter<T> {
    /// # Safety
    ///
    /// Called by the core only, with a valid `client_context` out-pointer.
    unsafe extern "C" fn acquire(
        addr: c_ulong,
        size: usize,
        _peer_mem_private_data: *mut c_void,
        _peer_mem_name: *mut c_char,
        client_context: *mut *mut c_void,
    ) -> c_int {
        if client_context.is_null() {
            return 0;
        }
        match T::acquire(addr as u64, size as u64) {
            Some(context) => {
                // SAFETY: `client_context` is a valid out-pointer (checked
                // non-null; the core passes its own variable).
                unsafe { *client_context = context.into_foreign() };
                1
            }
            None => 0,
        }
    }

    /// # Safety
    ///
    /// Called by the core only, with a `client_context` from `acquire` that
    /// was not released.
    unsafe extern "C" fn get_pages(
        addr: c_ulong,
        size: usize,
        _write: c_int,
        _force: c_int,
        _sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        core_context: u64,
    ) -> c_int {
        // SAFETY: `client_context` came from `into_foreign` in `acquire` and
        // is not released yet (function's safety requirements).
        let context = unsafe { T::Context::borrow(client_context) };
        match T::get_pages(context, addr as u64, size as u64, core_context) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by the core only: `sg_head` and `nmap` valid for the call,
    /// `client_context` from `acquire` and not released, `dma_device` a
    /// device that outlives the mapping.
    unsafe extern "C" fn dma_map(
        sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        dma_device: *mut bindings::device,
        _dmasync: c_int,
        nmap: *mut c_int,
    ) -> c_int {
        if sg_head.is_null() || nmap.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: by the function's safety requirements: `client_context`
        // came from `into_foreign` in `acquire` and is not released yet, the
        // core's device outlives the mapping, and `sg_head` (checked
        // non-null) is valid and exclusively ours for the call.
        let (context, peer, sg_head) = unsafe {
            (
                T::Context::borrow(client_context),
                PciDevice::from_dma_device(dma_device),
                &mut *sg_head,
            )
        };
        match T::dma_map(context, sg_head, peer) {
            // An SG table has at most `c_int::MAX` entries
            // (`sg::table_entries`): never a negative count.
            Ok(entries) => match c_int::try_from(entries) {
                Ok(entries) => {
                    // SAFETY: `nmap` is valid for the call (checked non-null).
                    unsafe { *nmap = entries };
                    0
                }
                Err(_) => EINVAL.to_errno(),
            },
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// As `dma_map`.
    unsafe extern "C" fn dma_unmap(
        sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        _dma_device: *mut bindings::device,
    ) -> c_int {
        if sg_head.is_null() {
            return 0;
        }
        // SAFETY: `client_context` as in `get_pages`; `sg_head` (checked
        // non-null) is valid for the call.
        let (context, sg_head) = unsafe { (T::Context::borrow(client_context), &*sg_head) };
        T::dma_unmap(context, sg_head);
        0
    }

    /// # Safety
    ///
    /// As `dma_map`.
    unsafe extern "C" fn put_pages(sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
        if sg_head.is_null() {
            return;
        }
        // SAFETY: `client_context` as in `get_pages`; `sg_head` (checked
        // non-null) is valid for the call.
        let (context, sg_head) = unsafe { (T::Context::borrow(client_context), &*sg_head) };
        T::put_pages(context, sg_head);
    }

    /// # Safety
    ///
    /// As `get_pages`.
    unsafe extern "C" fn get_page_size(client_context: *mut c_void) -> c_ulong {
        // SAFETY: as in `get_pages`.
        let context = unsafe { T::Context::borrow(client_context) };
        T::page_size(context) as c_ulong
    }

    /// # Safety
    ///
    /// Called by the core only, once, with a `client_context` from
    /// `acquire`; the core does not use it afterwards.
    unsafe extern "C" fn release(client_context: *mut c_void) {
        // SAFETY: the core hands back the ownership `acquire` gave it, once;
        // it calls nothing else with it since.
        let context = unsafe { T::Context::from_foreign(client_context) };
        T::release(context);
    }
}

/// A `peer_memory_client_ex` table, read by the core only.
#[repr(transparent)]
pub(crate) struct ClientTable(PeerMemoryClientEx);

// SAFETY: the table is immutable; its pointers are to functions and nothing
// in it is ever written after const initialisation.
unsafe impl Sync for ClientTable {}

/// Copies `s` into a NUL-padded C string buffer.
const fn c_string<const N: usize>(s: &str) -> [c_char; N] {
    let bytes = s.as_bytes();
    assert!(bytes.len() < N);
    let mut out = [0; N];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// How a table presents itself to the core.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TableAbi {
    /// `peer_memory_client_ex`: `version[15]` = 1, `ex_size`, and
    /// `PEER_MEM_INVALIDATE_UNMAPS` (MLNX_OFED 5.1 and newer).
    Extended,
    /// A plain `peer_memory_client`: no mark, `ex_size` and `flags` zero
    /// (what a legacy core reads as two NULL private-data callbacks).
    Plain,
}

impl ClientTable {
    /// The table of client `T` named `name`, laid out as `abi`.
    pub(crate) const fn new<T: PeerMemoryClient>(name: &str, abi: TableAbi) -> Self {
        let mut version = c_string::<VERSION_MAX>(VERSION);
        let (ex_size, flags) = match abi {
            TableAbi::Extended => {
                version[EX_MARK_INDEX] = 1;
                (size_of::<PeerMemoryClientEx>(), INVALIDATE_UNMAPS)
            }
            TableAbi::Plain => (0, 0),
        };
        Self(PeerMemoryClientEx {
            client: sys::peer_memory_client {
                name: c_string::<NAME_MAX>(name),
                version,
                acquire: Some(Adapter::<T>::acquire),
                get_pages: Some(Adapter::<T>::get_pages),
                dma_map: Some(Adapter::<T>::dma_map),
                dma_unmap: Some(Adapter::<T>::dma_unmap),
                put_pages: Some(Adapter::<T>::put_pages),
                get_page_size: Some(Adapter::<T>::get_page_size),
                release: Some(Adapter::<T>::release),
            },
            ex_size,
            flags,
        })
    }

    /// The table as the core takes it.
    pub(crate) fn as_raw(&'static self) -> *const sys::peer_memory_client {
        &raw const self.ex().client
    }

    /// The whole table.
    pub(crate) fn ex(&self) -> &PeerMemoryClientEx {
        &self.0
    }

    /// The client's name.
    pub(crate) fn name(&self) -> &str {
        let name = &self.0.client.name;
        let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        core::str::from_utf8(&name[..len]).unwrap_or("?")
    }
}
