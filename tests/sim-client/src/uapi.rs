// SPDX-License-Identifier: GPL-2.0
//! Rust mirror of `tests/fixtures/include/uapi/peermem_sim.h`.
//!
//! Every structure is `#[repr(C)]` with the same fields, in the same order, as
//! the C header. Sizes and offsets are pinned by compile-time assertions below
//! and cross-checked against the C compiler by `tests/uapi_layout.rs`.

use core::mem::{offset_of, size_of};

/// Path of the control device.
pub const PEERMEM_SIM_DEVICE: &str = "/dev/peermem_sim";
/// ioctl magic ('P').
pub const PEERMEM_SIM_IOC_MAGIC: u8 = b'P';
/// Length of the fixed name fields (client, fault op, delay point), NUL included.
pub const PEERMEM_SIM_NAME_MAX: usize = 32;

/// `struct psim_gpu_alloc`: cudaMalloc.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimGpuAlloc {
    pub size: u64,
    pub va: u64,
}

/// `struct psim_gpu_free`: cudaFree.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimGpuFree {
    pub va: u64,
}

/// `struct psim_gpu_copy`: cudaMemcpy host<->GPU.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimGpuCopy {
    pub va: u64,
    pub len: u64,
    pub user_buf: u64,
}

pub const PSIM_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
pub const PSIM_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const PSIM_ACCESS_REMOTE_READ: u32 = 1 << 2;

/// `struct psim_mr_reg`: ibv_reg_mr through the PeerDirect core.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimMrReg {
    pub va: u64,
    pub len: u64,
    pub access: u32,
    pub pad: u32,
    pub mr_id: u64,
    pub sg_entries: u64,
    pub client: [u8; PEERMEM_SIM_NAME_MAX],
}

/// `struct psim_mr_dereg`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimMrDereg {
    pub mr_id: u64,
}

/// `struct psim_hca_xfer`: HCA DMA between a user buffer and an MR.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimHcaXfer {
    pub mr_id: u64,
    pub offset: u64,
    pub len: u64,
    pub user_buf: u64,
    pub engine: u32,
    pub pad: u32,
}

pub const PSIM_ENGINE_EDU: u32 = 0;
pub const PSIM_ENGINE_CPU: u32 = 1;

/// `struct psim_mr_query`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimMrQuery {
    pub mr_id: u64,
    pub state: u32,
    pub pad: u32,
    pub va: u64,
    pub len: u64,
}

pub const PSIM_MR_LIVE: u32 = 1;
pub const PSIM_MR_INVALIDATED: u32 = 2;

/// `struct psim_fault`: fail the nth next call of `op` with `-err`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimFault {
    pub op: [u8; PEERMEM_SIM_NAME_MAX],
    pub nth: u32,
    pub err: i32,
    pub count: u32,
    pub pad: u32,
}

/// `struct psim_delay`: holds threads at a named point until it is
/// released or `ms` is over.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimDelay {
    pub point: [u8; PEERMEM_SIM_NAME_MAX],
    pub ms: u32,
    pub count: u32,
}

/// `struct psim_release`: lets the threads held at a point go.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PsimRelease {
    pub point: [u8; PEERMEM_SIM_NAME_MAX],
}

/// `struct psim_counters`: counters of the whole simulated stack.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PsimCounters {
    // provider
    pub gpu_allocs_live: u64,
    pub gpu_bytes_live: u64,
    pub pages_pinned: u64,
    pub page_tables_live: u64,
    pub dma_mappings_live: u64,
    pub free_callbacks: u64,
    pub get_pages_calls: u64,
    pub put_pages_calls: u64,
    // core
    pub clients_registered: u64,
    pub mrs_live: u64,
    pub num_alloc_mrs: u64,
    pub num_dealloc_mrs: u64,
    pub num_reg_pages: u64,
    pub num_dereg_pages: u64,
    pub num_reg_bytes: u64,
    pub num_dereg_bytes: u64,
    pub num_free_callbacks: u64,
    // fault injection
    pub faults_injected: u64,
    pub delays_taken: u64,
    // the core's race windows, counted only when really open
    pub win_invalidate_unlocked: u64,
    pub win_dereg_unlocked: u64,
    pub win_put_release: u64,
    pub win_release_in_invalidation: u64,
    // cudaFree racing each phase of an MR (lock-order matrix)
    pub win_free_in_get_pages: u64,
    pub win_free_pinned: u64,
    pub win_free_in_dma_map: u64,
    pub win_free_before_activate: u64,
    pub win_free_live: u64,
    pub win_free_in_dereg: u64,
    // two operations in flight at the same time (counted by the second)
    pub win_free_reg: u64,
    pub win_free_dereg: u64,
    // cudaFree inside the client's acquire (its pin, issue 35)
    pub win_free_in_acquire: u64,
    // threads held at a delay point now
    pub delays_held: u64,
    // where the other side of a held window is (to release it then)
    pub frees_started: u64,
    pub invalidations_found: u64,
    pub free_callbacks_begun: u64,
}

