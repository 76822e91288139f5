// SPDX-License-Identifier: GPL-2.0

//! KUnit test module of nvidia_peermem_rs, built from the same sources as the
//! product module. Its suites run when it is loaded; it registers nothing
//! with any core.

#[macro_use]
mod compat;

mod abi;
mod client;
mod core_client;
mod core_generation;
mod foreign;
mod kunit;
mod modinfo;
mod module_ref;
mod nv_mem;
mod p2p;
mod params;
mod range;
mod registration;
mod sg;
mod stats;
mod sys;
mod test_delay;
mod wait;

use kernel::prelude::*;

peermem_module! {
    type: NvidiaPeermemKunit,
    name: "nvidia_peermem_rs_kunit",
    author: "nvidia-peermem-rs developers",
    description: "KUnit tests of nvidia_peermem_rs",
    license: "GPL",
}

/// The loaded test module: the suites run after `init` returns.
struct NvidiaPeermemKunit;

impl kernel::Module for NvidiaPeermemKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Self)
    }
}
