// SPDX-License-Identifier: GPL-2.0

//! nvidia_peermem_rs: a GPUDirect RDMA peer-memory client in Rust.
//!
//! It registers with the PeerDirect core of MLNX_OFED/DOCA-OFED `ib_core`
//! under the names `nv_mem` (and `nv_mem_nc`) and lets RDMA devices DMA to
//! and from GPU memory pinned through the NVIDIA P2P kernel API, like
//! NVIDIA's `nvidia-peermem`. The crate root only declares the module; each
//! concern lives in its own submodule.

#[macro_use]
mod compat;

mod abi;
mod client;
mod core_client;
mod core_generation;
mod debugfs;
mod exclusive;
mod foreign;
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

#[cfg(not(peermem_dropin))]
peermem_module! {
    type: NvidiaPeermem,
    name: "nvidia_peermem_rs",
    author: "nvidia-peermem-rs developers",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)",
    license: "GPL",
}

// The drop-in build (Kbuild PEERMEM_DROPIN=1): NVIDIA's module name, so
// `modprobe nvidia-peermem`, modules-load.d entries, the GPU Operator and
// NCCL's /sys/module/nvidia_peermem/version find it unchanged.
#[cfg(peermem_dropin)]
peermem_module! {
    type: NvidiaPeermem,
    name: "nvidia_peermem",
    author: "nvidia-peermem-rs developers",
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nvidia-peermem-rs drop-in, Rust)",
    license: "GPL",
}

/// The loaded module: its clients are registered with the core.
struct NvidiaPeermem {
    // Dropped first: unregistering waits for every registration to go.
    _clients: KVec<core_client::CoreRegistration>,
    _debugfs: debugfs::Dir,
    // Then acquire's refused pins that could not be unpinned are tried
    // again.
    _stranded: registration::stranded::Stash,
}

/// Registers the clients of `config` with the core, into `clients`. On
/// failure the clients registered so far stay in `clients`, for the caller
/// to unregister once no registration is alive.
fn register_clients(
    config: &params::Config,
    clients: &mut KVec<core_client::CoreRegistration>,
) -> Result {
    for spec in nv_mem::clients_for(config.clients, config.abi)
        .into_iter()
        .flatten()
    {
        let slot = spec.invalidating.then_some(&core_client::INVALIDATION);
        let registered = core_client::CoreRegistration::register(spec.table, slot)?;
        clients.push(registered, GFP_KERNEL)?;
    }
    Ok(())
}

/// A failed load: the clients registered so far may have registrations
/// alive (MRs, a free callback running, pages left pinned until the memory
/// is freed), and the loader frees the module text when init fails,
/// whatever the module references. So no new registration starts, and the
/// clients are unregistered only once none is alive: a free callback still
/// on its way to the core's invalidate keeps a registration alive, and the
/// core frees a client's handle once unregistering it returns. The decline
/// and the count are one atomic step, and the wait is made whatever the
/// count said: an acquire counts its registration before it takes the
/// module reference, so none can start unseen. The wait is uninterruptible
/// and unbounded (an idle sleep of insmod's, which the hung-task detector
/// does not report): the module text must outlive every registration, and
/// one whose pages are left to the process that pinned them lives until
/// that process frees the memory or exits.
fn unwind_failed_load(e: Error, clients: KVec<core_client::CoreRegistration>) -> Error {
    let alive = wait::decline();
    if alive != 0 {
        pr_warn!(
            "the load failed ({:?}): waiting for {} registrations still alive (deregister their MRs; a free callback running, or pages left pinned until the process that pinned them frees the memory or exits); insmod waits uninterruptibly until then\n",
            e,
            alive
        );
    }
    wait::wait_none_alive();
    drop(clients);
    e
}

impl kernel::Module for NvidiaPeermem {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        #[cfg(peermem_test_delays)]
        pr_warn!("this is the test build (delay points test_delay, test_delay_ms): the test bed's only, never a node's module\n");
        let config = params::Config::from_params()?;
        let generation = core_generation::CoreGeneration::detect();
        generation.check(
            nv_mem::clients_for(config.clients, config.abi)
                .into_iter()
                .flatten()
                .map(|spec| spec.table),
        )?;
        exclusive::refuse_beside_others()?;
        // Before the clients: on a failure below, dropped after them.
        let stranded = registration::stranded::Stash;
        let debugfs = debugfs::Dir::create();
        let mut clients = KVec::new();
        if let Err(e) = register_clients(&config, &mut clients) {
            return Err(unwind_failed_load(e, clients));
        }
        pr_info!(
            "version {}: registered {}{}; PeerDirect core: {}\n",
            modinfo::VERSION,
            nv_mem::describe(&config),
            if config.coalesce_sg {
                ", coalescing SG entries"
            } else {
                ""
            },
            generation.describe()
        );
        Ok(Self {
            _clients: clients,
            _debugfs: debugfs,
            _stranded: stranded,
        })
    }
}
