// SPDX-License-Identifier: GPL-2.0
//! The CUDA driver API through cudarc's `sys` layer (libcuda loaded at run
//! time). Only this module touches CUDA. cudarc panics when the library or
//! a symbol is missing, so every entry point first checks the library
//! ([`present`]) and each optional symbol ([`has_symbol`]).
//!
//! Memory comes from `cuMemAlloc` (stream-ordered pool memory does not
//! support GPUDirect RDMA) with `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set, as
//! gdrcopy does.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;

use cudarc::driver::sys;
use sys::{CUdevice_attribute, CUresult};

use crate::gpuinfo::{CudaView, GpuAttrs};

/// A CUDA call that failed.
#[derive(Debug, Clone)]
pub struct CudaError {
    pub call: &'static str,
    /// `CUDA_ERROR_*` name, or a loader message.
    pub name: String,
    pub text: String,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.call, self.name, self.text)
    }
}

pub type Result<T> = std::result::Result<T, CudaError>;

/// True when libcuda.so.1 (or libcuda.so) can be loaded.
pub fn present() -> bool {
    // SAFETY: only tries to dlopen the candidate names; no CUDA call.
    unsafe { sys::is_culib_present() }
}

/// True when the loaded libcuda exports `name`.
pub fn has_symbol(name: &str) -> bool {
    if !present() {
        return false;
    }
    // The driver library cudarc loads, opened again (dlopen hands back the
    // same handle) to look the symbol up: cudarc 0.19.0, the last release on
    // libloading 0.8 (Rust 1.85, Debian 13's), does not expose its handle.
    ["libcuda.so.1", "libcuda.so"].iter().any(|lib| {
        // SAFETY: the NVIDIA driver library is present (checked above) and
        // already loaded by cudarc, so opening it runs no initialiser again;
        // looking a symbol up does not call it.
        unsafe {
            libloading::Library::new(lib)
                .is_ok_and(|l| l.get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok())
        }
    })
}

