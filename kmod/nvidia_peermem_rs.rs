// SPDX-License-Identifier: GPL-2.0

//! nvidia_peermem_rs: a GPUDirect RDMA peer-memory client in Rust.
//!
//! It registers with the PeerDirect core of MLNX_OFED/DOCA-OFED `ib_core`
//! under the names `nv_mem` (and `nv_mem_nc`) and lets RDMA devices DMA to
//! and from GPU memory pinned through the NVIDIA P2P kernel API, like
//! NVIDIA's `nvidia-peermem`. The crate root only declares the module; each
//! concern lives in its own submodule.

mod abi;
mod modinfo;
mod params;
mod range;
mod sys;

use kernel::prelude::*;

module! {
    type: NvidiaPeermem,
    name: "nvidia_peermem_rs",
    author: "nvidia-peermem-rs developers",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)",
    license: "GPL",
}

/// The loaded module.
struct NvidiaPeermem {
    _config: params::Config,
}

impl kernel::Module for NvidiaPeermem {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let config = params::Config::from_params()?;
        pr_info!("version {} loaded ({:?})\n", modinfo::VERSION, config);
        Ok(Self { _config: config })
    }
}

impl Drop for NvidiaPeermem {
    fn drop(&mut self) {
        pr_info!("unloaded\n");
    }
}