/// `struct psim_leak_check`: what is left (all zero = no leak).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PsimLeakCheck {
    pub gpu_allocs_live: u64,
    pub pages_pinned: u64,
    pub page_tables_live: u64,
    pub dma_mappings_live: u64,
    pub mrs_live: u64,
}

/// `struct psim_provider_config`: provider knobs.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsimProviderConfig {
    pub page_size_type: u32,
    pub page_table_version: u32,
    pub dma_mapping_version: u32,
    pub scale_alias_pages: u32,
    pub persistent_supported: u32,
    /// 1: backing in physically contiguous blocks of up to 4 MiB, handed
    /// out in order (consecutive GPU pages DMA-contiguous without an
    /// IOMMU); 0: one 64 KiB allocation per GPU page.
    pub contiguous_backing: u32,
}

impl Default for PsimProviderConfig {
    /// The fixture's defaults: 64 KiB pages, current versions, no aliasing,
    /// persistent calls supported, one allocation per GPU page.
    fn default() -> Self {
        Self {
            page_size_type: 1,
            page_table_version: 0,
            dma_mapping_version: 0,
            scale_alias_pages: 0,
            persistent_supported: 1,
            contiguous_backing: 0,
        }
    }
}

pub const PSIM_PHASE_ACQUIRE: usize = 0;
pub const PSIM_PHASE_GET_PAGES: usize = 1;
pub const PSIM_PHASE_DMA_MAP: usize = 2;
pub const PSIM_PHASE_GET_PAGE_SIZE: usize = 3;
pub const PSIM_PHASE_DMA_UNMAP: usize = 4;
pub const PSIM_PHASE_PUT_PAGES: usize = 5;
pub const PSIM_PHASE_RELEASE: usize = 6;
pub const PSIM_PHASE_INVALIDATE: usize = 7;
pub const PSIM_PHASE_COUNT: usize = 8;

/// Names of the phases, indexed by `PSIM_PHASE_*`.
pub const PSIM_PHASE_NAMES: [&str; PSIM_PHASE_COUNT] = [
    "acquire",
    "get_pages",
    "dma_map",
    "get_page_size",
    "dma_unmap",
    "put_pages",
    "release",
    "invalidate",
];

/// `struct psim_phase_times`: in-kernel timings of the core's calls.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PsimPhaseTimes {
    pub reset: u32,
    pub pad: u32,
    pub calls: [u64; PSIM_PHASE_COUNT],
    pub total_ns: [u64; PSIM_PHASE_COUNT],
    pub last_ns: [u64; PSIM_PHASE_COUNT],
    pub max_ns: [u64; PSIM_PHASE_COUNT],
}

// ioctl number encoding of <asm-generic/ioctl.h> (x86_64).
const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    assert!(size < (1 << IOC_SIZEBITS));
    (dir << IOC_DIRSHIFT)
        | ((PEERMEM_SIM_IOC_MAGIC as u32) << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}
const fn iow<T>(nr: u32) -> u32 {
    ioc(IOC_WRITE, nr, size_of::<T>())
}
const fn ior<T>(nr: u32) -> u32 {
    ioc(IOC_READ, nr, size_of::<T>())
}
const fn iowr<T>(nr: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, nr, size_of::<T>())
}

