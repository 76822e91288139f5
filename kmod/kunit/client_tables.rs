// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the client tables given to the core and the clients a
//! configuration registers.

use super::{check, check_eq};
use crate::client::{ClientTable, EX_MARK_INDEX, INVALIDATE_UNMAPS};
use crate::nv_mem;
use crate::params::Config;
use crate::sys;

pub(super) fn name_of(table: &ClientTable) -> &str {
    table.name()
}

pub(super) fn check_table(table: &ClientTable, name: &str, extended: bool) {
    let ex = table.ex();
    check_eq!(name_of(table), name);
    // The name is NUL-padded to the end.
    check!(ex.client.name[name.len()..].iter().all(|&c| c == 0));
    let version = &ex.client.version;
    check_eq!(
        &version[..crate::modinfo::VERSION.len()],
        crate::modinfo::VERSION.as_bytes()
    );
    check!(version[crate::modinfo::VERSION.len()..EX_MARK_INDEX]
        .iter()
        .all(|&c| c == 0));
    let c = &ex.client;
    check!(c.acquire.is_some() && c.get_pages.is_some() && c.dma_map.is_some());
    check!(c.dma_unmap.is_some() && c.put_pages.is_some());
    check!(c.get_page_size.is_some() && c.release.is_some());
    if extended {
        check_eq!(version[EX_MARK_INDEX], 1);
        check_eq!(ex.ex_size, 152);
        check_eq!(ex.flags, INVALIDATE_UNMAPS);
        check_eq!(ex.flags, sys::PEER_MEM_INVALIDATE_UNMAPS);
    } else {
        check_eq!(version[EX_MARK_INDEX], 0);
        // What a legacy core reads as two NULL callbacks.
        check_eq!(ex.ex_size, 0);
        check_eq!(ex.flags, 0);
    }
}

pub(super) fn client_tables_per_mode() {
    check_table(&nv_mem::NV_MEM_INVALIDATING_EX, "nv_mem", true);
    check_table(&nv_mem::NV_MEM_INVALIDATING_LEGACY, "nv_mem", false);
    // A persistent client is a plain `peer_memory_client` whatever the ABI
    // (no mark, no `ex_size`/`flags`), as NVIDIA registers it.
    check_table(&nv_mem::NV_MEM_PERSISTENT, "nv_mem", false);
    check_table(&nv_mem::NV_MEM_NC, "nv_mem_nc", false);
    // The invalidating and persistent tables call different adapters.
    check!(
        nv_mem::NV_MEM_INVALIDATING_EX
            .ex()
            .client
            .acquire
            .map(|f| f as usize)
            != nv_mem::NV_MEM_PERSISTENT
                .ex()
                .client
                .acquire
                .map(|f| f as usize)
    );
}

pub(super) fn client_selection_per_params() {
    for (pd, pa) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let config = Config::from_values(pd, pa, 0);
        check!(config.is_ok());
        let Ok(config) = config else { return };
        let specs = nv_mem::clients_for(config.clients, config.abi);
        let extended = pd == 0;
        // The load message names the invalidation mode of the invalidating
        // client only.
        let text = nv_mem::describe(&config);
        check_eq!(
            text.contains("PEER_MEM_INVALIDATE_UNMAPS"),
            pa == 0 && pd == 0
        );
        check_eq!(text.contains("PeerDirect ABI"), pa == 0);
        match (&specs[0], &specs[1]) {
            (Some(first), Some(second)) => {
                check_eq!(pa, 0);
                check!(first.invalidating && !second.invalidating);
                check_table(first.table, "nv_mem", extended);
                // Only the invalidating client is extended.
                check_table(second.table, "nv_mem_nc", false);
            }
            (Some(only), None) => {
                check_eq!(pa, 1);
                check!(!only.invalidating);
                check_table(only.table, "nv_mem", false);
            }
            _ => check!(false),
        }
    }
}
