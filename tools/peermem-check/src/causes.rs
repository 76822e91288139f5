// SPDX-License-Identifier: GPL-2.0
//! Every failure mapped to its likely cause and fix, by operation and errno.
//! One table for the real stack (verbs, CUDA) and the simulated one.

use peermem_sim::errno;

/// Which operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Without feature `real` (the VM's static build) only the simulated stack's
// operations are constructed; the table keeps every row.
#[cfg_attr(not(feature = "real"), allow(dead_code))]
pub enum Op {
    /// Loading libcuda.so.1.
    LoadCuda,
    /// Loading libibverbs.so.1.
    LoadVerbs,
    /// Listing RDMA devices.
    DeviceList,
    OpenDevice,
    AllocPd,
    /// ibv_reg_mr on host memory.
    RegHostMr,
    /// ibv_reg_mr on GPU memory (peer-memory client path).
    RegGpuMr,
    /// ibv_reg_dmabuf_mr on a GPU dma-buf.
    RegDmabufMr,
    /// cuMemGetHandleForAddressRange.
    ExportDmabuf,
    CreateCq,
    CreateQp,
    ModifyQp,
    PostSend,
    /// A work completion with an error status.
    Completion,
    /// The device went away or failed during the run (a fatal async event,
    /// or its uverbs device unregistered).
    DeviceGone,
    /// Opening /dev/peermem_sim.
    SimOpen,
    SimGpuAlloc,
    SimMrReg,
    SimHcaWrite,
    SimHcaRead,
    SimGpuCopy,
    SimMrDereg,
    SimGpuFree,
}

/// A likely cause and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub cause: String,
    pub fix: String,
}

fn c(cause: &str, fix: &str) -> Cause {
    Cause {
        cause: cause.to_string(),
        fix: fix.to_string(),
    }
}

