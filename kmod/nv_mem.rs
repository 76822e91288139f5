// SPDX-License-Identifier: GPL-2.0

//! The clients this module registers with the PeerDirect core: `nv_mem`
//! (invalidating, in either PeerDirect ABI, or persistent) and `nv_mem_nc`
//! (persistent), each a [`ClientTable`] whose callbacks go to
//! [`Registration`], and which of them a configuration registers.

use crate::client::{ClientTable, PeerMemoryClient, TableAbi};
use crate::p2p::PciDevice;
use crate::params::{ClientSet, Config, PeerDirectAbi};
use crate::registration::{CoreRef, PinKind, Registration};
use kernel::sync::ArcBorrow;
use kernel::{bindings, prelude::*};

/// The client that pins with a free callback and invalidates through the
/// core.
pub(crate) struct Invalidating;

/// The client that pins persistently (no invalidation).
pub(crate) struct Persistent;

/// Forwards the callbacks of a client kind to [`Registration`].
macro_rules! forward_to_registration {
    ($client:ty, $kind:expr) => {
        impl PeerMemoryClient for $client {
            type Context = CoreRef;

            fn acquire(addr: u64, size: u64) -> Option<CoreRef> {
                Registration::acquire($kind, addr, size)
            }

            fn get_pages(
                context: ArcBorrow<'_, Registration>,
                addr: u64,
                size: u64,
                core_context: u64,
            ) -> Result {
                Registration::get_pages(context, addr, size, core_context)
            }

            fn dma_map(
                context: ArcBorrow<'_, Registration>,
                sg_head: &mut bindings::sg_table,
                peer: Option<PciDevice>,
            ) -> Result<u32> {
                context.dma_map(sg_head, peer)
            }

            fn dma_unmap(context: ArcBorrow<'_, Registration>, sg_head: &bindings::sg_table) {
                context.dma_unmap(sg_head)
            }

            fn put_pages(context: ArcBorrow<'_, Registration>, sg_head: &bindings::sg_table) {
                context.put_pages(sg_head)
            }

            fn page_size(context: ArcBorrow<'_, Registration>) -> u64 {
                context.page_size()
            }

            fn release(context: CoreRef) {
                Registration::release(context)
            }
        }
    };
}

forward_to_registration!(Invalidating, PinKind::Invalidating);
forward_to_registration!(Persistent, PinKind::Persistent);

/// Invalidating `nv_mem`, extended ABI (`peerdirect_support=0`).
pub(crate) static NV_MEM_INVALIDATING_EX: ClientTable =
    ClientTable::new::<Invalidating>("nv_mem", TableAbi::Extended);
/// Invalidating `nv_mem`, legacy ABI (`peerdirect_support=1`).
pub(crate) static NV_MEM_INVALIDATING_LEGACY: ClientTable =
    ClientTable::new::<Invalidating>("nv_mem", TableAbi::Plain);
/// Persistent `nv_mem` (`persistent_api_support=1`), plain in both ABIs.
pub(crate) static NV_MEM_PERSISTENT: ClientTable =
    ClientTable::new::<Persistent>("nv_mem", TableAbi::Plain);
/// Persistent `nv_mem_nc` (`persistent_api_support=0`), plain in both ABIs.
pub(crate) static NV_MEM_NC: ClientTable =
    ClientTable::new::<Persistent>("nv_mem_nc", TableAbi::Plain);

/// One client to register: its table and whether it invalidates.
pub(crate) struct ClientSpec {
    /// The table.
    pub(crate) table: &'static ClientTable,
    /// Whether it registers with an invalidate function.
    pub(crate) invalidating: bool,
}

/// The clients to register, in order, for a configuration.
pub(crate) fn clients_for(set: ClientSet, abi: PeerDirectAbi) -> [Option<ClientSpec>; 2] {
    let persistent = |table: &'static ClientTable| {
        Some(ClientSpec {
            table,
            invalidating: false,
        })
    };
    match set {
        ClientSet::PersistentOnly => [persistent(&NV_MEM_PERSISTENT), None],
        ClientSet::InvalidatingAndPersistent => [
            Some(ClientSpec {
                table: match abi {
                    PeerDirectAbi::Extended => &NV_MEM_INVALIDATING_EX,
                    PeerDirectAbi::Legacy => &NV_MEM_INVALIDATING_LEGACY,
                },
                invalidating: true,
            }),
            persistent(&NV_MEM_NC),
        ],
    }
}

/// The clients of `config` in words, for the load message: the
/// invalidation mode is named only for the client that is invalidated.
pub(crate) fn describe(config: &Config) -> &'static str {
    match (config.clients, config.abi) {
        (ClientSet::PersistentOnly, _) => "nv_mem (persistent)",
        (ClientSet::InvalidatingAndPersistent, PeerDirectAbi::Extended) => {
            "nv_mem (invalidating, extended PeerDirect ABI, PEER_MEM_INVALIDATE_UNMAPS) and nv_mem_nc (persistent)"
        }
        (ClientSet::InvalidatingAndPersistent, PeerDirectAbi::Legacy) => {
            "nv_mem (invalidating, legacy PeerDirect ABI) and nv_mem_nc (persistent)"
        }
    }
}
