// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the SG table construction.

use super::lifecycle::K64;
use super::{check, check_eq};
use crate::sg::{SgPlan, SgTable};
use crate::sys;
use kernel::bindings;

pub(super) fn collect_plan(addresses: &[u64], coalesce: bool, out: &mut [(u64, u64)]) -> usize {
    let mut n = 0;
    for entry in SgPlan::new(addresses, K64, coalesce) {
        if n < out.len() {
            out[n] = entry;
        }
        n += 1;
    }
    n
}

pub(super) fn sg_one_entry_per_page() {
    let contiguous = [0x10_0000, 0x11_0000, 0x12_0000, 0x13_0000];
    let mut out = [(0, 0); 8];
    check_eq!(collect_plan(&contiguous, false, &mut out), 4);
    for (i, &(addr, len)) in out[..4].iter().enumerate() {
        check_eq!(addr, contiguous[i]);
        check_eq!(len, K64);
    }
    // One page: one entry.
    check_eq!(collect_plan(&contiguous[..1], false, &mut out), 1);
    check_eq!(out[0], (0x10_0000, K64));
    check_eq!(collect_plan(&[], false, &mut out), 0);
}

pub(super) fn sg_coalescing() {
    let mut out = [(0, 0); 8];
    let contiguous = [0x10_0000, 0x11_0000, 0x12_0000, 0x13_0000];
    check_eq!(collect_plan(&contiguous, true, &mut out), 1);
    check_eq!(out[0], (0x10_0000, 4 * K64));
    // Runs break at every gap and at a step backwards.
    let runs = [
        0x10_0000, 0x11_0000, 0x30_0000, 0x31_0000, 0x32_0000, 0x20_0000,
    ];
    check_eq!(collect_plan(&runs, true, &mut out), 3);
    check_eq!(out[0], (0x10_0000, 2 * K64));
    check_eq!(out[1], (0x30_0000, 3 * K64));
    check_eq!(out[2], (0x20_0000, K64));
    // Scattered pages do not coalesce.
    let scattered = [0x10_0000, 0x12_0000, 0x14_0000];
    check_eq!(collect_plan(&scattered, true, &mut out), 3);
    // An address at the top of the space does not wrap into the next.
    let top = [u64::MAX - K64 + 1, 0];
    check_eq!(collect_plan(&top, true, &mut out), 2);
}

pub(super) fn sg_table_build() {
    let addresses = [0x10_0000u64, 0x11_0000, 0x40_0000];
    for (coalesce, want) in [(false, 3u32), (true, 2u32)] {
        let table = SgTable::build(SgPlan::new(&addresses, K64, coalesce));
        check!(table.is_ok());
        let Ok(table) = table else { return };
        check_eq!(table.entries(), want);
        let raw = table.raw();
        check_eq!(raw.nents, want);
        check!(table.is(&raw));
        let mut seen = [(0u64, 0u32); 3];
        let mut n = 0;
        let mut sg = raw.sgl;
        while n < raw.nents as usize && !sg.is_null() {
            if n < seen.len() {
                // SAFETY: an entry of the table just built.
                seen[n] = unsafe { (sys::pm_shim_sg_dma_address(sg), sys::pm_shim_sg_dma_len(sg)) };
            }
            // SAFETY: as above.
            sg = unsafe { bindings::sg_next(sg) };
            n += 1;
        }
        check_eq!(n, want as usize);
        if coalesce {
            check_eq!(seen[0], (0x10_0000, 2 * K64 as u32));
            check_eq!(seen[1], (0x40_0000, K64 as u32));
        } else {
            check_eq!(seen[0], (0x10_0000, K64 as u32));
            check_eq!(seen[2], (0x40_0000, K64 as u32));
        }
    }
    check!(SgTable::build(SgPlan::new(&[], K64, false)).is_err());
}