/// The likely cause of `op` failing with `err` (positive errno; 0 if none).
pub fn explain(op: Op, err: i32) -> Cause {
    use Op::*;
    match (op, err) {
        (LoadCuda, _) => c(
            "libcuda.so.1 could not be loaded: the NVIDIA driver's user-space library is not installed or not on the loader path",
            "install the NVIDIA driver (its libcuda.so.1), or add its directory to LD_LIBRARY_PATH",
        ),
        (LoadVerbs, _) => c(
            "libibverbs.so.1 could not be loaded: rdma-core's user-space verbs library is not installed",
            "install rdma-core / libibverbs1 (MLNX_OFED and DOCA-OFED ship it)",
        ),
        (DeviceList, libc::ENOSYS) | (DeviceList, 0) | (DeviceList, libc::ENODEV) | (DeviceList, libc::ENOENT) => c(
            "libibverbs found no RDMA device: there is no RDMA NIC, or its kernel driver (mlx5_ib, ib_uverbs) is not loaded",
            "GPUDirect RDMA needs an RDMA NIC: check lspci for a ConnectX and modprobe mlx5_ib ib_uverbs",
        ),
        (DeviceList, _) | (OpenDevice, _) => c(
            "the RDMA device could not be opened (permissions on /dev/infiniband/uverbs*, or the driver is unhealthy)",
            "run as root or check /dev/infiniband permissions; see dmesg for mlx5 errors",
        ),
        (AllocPd, _) | (CreateCq, _) | (CreateQp, _) => c(
            "the RDMA device refused a basic resource (out of resources or a broken provider library)",
            "check dmesg and ulimit -l (locked memory)",
        ),
        (RegHostMr, libc::ENOMEM) | (RegHostMr, libc::EPERM) => c(
            "host memory could not be pinned: the locked-memory limit is too low",
            "raise it: ulimit -l unlimited (or memlock in /etc/security/limits.conf)",
        ),
        (RegHostMr, _) => c(
            "host memory could not be registered",
            "check ulimit -l and dmesg",
        ),
        (RegGpuMr, libc::EFAULT) => c(
            "ibv_reg_mr on GPU memory failed with EFAULT: no peer-memory client claimed the range, so ib_core tried to pin it as host memory; the peer-memory client (nvidia_peermem_rs or nvidia_peermem) is not loaded, or ib_core lacks PeerDirect",
            "modprobe nvidia_peermem_rs; run peermem-check doctor; or use the dma-buf path (--path dmabuf)",
        ),
        (RegGpuMr, libc::EINVAL) => c(
            "the peer-memory client refused the range (not 64 KiB GPU pages, a page-table version it does not support, or MIG/vGPU without persistent pages)",
            "check dmesg for the client's message; with MIG/vGPU load it with persistent_api_support=0",
        ),
        (RegGpuMr, libc::ENOMEM) | (RegDmabufMr, libc::ENOMEM) => c(
            "pinning GPU memory failed for lack of space: BAR1 is exhausted, or the locked-memory limit is hit",
            "register less at once, enable a large BAR1 (resizable BAR), raise ulimit -l",
        ),
        (RegGpuMr, libc::EOPNOTSUPP) | (RegGpuMr, errno::ENOTSUPP) => c(
            "the NVIDIA driver does not support pinning this memory for a peer device (e.g. a consumer GPU or unsupported memory type)",
            "use a data-center GPU and cuMemAlloc memory (not cudaMallocAsync pools)",
        ),
        (RegGpuMr, _) => c(
            "ibv_reg_mr on GPU memory failed",
            "run peermem-check doctor and check dmesg for the peer-memory client's message",
        ),
        (RegDmabufMr, libc::EOPNOTSUPP) | (RegDmabufMr, libc::ENOSYS) | (RegDmabufMr, libc::EPROTONOSUPPORT) => c(
            "the RDMA driver or kernel does not support dma-buf registration (needs kernel 5.12+, rdma-core 34+, a mlx5 driver with dma-buf)",
            "use the peer-memory path (--path peermem) or update the kernel/OFED",
        ),
        (RegDmabufMr, _) => c(
            "ibv_reg_dmabuf_mr failed",
            "check dmesg; dma-buf needs the open NVIDIA kernel modules and kernel 5.12+",
        ),
        (ExportDmabuf, _) => c(
            "cuMemGetHandleForAddressRange could not export a dma-buf: it needs the open NVIDIA kernel modules (R515+), CUDA 11.7+ and a 5.12+ kernel",
            "install the open kernel modules (nvidia-open) or use the peer-memory path",
        ),
        (ModifyQp, _) => c(
            "the loopback queue pair could not be connected: the port is down or, on RoCE, no usable GID (no IP address on the netdev)",
            "check ibv_devinfo (PORT_ACTIVE); on RoCE give the interface an IP address or pass --gid-index",
        ),
        (PostSend, _) => c(
            "the RDMA work request was refused (queue full or bad parameters)",
            "report it with the JSON output",
        ),
        (Completion, _) => c(
            "the RDMA transfer completed with an error: the NIC could not access the memory (a remote access error on GPU memory means the peer mapping is wrong or was invalidated)",
            "run peermem-check doctor (IOMMU, ACS, PCIe path) and check dmesg",
        ),
        (DeviceGone, _) => c(
            "the RDMA device was removed or failed during the run (rdma link delete, driver unbind or reload, hot unplug, or a fatal device error): nothing after this point was validated",
            "check dmesg for the device's removal or error, bring it back (ibv_devices, ibv_devinfo) and run validate again",
        ),
        (SimOpen, libc::ENOENT) => c(
            "/dev/peermem_sim does not exist: the simulated stack is not loaded",
            "load the fixtures (insmod nvidia_p2p_sim.ko peerdirect_sim.ko) before running --backend sim",
        ),
        (SimOpen, _) => c(
            "/dev/peermem_sim could not be opened",
            "run as root inside the test VM",
        ),
        (SimMrReg, libc::EFAULT) => c(
            "no peer-memory client claimed the simulated GPU range (the core fell back to host pinning and failed): nvidia_peermem_rs is not loaded or did not register",
            "insmod nvidia_peermem_rs.ko; check dmesg",
        ),
        (SimMrReg, libc::EINVAL) => c(
            "the peer-memory client or the core refused the range (bad alignment, length, page size or struct version)",
            "check dmesg for the client's message",
        ),
        (SimMrReg, _) => c(
            "the simulated ibv_reg_mr failed",
            "check dmesg for the client's message",
        ),
        (SimHcaWrite, _) | (SimHcaRead, _) => c(
            "the simulated HCA's DMA failed: the DMA addresses the client mapped are wrong, unmapped or faulted in the IOMMU, or the MR was invalidated",
            "check dmesg for DMAR/IOMMU faults and the client's dma_map",
        ),
        (SimGpuAlloc, libc::ENOMEM) => c(
            "the simulated GPU is out of memory",
            "use a smaller --size",
        ),
        (SimGpuAlloc, _) | (SimGpuCopy, _) | (SimGpuFree, _) => c(
            "the simulated GPU driver refused the operation",
            "check the arguments and dmesg",
        ),
        (SimMrDereg, _) => c(
            "deregistration failed: the MR may leak",
            "check dmesg; simtest leak-check shows what is left",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efault_on_gpu_mr_means_no_client() {
        let c = explain(Op::RegGpuMr, libc::EFAULT);
        assert!(c.cause.contains("no peer-memory client"), "{}", c.cause);
        assert!(c.fix.contains("modprobe nvidia_peermem_rs"));
        let s = explain(Op::SimMrReg, libc::EFAULT);
        assert!(s.cause.contains("no peer-memory client"));
    }

    #[test]
    fn no_device_is_explained() {
        for e in [0, libc::ENOSYS, libc::ENODEV, libc::ENOENT] {
            assert!(explain(Op::DeviceList, e).cause.contains("no RDMA device"));
        }
        assert!(explain(Op::LoadVerbs, 0).cause.contains("libibverbs.so.1"));
        assert!(explain(Op::LoadCuda, 0).cause.contains("libcuda.so.1"));
        assert!(explain(Op::SimOpen, libc::ENOENT)
            .cause
            .contains("not loaded"));
    }

    #[test]
    fn every_op_has_text() {
        use Op::*;
        for op in [
            LoadCuda,
            LoadVerbs,
            DeviceList,
            OpenDevice,
            AllocPd,
            RegHostMr,
            RegGpuMr,
            RegDmabufMr,
            ExportDmabuf,
            CreateCq,
            CreateQp,
            ModifyQp,
            PostSend,
            Completion,
            DeviceGone,
            SimOpen,
            SimGpuAlloc,
            SimMrReg,
            SimHcaWrite,
            SimHcaRead,
            SimGpuCopy,
            SimMrDereg,
            SimGpuFree,
        ] {
            for e in [0, libc::EFAULT, libc::EINVAL, libc::ENOMEM, libc::EIO] {
                let c = explain(op, e);
                assert!(!c.cause.is_empty() && !c.fix.is_empty(), "{op:?} {e}");
            }
        }
    }
}
