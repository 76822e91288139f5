// SPDX-License-Identifier: GPL-2.0
//! The memory an RDMA run targets: GPU memory (cuMemAlloc), or page-aligned
//! host memory standing in for it (`--memory host`: the verbs side alone).

use super::cuda::{CudaError, DeviceBuffer};
use super::hostmem::HostBuffer;

pub enum Target<'c> {
    Gpu(DeviceBuffer<'c>),
    Host(HostBuffer),
}

impl Target<'_> {
    pub fn ptr(&self) -> u64 {
        match self {
            Target::Gpu(b) => b.ptr(),
            Target::Host(b) => b.ptr(),
        }
    }

    pub fn fill(&self, byte: u8) -> Result<(), CudaError> {
        match self {
            Target::Gpu(b) => b.fill(byte),
            Target::Host(b) => {
                b.fill(byte);
                Ok(())
            }
        }
    }

    /// Copies `data` in at `offset` (cuMemcpyHtoD, or a memcpy).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), CudaError> {
        match self {
            Target::Gpu(b) => b.write(offset, data),
            Target::Host(b) => {
                b.write(offset, data);
                Ok(())
            }
        }
    }

    /// The whole buffer as the CPU sees it now.
    pub fn read_all(&self, out: &mut [u8]) -> Result<(), CudaError> {
        match self {
            Target::Gpu(b) => b.read(0, out),
            Target::Host(b) => {
                out.copy_from_slice(b.bytes());
                Ok(())
            }
        }
    }
}
