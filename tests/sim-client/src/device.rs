// SPDX-License-Identifier: GPL-2.0
//! Safe wrappers over the ioctls of `/dev/peermem_sim`.
//!
//! The only `unsafe` code of the crate lives here: `open(2)` and `ioctl(2)`
//! with pointers to `#[repr(C)]` structures of [`crate::uapi`], whose layouts
//! are pinned to the C header.

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::errno;
use crate::uapi::*;

/// A failed operation on the simulated stack: which one, and its errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError {
    /// The operation (`gpu_alloc`, `mr_reg`, `open`, ...).
    pub op: &'static str,
    /// Positive errno value.
    pub errno: i32,
    /// Extra context (path, bad argument), may be empty.
    pub detail: String,
}

impl SimError {
    fn new(op: &'static str, errno: i32) -> Self {
        Self {
            op,
            errno,
            detail: String::new(),
        }
    }

    fn last(op: &'static str) -> Self {
        Self::new(
            op,
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    fn invalid(op: &'static str, detail: impl Into<String>) -> Self {
        Self {
            op,
            errno: libc::EINVAL,
            detail: detail.into(),
        }
    }

    /// Symbolic errno name, e.g. `EFAULT`.
    pub fn errno_name(&self) -> String {
        errno::name(self.errno)
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.op,
            errno::name(self.errno),
            errno::describe(self.errno)
        )?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for SimError {}

/// Result of the simulated stack's operations.
pub type Result<T> = std::result::Result<T, SimError>;

/// Which engine of the simulated HCA moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// QEMU edu device DMA: real emulated PCI DMA (slow under TCG).
    Edu,
    /// CPU copy through the DMA translation (IOMMU or direct).
    Cpu,
}

impl Engine {
    fn raw(self) -> u32 {
        match self {
            Engine::Edu => PSIM_ENGINE_EDU,
            Engine::Cpu => PSIM_ENGINE_CPU,
        }
    }

    /// Parses `edu` or `cpu`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "edu" => Some(Engine::Edu),
            "cpu" => Some(Engine::Cpu),
            _ => None,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Edu => "edu",
            Engine::Cpu => "cpu",
        }
    }
}

/// A registered memory region as the core returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrInfo {
    pub id: u64,
    pub sg_entries: u64,
    /// Name of the peer-memory client that took the registration.
    pub client: String,
}

/// State of a memory region as the core sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrState {
    pub id: u64,
    /// `PSIM_MR_LIVE`, `PSIM_MR_INVALIDATED`, or another raw value.
    pub state: u32,
    pub va: u64,
    pub len: u64,
}

impl MrState {
    /// `live`, `invalidated` or `state<N>`.
    pub fn state_name(&self) -> String {
        match self.state {
            PSIM_MR_LIVE => "live".into(),
            PSIM_MR_INVALIDATED => "invalidated".into(),
            n => format!("state{n}"),
        }
    }
}

/// Provider knobs (`struct psim_provider_config`).
pub type ProviderConfig = PsimProviderConfig;

/// An open handle on `/dev/peermem_sim`. All methods take `&self`: the
/// device serializes what it must, so one handle can be shared by threads.
#[derive(Debug)]
pub struct SimDevice {
    fd: OwnedFd,
}

fn name_field(op: &'static str, name: &str) -> Result<[u8; PEERMEM_SIM_NAME_MAX]> {
    let bytes = name.as_bytes();
    if bytes.len() >= PEERMEM_SIM_NAME_MAX || bytes.contains(&0) {
        return Err(SimError::invalid(
            op,
            format!("name {name:?} must be shorter than {PEERMEM_SIM_NAME_MAX} bytes, without NUL"),
        ));
    }
    let mut field = [0u8; PEERMEM_SIM_NAME_MAX];
    field[..bytes.len()].copy_from_slice(bytes);
    Ok(field)
}