pub const PSIM_IOC_GPU_ALLOC: u32 = iowr::<PsimGpuAlloc>(0x01);
pub const PSIM_IOC_GPU_FREE: u32 = iow::<PsimGpuFree>(0x02);
pub const PSIM_IOC_GPU_WRITE: u32 = iow::<PsimGpuCopy>(0x03);
pub const PSIM_IOC_GPU_READ: u32 = iow::<PsimGpuCopy>(0x04);
pub const PSIM_IOC_MR_REG: u32 = iowr::<PsimMrReg>(0x10);
pub const PSIM_IOC_MR_DEREG: u32 = iow::<PsimMrDereg>(0x11);
pub const PSIM_IOC_MR_QUERY: u32 = iowr::<PsimMrQuery>(0x12);
pub const PSIM_IOC_HCA_WRITE: u32 = iow::<PsimHcaXfer>(0x20);
pub const PSIM_IOC_HCA_READ: u32 = iow::<PsimHcaXfer>(0x21);
pub const PSIM_IOC_COUNTERS: u32 = ior::<PsimCounters>(0x30);
pub const PSIM_IOC_FAULT: u32 = iow::<PsimFault>(0x31);
pub const PSIM_IOC_DELAY: u32 = iow::<PsimDelay>(0x32);
pub const PSIM_IOC_LEAK_CHECK: u32 = ior::<PsimLeakCheck>(0x33);
pub const PSIM_IOC_PROVIDER_CONFIG: u32 = iow::<PsimProviderConfig>(0x34);
pub const PSIM_IOC_PHASE_TIMES: u32 = iowr::<PsimPhaseTimes>(0x35);
pub const PSIM_IOC_RELEASE: u32 = iow::<PsimRelease>(0x36);

// Layout pins: sizes and field offsets as the C header declares them.
const _: () = assert!(size_of::<PsimGpuAlloc>() == 16);
const _: () = assert!(offset_of!(PsimGpuAlloc, va) == 8);
const _: () = assert!(size_of::<PsimGpuFree>() == 8);
const _: () = assert!(size_of::<PsimGpuCopy>() == 24);
const _: () = assert!(offset_of!(PsimGpuCopy, user_buf) == 16);
const _: () = assert!(size_of::<PsimMrReg>() == 72);
const _: () = assert!(offset_of!(PsimMrReg, access) == 16);
const _: () = assert!(offset_of!(PsimMrReg, mr_id) == 24);
const _: () = assert!(offset_of!(PsimMrReg, sg_entries) == 32);
const _: () = assert!(offset_of!(PsimMrReg, client) == 40);
const _: () = assert!(size_of::<PsimMrDereg>() == 8);
const _: () = assert!(size_of::<PsimHcaXfer>() == 40);
const _: () = assert!(offset_of!(PsimHcaXfer, user_buf) == 24);
const _: () = assert!(offset_of!(PsimHcaXfer, engine) == 32);
const _: () = assert!(size_of::<PsimMrQuery>() == 32);
const _: () = assert!(offset_of!(PsimMrQuery, state) == 8);
const _: () = assert!(offset_of!(PsimMrQuery, va) == 16);
const _: () = assert!(offset_of!(PsimMrQuery, len) == 24);
const _: () = assert!(size_of::<PsimFault>() == 48);
const _: () = assert!(offset_of!(PsimFault, nth) == 32);
const _: () = assert!(offset_of!(PsimFault, err) == 36);
const _: () = assert!(offset_of!(PsimFault, count) == 40);
const _: () = assert!(size_of::<PsimDelay>() == 40);
const _: () = assert!(offset_of!(PsimDelay, ms) == 32);
const _: () = assert!(offset_of!(PsimDelay, count) == 36);
const _: () = assert!(size_of::<PsimRelease>() == 32);
const _: () = assert!(size_of::<PsimCounters>() == 288);
const _: () = assert!(offset_of!(PsimCounters, clients_registered) == 64);
const _: () = assert!(offset_of!(PsimCounters, faults_injected) == 136);
const _: () = assert!(offset_of!(PsimCounters, win_free_in_get_pages) == 184);
const _: () = assert!(offset_of!(PsimCounters, win_free_reg) == 232);
const _: () = assert!(offset_of!(PsimCounters, win_free_in_acquire) == 248);
const _: () = assert!(offset_of!(PsimCounters, delays_held) == 256);
const _: () = assert!(offset_of!(PsimCounters, invalidations_found) == 272);
const _: () = assert!(size_of::<PsimLeakCheck>() == 40);
const _: () = assert!(size_of::<PsimProviderConfig>() == 24);
const _: () = assert!(offset_of!(PsimProviderConfig, persistent_supported) == 16);
const _: () = assert!(offset_of!(PsimProviderConfig, contiguous_backing) == 20);
const _: () = assert!(size_of::<PsimPhaseTimes>() == 264);
const _: () = assert!(offset_of!(PsimPhaseTimes, calls) == 8);
const _: () = assert!(offset_of!(PsimPhaseTimes, total_ns) == 72);
const _: () = assert!(offset_of!(PsimPhaseTimes, last_ns) == 136);
const _: () = assert!(offset_of!(PsimPhaseTimes, max_ns) == 200);
