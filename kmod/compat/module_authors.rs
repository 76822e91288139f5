// SPDX-License-Identifier: GPL-2.0

//! Compiles where `module!` takes `authors: [..]`.

use kernel::prelude::*;

struct Probe;

impl kernel::Module for Probe {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Probe)
    }
}

module! {
    type: Probe,
    name: "pm_probe",
    authors: ["probe"],
    description: "probe",
    license: "GPL",
}
