// SPDX-License-Identifier: GPL-2.0
//! What the CUDA driver says about each GPU. Filled by the CUDA backend on a
//! real node, or read from `<root>/cuda.json` under a fixture root.

use serde::{Deserialize, Serialize};

/// `CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER`: writes are ordered for the
/// owning GPU, no flush needed before a local read.
pub const WRITES_ORDERING_OWNER: i32 = 100;

/// Attributes of one GPU relevant to GPUDirect RDMA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuAttrs {
    pub index: i32,
    pub name: String,
    /// `0000:03:00.0` (lower-case, as sysfs writes it).
    pub pci_bus_id: String,
    pub total_mem: u64,
    pub gpudirect_rdma_supported: Option<bool>,
    pub dma_buf_supported: Option<bool>,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING`: 0 none,
    /// 100 owner, 200 all devices.
    pub rdma_writes_ordering: Option<i32>,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` bit mask.
    pub rdma_flush_writes_options: Option<i32>,
    pub rdma_with_vmm_supported: Option<bool>,
}

/// The CUDA view of the node: GPUs, or why there is none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaView {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: Option<i32>,
    pub gpus: Vec<GpuAttrs>,
    /// Set when CUDA could not be used (missing libcuda, cuInit error...).
    pub error: Option<String>,
}

/// Human form of a writes-ordering value.
pub fn ordering_name(v: i32) -> &'static str {
    match v {
        0 => "none (flush before reading)",
        100 => "owner",
        200 => "all devices",
        _ => "unknown",
    }
}
