// SPDX-License-Identifier: GPL-2.0
//! Safe client of `/dev/peermem_sim`, the control device of the simulated
//! GPUDirect stack (simulated NVIDIA P2P provider, simulated PeerDirect core,
//! and QEMU's edu device as the HCA).
//!
//! [`uapi`] mirrors the C header; [`device::SimDevice`] wraps each ioctl in a
//! safe method; [`pattern`] makes the deterministic byte patterns the tests
//! write and compare; [`errno`] names errno values in messages.

pub mod counters;
pub mod device;
pub mod errno;
pub mod parse;
pub mod pattern;
pub mod uapi;

pub use device::{Engine, MrInfo, MrState, ProviderConfig, SimDevice, SimError};
