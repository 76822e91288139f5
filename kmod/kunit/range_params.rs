// SPDX-License-Identifier: GPL-2.0

//! KUnit cases of the GPU range arithmetic and the module parameters.

use super::lifecycle::K64;
use super::{check, check_eq};
use crate::params::{ClientSet, Config, PeerDirectAbi};
use crate::range::GpuRange;
use kernel::prelude::*;

pub(super) fn range_aligns_outward() {
    let r = GpuRange::new(K64 + 1, 10);
    check!(r.is_ok());
    if let Ok(r) = r {
        check_eq!(r.start(), K64);
        check_eq!(r.end(), 2 * K64);
        check_eq!(r.len(), K64);
        check_eq!(r.pages(), 1);
    }
    // Straddling a page boundary takes both pages.
    if let Ok(r) = GpuRange::new(2 * K64 - 1, 2) {
        check_eq!(r.start(), K64);
        check_eq!(r.pages(), 2);
    } else {
        check!(false);
    }
    // Already aligned stays as is.
    if let Ok(r) = GpuRange::new(4 * K64, 3 * K64) {
        check_eq!(r.start(), 4 * K64);
        check_eq!(r.len(), 3 * K64);
        check_eq!(r.pages(), 3);
    } else {
        check!(false);
    }
}

pub(super) fn range_rejects_empty_and_overflow() {
    check!(GpuRange::new(K64, 0) == Err(EINVAL));
    check!(GpuRange::new(u64::MAX - 10, 20) == Err(ERANGE));
    // The end fits, but aligning it up would wrap.
    check!(GpuRange::new(u64::MAX - 100, 50) == Err(ERANGE));
    // More pages than a page table can count.
    check!(GpuRange::new(0, (u64::from(u32::MAX) + 1) * K64) == Err(ERANGE));
    check!(GpuRange::new(0, u64::from(u32::MAX) * K64).is_ok());
}

pub(super) fn params_validate() {
    check!(
        Config::from_values(0, 1, 0)
            == Ok(Config {
                abi: PeerDirectAbi::Extended,
                clients: ClientSet::PersistentOnly,
                coalesce_sg: false,
            })
    );
    check!(
        Config::from_values(1, 0, 1)
            == Ok(Config {
                abi: PeerDirectAbi::Legacy,
                clients: ClientSet::InvalidatingAndPersistent,
                coalesce_sg: true,
            })
    );
    for bad in [2, -1, 42, i32::MIN, i32::MAX] {
        let e = Config::from_values(bad, 1, 0);
        check!(matches!(e, Err(ref e) if e.name == "peerdirect_support" && e.value == bad));
        let e = Config::from_values(0, bad, 0);
        check!(matches!(e, Err(ref e) if e.name == "persistent_api_support" && e.value == bad));
        let e = Config::from_values(0, 1, bad);
        check!(matches!(e, Err(ref e) if e.name == "coalesce_sg" && e.value == bad));
    }
}