fn name_from_field(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

impl SimDevice {
    /// Opens the default control device, [`PEERMEM_SIM_DEVICE`].
    pub fn open() -> Result<Self> {
        Self::open_path(PEERMEM_SIM_DEVICE)
    }

    /// Opens the control device at `path`.
    pub fn open_path(path: &str) -> Result<Self> {
        let cpath = CString::new(path).map_err(|_| SimError::invalid("open", "NUL in path"))?;
        // SAFETY: `cpath` is a valid NUL-terminated string that outlives the
        // call; open(2) does not keep the pointer.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let mut e = SimError::last("open");
            e.detail = path.to_string();
            return Err(e);
        }
        // SAFETY: `fd` was just returned by a successful open(2) and nothing
        // else owns it.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Issues ioctl `req` with a pointer to `arg`.
    ///
    /// # Safety
    ///
    /// `req` must be one of the `PSIM_IOC_*` numbers whose argument type is
    /// `T`, and every user pointer stored inside `arg` must be valid for the
    /// access (read or write, length) that ioctl performs.
    unsafe fn ioctl<T>(&self, op: &'static str, req: u32, arg: &mut T) -> Result<()> {
        // SAFETY: the fd is open; `arg` is a live, exclusively borrowed
        // `#[repr(C)]` value of the type `req` expects (caller's contract),
        // so the kernel may read and write `size_of::<T>()` bytes of it.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                req as libc::Ioctl,
                arg as *mut T as *mut libc::c_void,
            )
        };
        if rc < 0 {
            Err(SimError::last(op))
        } else {
            Ok(())
        }
    }

    /// cudaMalloc: returns the 64 KiB aligned GPU virtual address.
    pub fn gpu_alloc(&self, size: u64) -> Result<u64> {
        let mut a = PsimGpuAlloc { size, va: 0 };
        // SAFETY: GPU_ALLOC takes a psim_gpu_alloc without user pointers.
        unsafe { self.ioctl("gpu_alloc", PSIM_IOC_GPU_ALLOC, &mut a)? };
        Ok(a.va)
    }

    /// cudaFree: fires every free callback registered on the allocation.
    pub fn gpu_free(&self, va: u64) -> Result<()> {
        let mut a = PsimGpuFree { va };
        // SAFETY: GPU_FREE takes a psim_gpu_free without user pointers.
        unsafe { self.ioctl("gpu_free", PSIM_IOC_GPU_FREE, &mut a) }
    }

    /// cudaMemcpy host to GPU.
    pub fn gpu_write(&self, va: u64, data: &[u8]) -> Result<()> {
        let mut c = PsimGpuCopy {
            va,
            len: data.len() as u64,
            user_buf: data.as_ptr() as u64,
        };
        // SAFETY: `user_buf` points at `data`, readable for `len` bytes for
        // the whole call; GPU_WRITE only reads it.
        unsafe { self.ioctl("gpu_write", PSIM_IOC_GPU_WRITE, &mut c) }
    }

    /// cudaMemcpy GPU to host.
    pub fn gpu_read(&self, va: u64, buf: &mut [u8]) -> Result<()> {
        let mut c = PsimGpuCopy {
            va,
            len: buf.len() as u64,
            user_buf: buf.as_mut_ptr() as u64,
        };
        // SAFETY: `user_buf` points at `buf`, exclusively borrowed and
        // writable for `len` bytes for the whole call.
        unsafe { self.ioctl("gpu_read", PSIM_IOC_GPU_READ, &mut c) }
    }

    /// ibv_reg_mr through the simulated PeerDirect core. `access` is a mask
    /// of `PSIM_ACCESS_*`.
    pub fn mr_reg(&self, va: u64, len: u64, access: u32) -> Result<MrInfo> {
        let mut r = PsimMrReg {
            va,
            len,
            access,
            ..Default::default()
        };
        // SAFETY: MR_REG takes a psim_mr_reg without user pointers.
        unsafe { self.ioctl("mr_reg", PSIM_IOC_MR_REG, &mut r)? };
        Ok(MrInfo {
            id: r.mr_id,
            sg_entries: r.sg_entries,
            client: name_from_field(&r.client),
        })
    }

    /// ibv_dereg_mr.
    pub fn mr_dereg(&self, mr_id: u64) -> Result<()> {
        let mut d = PsimMrDereg { mr_id };
        // SAFETY: MR_DEREG takes a psim_mr_dereg without user pointers.
        unsafe { self.ioctl("mr_dereg", PSIM_IOC_MR_DEREG, &mut d) }
    }

    /// The core's view of a memory region.
    pub fn mr_query(&self, mr_id: u64) -> Result<MrState> {
        let mut q = PsimMrQuery {
            mr_id,
            ..Default::default()
        };
        // SAFETY: MR_QUERY takes a psim_mr_query without user pointers.
        unsafe { self.ioctl("mr_query", PSIM_IOC_MR_QUERY, &mut q)? };
        Ok(MrState {
            id: mr_id,
            state: q.state,
            va: q.va,
            len: q.len,
        })
    }

    /// The HCA DMAs `data` into the MR at `offset` (RDMA WRITE landing).
    pub fn hca_write(&self, mr_id: u64, offset: u64, data: &[u8], engine: Engine) -> Result<()> {
        let mut x = PsimHcaXfer {
            mr_id,
            offset,
            len: data.len() as u64,
            user_buf: data.as_ptr() as u64,
            engine: engine.raw(),
            pad: 0,
        };
        // SAFETY: `user_buf` points at `data`, readable for `len` bytes for
        // the whole call; HCA_WRITE only reads it.
        unsafe { self.ioctl("hca_write", PSIM_IOC_HCA_WRITE, &mut x) }
    }

    /// The HCA DMAs from the MR at `offset` into `buf` (RDMA READ).
    pub fn hca_read(&self, mr_id: u64, offset: u64, buf: &mut [u8], engine: Engine) -> Result<()> {
        let mut x = PsimHcaXfer {
            mr_id,
            offset,
            len: buf.len() as u64,
            user_buf: buf.as_mut_ptr() as u64,
            engine: engine.raw(),
            pad: 0,
        };
        // SAFETY: `user_buf` points at `buf`, exclusively borrowed and
        // writable for `len` bytes for the whole call.
        unsafe { self.ioctl("hca_read", PSIM_IOC_HCA_READ, &mut x) }
    }

    /// Counters of the whole simulated stack.
    pub fn counters(&self) -> Result<PsimCounters> {
        let mut c = PsimCounters::default();
        // SAFETY: COUNTERS fills a psim_counters without user pointers.
        unsafe { self.ioctl("counters", PSIM_IOC_COUNTERS, &mut c)? };
        Ok(c)
    }

    /// Fails the `nth` (1-based) next call of `op` with `-errno`, `count`
    /// times (0 = once).
    pub fn fault(&self, op: &str, nth: u32, errno: i32, count: u32) -> Result<()> {
        let mut f = PsimFault {
            op: name_field("fault", op)?,
            nth,
            err: errno,
            count,
            pad: 0,
        };
        // SAFETY: FAULT takes a psim_fault without user pointers.
        unsafe { self.ioctl("fault", PSIM_IOC_FAULT, &mut f) }
    }

    /// Clears every injected fault.
    pub fn clear_faults(&self) -> Result<()> {
        self.fault("", 0, 0, 0)
    }

    /// Holds the next `count` passes (0 = until cleared; `ms` = 0 clears)
    /// at `point` until the point is released or `ms` is over.
    pub fn delay(&self, point: &str, ms: u32, count: u32) -> Result<()> {
        let mut d = PsimDelay {
            point: name_field("delay", point)?,
            ms,
            count,
        };
        // SAFETY: DELAY takes a psim_delay without user pointers.
        unsafe { self.ioctl("delay", PSIM_IOC_DELAY, &mut d) }
    }

    /// Lets the threads held at `point` ("" = every point) go now.
    pub fn release(&self, point: &str) -> Result<()> {
        let mut r = PsimRelease {
            point: name_field("release", point)?,
        };
        // SAFETY: RELEASE takes a psim_release without user pointers.
        unsafe { self.ioctl("release", PSIM_IOC_RELEASE, &mut r) }
    }

    /// What is still allocated, pinned, mapped or registered.
    pub fn leak_check(&self) -> Result<PsimLeakCheck> {
        let mut l = PsimLeakCheck::default();
        // SAFETY: LEAK_CHECK fills a psim_leak_check without user pointers.
        unsafe { self.ioctl("leak_check", PSIM_IOC_LEAK_CHECK, &mut l)? };
        Ok(l)
    }

    /// Sets the provider knobs for the next allocations and pins.
    pub fn provider_config(&self, cfg: &ProviderConfig) -> Result<()> {
        let mut c = *cfg;
        // SAFETY: PROVIDER_CONFIG takes a psim_provider_config without user
        // pointers.
        unsafe { self.ioctl("provider_config", PSIM_IOC_PROVIDER_CONFIG, &mut c) }
    }

    /// In-kernel phase timings; `reset` zeroes them after the copy.
    pub fn phase_times(&self, reset: bool) -> Result<PsimPhaseTimes> {
        let mut t = PsimPhaseTimes {
            reset: u32::from(reset),
            ..Default::default()
        };
        // SAFETY: PHASE_TIMES reads `reset` and fills a psim_phase_times
        // without user pointers.
        unsafe { self.ioctl("phase_times", PSIM_IOC_PHASE_TIMES, &mut t)? };
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_fields() {
        let f = name_field("fault", "get_pages").unwrap();
        assert_eq!(&f[..9], b"get_pages");
        assert!(f[9..].iter().all(|&b| b == 0));
        assert_eq!(name_from_field(&f), "get_pages");
        assert!(name_field("fault", &"x".repeat(32)).is_err());
        assert!(name_field("fault", &"x".repeat(31)).is_ok());
        assert!(name_field("fault", "a\0b").is_err());
        assert_eq!(name_from_field(&[b'a'; 32]), "a".repeat(32));
    }

    #[test]
    fn open_missing_device_is_clean_error() {
        let e = SimDevice::open_path("/nonexistent/peermem_sim").unwrap_err();
        assert_eq!(e.op, "open");
        assert_eq!(e.errno, libc::ENOENT);
        assert!(e.to_string().contains("ENOENT"), "{e}");
        assert!(e.to_string().contains("/nonexistent/peermem_sim"), "{e}");
    }

    #[test]
    fn ioctl_on_wrong_file_is_clean_error() {
        // /dev/null rejects unknown ioctls with ENOTTY: the wrapper must
        // return it as a value, not crash.
        let d = SimDevice::open_path("/dev/null").unwrap();
        let e = d.gpu_alloc(65536).unwrap_err();
        assert_eq!(e.op, "gpu_alloc");
        assert_eq!(e.errno, libc::ENOTTY);
    }

    #[test]
    fn engine_names() {
        assert_eq!(Engine::parse("edu"), Some(Engine::Edu));
        assert_eq!(Engine::parse("cpu"), Some(Engine::Cpu));
        assert_eq!(Engine::parse("gpu"), None);
        assert_eq!(Engine::Cpu.name(), "cpu");
    }
}