fn error_strings(r: CUresult) -> (String, String) {
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: both calls write a pointer to a static string (or leave it
    // null) and accept any CUresult.
    unsafe {
        sys::cuGetErrorName(r, &mut name);
        sys::cuGetErrorString(r, &mut text);
    }
    let s = |p: *const c_char| {
        if p.is_null() {
            format!("{r:?}")
        } else {
            // SAFETY: non-null pointers from cuGetError* are NUL-terminated
            // static strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    (s(name), s(text))
}

fn check(call: &'static str, r: CUresult) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, text) = error_strings(r);
    Err(CudaError { call, name, text })
}

fn not_loaded() -> CudaError {
    CudaError {
        call: "dlopen",
        name: "libcuda.so.1 not found".into(),
        text: "the NVIDIA driver's user-space library is not installed or not on the loader path"
            .into(),
    }
}

/// Loads libcuda and runs `cuInit(0)`.
pub fn init() -> Result<()> {
    if !present() {
        return Err(not_loaded());
    }
    // SAFETY: libcuda is present; cuInit takes flags by value.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// `cuDriverGetVersion`.
pub fn driver_version() -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

/// Number of visible GPUs.
pub fn device_count() -> Result<i32> {
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

fn attr(dev: sys::CUdevice, a: CUdevice_attribute) -> Option<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one int; `dev` came from cuDeviceGet.
    let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
    (r == CUresult::CUDA_SUCCESS).then_some(v)
}

/// Normalizes CUDA's `00000000:03:00.0` to sysfs' `0000:03:00.0`.
pub fn normalize_bus_id(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => lower,
    }
}

/// Attributes of GPU `ordinal`.
pub fn gpu_attrs(ordinal: i32) -> Result<GpuAttrs> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: writes one CUdevice.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes and we pass that length.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
    })?;
    let mut bus = [0 as c_char; 64];
    // SAFETY: the buffer holds 64 bytes and we pass that length.
    check("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev)
    })?;
    let mut mem: usize = 0;
    // SAFETY: writes one size_t.
    check("cuDeviceTotalMem", unsafe {
        sys::cuDeviceTotalMem_v2(&mut mem, dev)
    })?;
    // SAFETY: the driver NUL-terminates both strings within their buffers.
    let cstr = |b: &[c_char]| {
        unsafe { CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    use CUdevice_attribute::*;
    Ok(GpuAttrs {
        index: ordinal,
        name: cstr(&name),
        pci_bus_id: normalize_bus_id(&cstr(&bus)),
        total_mem: mem as u64,
        gpudirect_rdma_supported: attr(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)
            .map(|v| v != 0),
        dma_buf_supported: attr(dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).map(|v| v != 0),
        rdma_writes_ordering: attr(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
        rdma_flush_writes_options: attr(
            dev,
            CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        ),
        rdma_with_vmm_supported: attr(
            dev,
            CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        )
        .map(|v| v != 0),
    })
}

/// What doctor shows about CUDA; never panics.
pub fn probe() -> CudaView {
    let mut v = CudaView::default();
    let r = (|| -> Result<()> {
        init()?;
        v.driver_version = driver_version().ok();
        for i in 0..device_count()? {
            v.gpus.push(gpu_attrs(i)?);
        }
        Ok(())
    })();
    if let Err(e) = r {
        v.error = Some(e.to_string());
    }
    v
}

/// A retained primary context, current on this thread while alive.
pub struct Context {
    dev: sys::CUdevice,
}

impl Context {
    /// Retains GPU `ordinal`'s primary context and makes it current.
    pub fn new(ordinal: i32) -> Result<Self> {
        init()?;
        let n = device_count()?;
        if ordinal < 0 || ordinal >= n {
            return Err(CudaError {
                call: "cuDeviceGet",
                name: "no such GPU".into(),
                text: format!("GPU {ordinal} requested, {n} visible"),
            });
        }
        let mut dev: sys::CUdevice = 0;
        // SAFETY: writes one CUdevice.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle for a valid device.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let me = Self { dev };
        // SAFETY: `ctx` was just retained.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
        Ok(me)
    }

    /// Waits for all work of the context.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a context is current (set in new()).
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// `cuFlushGPUDirectRDMAWrites` to the owner: makes RDMA writes that
    /// already completed visible to later GPU reads. `Ok(false)` when the
    /// driver lacks the call.
    pub fn flush_rdma_writes(&self) -> Result<bool> {
        if !has_symbol("cuFlushGPUDirectRDMAWrites") {
            return Ok(false);
        }
        // SAFETY: both arguments are plain enums; a context is current.
        check("cuFlushGPUDirectRDMAWrites", unsafe {
            sys::cuFlushGPUDirectRDMAWrites(
                sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
            )
        })?;
        Ok(true)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: balances the retain of new(); errors at teardown are moot.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// GPU memory from `cuMemAlloc`, freed on drop.
pub struct DeviceBuffer<'c> {
    ptr: sys::CUdeviceptr,
    size: usize,
    _ctx: &'c Context,
}

impl<'c> DeviceBuffer<'c> {
    /// `cuMemAlloc(size)` with SYNC_MEMOPS set.
    pub fn new(ctx: &'c Context, size: usize) -> Result<Self> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; a context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, size) })?;
        let b = Self {
            ptr,
            size,
            _ctx: ctx,
        };
        let one: c_int = 1;
        // SAFETY: SYNC_MEMOPS takes a pointer to an int; `ptr` is ours.
        check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
            sys::cuPointerSetAttribute(
                &one as *const c_int as *const c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                b.ptr,
            )
        })?;
        Ok(b)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// `cuMemsetD8` of the whole buffer.
    pub fn fill(&self, byte: u8) -> Result<()> {
        // SAFETY: the range is exactly our allocation.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(self.ptr, byte, self.size)
        })
    }

    /// `cuMemcpyHtoD` of `data` at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.range_ok(offset, data.len())?;
        // SAFETY: destination range checked inside our allocation; the host
        // slice is readable for its length.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(
                self.ptr + offset as u64,
                data.as_ptr() as *const c_void,
                data.len(),
            )
        })
    }

    /// `cuMemcpyDtoH` into `out` from `offset`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.range_ok(offset, out.len())?;
        // SAFETY: source range checked inside our allocation; the host slice
        // is exclusively borrowed and writable for its length.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(
                out.as_mut_ptr() as *mut c_void,
                self.ptr + offset as u64,
                out.len(),
            )
        })
    }

    fn range_ok(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(CudaError {
                call: "copy",
                name: "out of range".into(),
                text: format!("{offset}+{len} exceeds the {}-byte buffer", self.size),
            });
        }
        Ok(())
    }

    /// Exports `[offset, offset+len)` (host-page aligned) as a dma-buf fd
    /// with `cuMemGetHandleForAddressRange`.
    pub fn export_dmabuf(&self, offset: usize, len: usize) -> Result<DmaBuf> {
        if !has_symbol("cuMemGetHandleForAddressRange") {
            return Err(CudaError {
                call: "cuMemGetHandleForAddressRange",
                name: "not exported".into(),
                text: "this libcuda predates dma-buf export (CUDA 11.7+)".into(),
            });
        }
        self.range_ok(offset, len)?;
        let mut fd: c_int = -1;
        // SAFETY: the handle out-parameter is an int for DMA_BUF_FD; the
        // range lies in our allocation.
        check("cuMemGetHandleForAddressRange", unsafe {
            sys::cuMemGetHandleForAddressRange(
                &mut fd as *mut c_int as *mut c_void,
                self.ptr + offset as u64,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        Ok(DmaBuf { fd })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: frees our own allocation once.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// A dma-buf file descriptor, closed on drop.
pub struct DmaBuf {
    fd: c_int,
}

impl DmaBuf {
    pub fn fd(&self) -> c_int {
        self.fd
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: we own the fd returned by the driver.
        unsafe {
            libc::close(self.fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids() {
        assert_eq!(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("0000:03:00.0"), "0000:03:00.0");
    }

    #[test]
    fn probe_never_panics() {
        // Here (no NVIDIA driver) it must report why, not panic; on a GPU
        // node it lists the GPUs.
        let v = probe();
        assert!(v.error.is_some() || !v.gpus.is_empty() || v.driver_version.is_some());
    }
}
