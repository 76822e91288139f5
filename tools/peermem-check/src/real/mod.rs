// SPDX-License-Identifier: GPL-2.0
//! The real backend: an NVIDIA GPU through the CUDA driver API and an RDMA
//! NIC through libibverbs, both loaded at run time.

pub mod bench;
pub mod cuda;
pub mod hostmem;
pub mod target;
pub mod validate;
pub mod verbs;
