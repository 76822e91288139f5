// SPDX-License-Identifier: GPL-2.0
//! libibverbs through rdma-sys, its functions resolved at run time.
//!
//! Types, layouts and constants are rdma-sys's (bindgen of the system
//! `<infiniband/verbs.h>` when the tool is built). The functions are looked
//! up in libibverbs.so.1 when `validate` or `bench` first needs them
//! (libloading), not linked, so the binary starts on a node without
//! rdma-core: `doctor` runs and `validate` says what is missing. Each entry
//! point's type is checked at compile time against rdma-sys's declaration of
//! the function (`const _` in `entry_points!`); naming a function only in a
//! constant leaves the linker nothing to resolve, so the binary does not
//! list libibverbs.so.1 as NEEDED (tests/cli.rs checks). `ibv_post_send` and
//! `ibv_poll_cq` are inline in the header (they jump through the context's
//! ops table): rdma-sys's Rust versions are used as they are.
//!
//! Every object is owned by an RAII wrapper that frees it on drop, in the
//! order the lifetimes force (QP and MRs before the PD, the PD before the
//! device context).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::time::{Duration, Instant};

use libloading::Library;
use rdma_sys::{
    _compat_ibv_port_attr, ibv_access_flags, ibv_async_event, ibv_comp_channel, ibv_context,
    ibv_cq, ibv_device, ibv_gid, ibv_mr, ibv_mtu, ibv_pd, ibv_port_attr, ibv_port_state, ibv_qp,
    ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type,
    ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wc_status, ibv_wr_opcode, rdma_t,
};

use crate::causes::Op;

/// `IBV_LINK_LAYER_ETHERNET`: an anonymous enum of verbs.h that rdma-sys
/// does not bind (tests/verbs_layout.rs compares it with the header).
pub const LINK_LAYER_ETHERNET: u8 = 2;

// ---- the entry points -------------------------------------------------------

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type RegDmabufMr = unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut ibv_context,
    c_int,
    *mut c_void,
    *mut ibv_comp_channel,
    c_int,
) -> *mut ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
type WcStatusStr = unsafe extern "C" fn(ibv_wc_status::Type) -> *const c_char;
type GetAsyncEvent = unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
type AckAsyncEvent = unsafe extern "C" fn(*mut ibv_async_event);

/// Declares the table of libibverbs functions: `field: Type = symbol`.
/// Required ones fail `Verbs::load` when missing; optional ones are `None`.
macro_rules! entry_points {
    (
        required { $($field:ident: $ty:ty = $sym:ident,)* }
        optional { $($ofield:ident: $oty:ty = $osym:ident,)* }
    ) => {
        /// The libibverbs functions this tool calls.
        struct Fns {
            $($field: $ty,)*
            $($ofield: Option<$oty>,)*
        }

        // Each type is the one rdma-sys declares for the symbol: a mismatch
        // does not compile. Evaluated at compile time only: no reference to
        // the symbol reaches the linker.
        const _: () = {
            $(let _: $ty = rdma_sys::$sym;)*
            $(let _: $oty = rdma_sys::$osym;)*
        };

        impl Fns {
            fn resolve(lib: &Library) -> Result<Self> {
                Ok(Self {
                    // SAFETY: each `$ty` is the C signature of `$sym`, as
                    // rdma-sys declares it (checked above).
                    $($field: unsafe { symbol::<$ty>(lib, stringify!($sym)) }?,)*
                    // SAFETY: as above.
                    $($ofield: unsafe { symbol::<$oty>(lib, stringify!($osym)) }.ok(),)*
                })
            }
        }
    };
}

entry_points! {
    required {
        get_device_list: GetDeviceList = ibv_get_device_list,
        free_device_list: FreeDeviceList = ibv_free_device_list,
        get_device_name: GetDeviceName = ibv_get_device_name,
        open_device: OpenDevice = ibv_open_device,
        close_device: CloseDevice = ibv_close_device,
        alloc_pd: AllocPd = ibv_alloc_pd,
        dealloc_pd: DeallocPd = ibv_dealloc_pd,
        reg_mr: RegMr = ibv_reg_mr,
        dereg_mr: DeregMr = ibv_dereg_mr,
        create_cq: CreateCq = ibv_create_cq,
        destroy_cq: DestroyCq = ibv_destroy_cq,
        create_qp: CreateQp = ibv_create_qp,
        destroy_qp: DestroyQp = ibv_destroy_qp,
        modify_qp: ModifyQp = ibv_modify_qp,
        query_port: QueryPort = ibv_query_port,
        query_gid: QueryGid = ibv_query_gid,
        wc_status_str: WcStatusStr = ibv_wc_status_str,
        get_async_event: GetAsyncEvent = ibv_get_async_event,
        ack_async_event: AckAsyncEvent = ibv_ack_async_event,
    }
    optional {
        // rdma-core 34 and later.
        reg_dmabuf_mr: RegDmabufMr = ibv_reg_dmabuf_mr,
    }
}

/// Looks up `name` in `lib` as a `T`.
///
/// # Safety
/// `T` must be the function pointer type of the C function `name`.
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: the caller guarantees `T`; the pointer is copied out and stays
    // valid while `lib` is loaded (`Verbs` keeps it).
    match unsafe { lib.get::<T>(cname.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(e) => Err(err(Op::LoadVerbs, "dlsym", 0, format!("{name}: {e}"))),
    }
}

// ---- errors -----------------------------------------------------------------

/// A verbs call that failed.
#[derive(Debug, Clone)]
pub struct VerbsError {
    /// For the cause table.
    pub op: Op,
    pub call: &'static str,
    /// Positive errno (0 if the call gave none).
    pub errno: i32,
    pub detail: String,
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.call)?;
        if self.errno != 0 {
            write!(
                f,
                ": {} ({})",
                peermem_sim::errno::name(self.errno),
                peermem_sim::errno::describe(self.errno)
            )?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

pub type Result<T> = std::result::Result<T, VerbsError>;

fn err(op: Op, call: &'static str, errno: i32, detail: impl Into<String>) -> VerbsError {
    VerbsError {
        op,
        call,
        errno,
        detail: detail.into(),
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

// ---- the library ------------------------------------------------------------

/// libibverbs, loaded.
pub struct Verbs {
    f: Fns,
    _lib: Library,
}

/// Library names tried, in order.
pub const LIB_NAMES: &[&str] = &["libibverbs.so.1", "libibverbs.so"];

/// Access rights of every MR the tool registers.
fn access_rw() -> c_int {
    let a = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
        | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
    a.0 as c_int
}

impl Verbs {
    /// dlopens libibverbs; a missing library or symbol is an error value.
    pub fn load() -> Result<Self> {
        let mut last = String::new();
        for name in LIB_NAMES {
            // SAFETY: loading libibverbs runs its constructors, which only
            // set up provider discovery.
            match unsafe { Library::new(name) } {
                Ok(lib) => {
                    let f = Fns::resolve(&lib)?;
                    return Ok(Self { f, _lib: lib });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(err(Op::LoadVerbs, "dlopen(libibverbs.so.1)", 0, last))
    }

    /// True when libibverbs has ibv_reg_dmabuf_mr (rdma-core 34+).
    pub fn has_dmabuf(&self) -> bool {
        self.f.reg_dmabuf_mr.is_some()
    }

    /// libibverbs' name for a work-completion status.
    pub fn wc_status_name(&self, status: ibv_wc_status::Type) -> String {
        // SAFETY: returns a static string (or "unknown") for any value.
        let p = unsafe { (self.f.wc_status_str)(status) };
        if p.is_null() {
            return "unknown".into();
        }
        // SAFETY: a NUL-terminated static string of the library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Opens device `name` (or the first one).
    pub fn open(&self, name: Option<&str>) -> Result<Device<'_>> {
        let mut n: c_int = 0;
        // SAFETY: `n` is valid for the call; the list is freed below.
        let list = unsafe { (self.f.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            // An empty list is "no device" whatever errno says.
            let e = if list.is_null() { last_errno() } else { 0 };
            if !list.is_null() {
                // SAFETY: frees the (empty) list.
                unsafe { (self.f.free_device_list)(list) };
            }
            return Err(err(
                Op::DeviceList,
                "ibv_get_device_list",
                e,
                "libibverbs sees no RDMA device",
            ));
        }
        let mut chosen = None;
        let mut seen = Vec::new();
        for i in 0..n as usize {
            // SAFETY: `list` has `n` valid entries.
            let d = unsafe { *list.add(i) };
            // SAFETY: `d` is a device of the live list.
            let p = unsafe { (self.f.get_device_name)(d) };
            let dn = if p.is_null() {
                String::new()
            } else {
                // SAFETY: the name is NUL-terminated and lives as long as
                // the list.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            };
            if chosen.is_none() && name.is_none_or(|w| w == dn) {
                // SAFETY: `d` is a device of the live list; `dev_path` is a
                // NUL-terminated array inside it.
                let uverbs = unsafe { CStr::from_ptr((*d).dev_path.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
                chosen = Some((d, dn.clone(), uverbs));
            }
            seen.push(dn);
        }
        let r = match chosen {
            None => Err(err(
                Op::OpenDevice,
                "ibv_open_device",
                libc::ENODEV,
                format!(
                    "no device named {:?} (have: {})",
                    name.unwrap_or(""),
                    seen.join(", ")
                ),
            )),
            Some((d, dn, uverbs)) => {
                // SAFETY: `d` is a device of the live list.
                let ctx = unsafe { (self.f.open_device)(d) };
                if ctx.is_null() {
                    Err(err(Op::OpenDevice, "ibv_open_device", last_errno(), dn))
                } else {
                    // Async events are read without blocking (`Device::
                    // check_alive`); a failed fcntl only means none are.
                    // SAFETY: the context is open; `async_fd` is its fd.
                    let afd = unsafe { (*ctx).async_fd };
                    // SAFETY: F_GETFL/F_SETFL on an fd we own.
                    let nonblocking = unsafe {
                        let fl = libc::fcntl(afd, libc::F_GETFL);
                        fl >= 0 && libc::fcntl(afd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
                    };
                    Ok(Device {
                        v: self,
                        ctx,
                        name: dn,
                        uverbs,
                        nonblocking,
                    })
                }
            }
        };
        // SAFETY: frees the list; an opened context stays valid.
        unsafe { (self.f.free_device_list)(list) };
        r
    }
}

// ---- device -----------------------------------------------------------------

/// An open device context.
pub struct Device<'v> {
    v: &'v Verbs,
    ctx: *mut ibv_context,
    pub name: String,
    /// The uverbs device in sysfs (`/sys/class/infiniband_verbs/uverbsN`):
    /// gone once the device is unregistered.
    uverbs: String,
    /// The async event fd is non-blocking (events can be polled).
    nonblocking: bool,
}

/// libibverbs' name of an async event type (`enum ibv_event_type`).
pub fn event_name(t: u32) -> &'static str {
    const NAMES: [&str; 20] = [
        "IBV_EVENT_CQ_ERR",
        "IBV_EVENT_QP_FATAL",
        "IBV_EVENT_QP_REQ_ERR",
        "IBV_EVENT_QP_ACCESS_ERR",
        "IBV_EVENT_COMM_EST",
        "IBV_EVENT_SQ_DRAINED",
        "IBV_EVENT_PATH_MIG",
        "IBV_EVENT_PATH_MIG_ERR",
        "IBV_EVENT_DEVICE_FATAL",
        "IBV_EVENT_PORT_ACTIVE",
        "IBV_EVENT_PORT_ERR",
        "IBV_EVENT_LID_CHANGE",
        "IBV_EVENT_PKEY_CHANGE",
        "IBV_EVENT_SM_CHANGE",
        "IBV_EVENT_SRQ_ERR",
        "IBV_EVENT_SRQ_LIMIT_REACHED",
        "IBV_EVENT_QP_LAST_WQE_REACHED",
        "IBV_EVENT_CLIENT_REREGISTER",
        "IBV_EVENT_GID_CHANGE",
        "IBV_EVENT_WQ_FATAL",
    ];
    NAMES.get(t as usize).copied().unwrap_or("unknown event")
}

/// Async events that end a run: the device, a port, the QP or the CQ
/// failed.
fn event_is_fatal(t: u32) -> bool {
    use rdma_sys::ibv_event_type as E;
    [
        E::IBV_EVENT_CQ_ERR,
        E::IBV_EVENT_QP_FATAL,
        E::IBV_EVENT_QP_REQ_ERR,
        E::IBV_EVENT_QP_ACCESS_ERR,
        E::IBV_EVENT_DEVICE_FATAL,
        E::IBV_EVENT_PORT_ERR,
        E::IBV_EVENT_WQ_FATAL,
    ]
    .iter()
    .any(|&e| e as u32 == t)
}

/// A port's GID (RoCE address), as raw bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`): RoCEv2 over IPv4.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.0[..10] == [0; 10] && self.0[10] == 0xff && self.0[11] == 0xff
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

/// What the loopback connection needs to know about a port.
#[derive(Debug, Clone, Copy)]
pub struct PortInfo {
    pub state: ibv_port_state::Type,
    pub active_mtu: ibv_mtu::Type,
    pub lid: u16,
    pub link_layer: u8,
    pub gid_tbl_len: i32,
    pub max_msg_sz: u32,
}

impl PortInfo {
    pub fn is_active(&self) -> bool {
        self.state == ibv_port_state::IBV_PORT_ACTIVE
    }

    /// RoCE: the QP needs a GID to reach itself.
    pub fn is_ethernet(&self) -> bool {
        self.link_layer == LINK_LAYER_ETHERNET
    }
}

/// `struct ibv_port_attr` with room behind it: the exported ibv_query_port
/// lets the provider fill the port attributes of the libibverbs it belongs
/// to, which may be newer (and longer) than the header rdma-sys was built
/// from.
#[repr(C)]
struct PortAttrWithRoom {
    attr: ibv_port_attr,
    _room: [u8; 64],
}

impl<'v> Device<'v> {
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        // SAFETY: integers and enums only; all-zero is a valid value.
        let mut a: PortAttrWithRoom = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `a` is larger than the struct the
        // library fills (its compat prefix, or the whole of a newer one).
        let rc = unsafe {
            (self.v.f.query_port)(
                self.ctx,
                port,
                std::ptr::addr_of_mut!(a).cast::<_compat_ibv_port_attr>(),
            )
        };
        if rc != 0 {
            return Err(err(
                Op::ModifyQp,
                "ibv_query_port",
                rc.abs(),
                format!("port {port}"),
            ));
        }
        let a = a.attr;
        Ok(PortInfo {
            state: a.state,
            active_mtu: a.active_mtu,
            lid: a.lid,
            link_layer: a.link_layer,
            gid_tbl_len: a.gid_tbl_len,
            max_msg_sz: a.max_msg_sz,
        })
    }

    pub fn query_gid(&self, port: u8, index: i32) -> Result<Gid> {
        let mut g = ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open; writes one GID into `g`.
        let rc = unsafe { (self.v.f.query_gid)(self.ctx, port, index, &mut g) };
        if rc != 0 {
            return Err(err(
                Op::ModifyQp,
                "ibv_query_gid",
                last_errno(),
                format!("index {index}"),
            ));
        }
        // SAFETY: every bit pattern of the 16-byte union is a valid `raw`.
        Ok(Gid(unsafe { g.raw }))
    }

    /// Whether the device is still there and healthy: reads (and
    /// acknowledges) every pending async event without blocking, and looks
    /// for the device's uverbs node in sysfs. A device being removed is
    /// named: a fatal event (IBV_EVENT_DEVICE_FATAL, PORT_ERR, QP_FATAL...)
    /// or, where the driver cannot disassociate (rxe), its uverbs device
    /// gone while this process still holds it open.
    pub fn check_alive(&self) -> Result<()> {
        let mut fatal = Vec::new();
        // At most this many events a call (a device flooding events must
        // not keep the run here); none when the fd could not be made
        // non-blocking (reading it would block).
        let budget = if self.nonblocking { 64 } else { 0 };
        for _ in 0..budget {
            let mut ev = std::mem::MaybeUninit::<ibv_async_event>::zeroed();
            // SAFETY: the context is open; `ev` has room for one event; the
            // fd is non-blocking, so no event means -1 (EAGAIN) at once.
            let rc = unsafe { (self.v.f.get_async_event)(self.ctx, ev.as_mut_ptr()) };
            if rc != 0 {
                break;
            }
            // The type is read as the C enum's integer: a value this build's
            // header does not know must not become a Rust enum.
            // SAFETY: the library filled `ev`; `event_type` is a 32-bit C
            // enum at its offset.
            let t = unsafe {
                std::ptr::addr_of!((*ev.as_ptr()).event_type)
                    .cast::<u32>()
                    .read()
            };
            // SAFETY: every event got is acknowledged once (destroying the
            // QP or CQ waits for that).
            unsafe { (self.v.f.ack_async_event)(ev.as_mut_ptr()) };
            if event_is_fatal(t) {
                fatal.push(event_name(t));
            }
        }
        if !fatal.is_empty() {
            return Err(err(
                Op::DeviceGone,
                "async event",
                0,
                format!("{} reported {}", self.name, fatal.join(", ")),
            ));
        }
        if !self.uverbs.is_empty() && !std::path::Path::new(&self.uverbs).exists() {
            return Err(err(
                Op::DeviceGone,
                "device removed",
                libc::ENODEV,
                format!(
                    "{} was unregistered during the run: its uverbs device {} is gone (this process still holds its objects, the kernel frees them when it exits)",
                    self.name, self.uverbs
                ),
            ));
        }
        Ok(())
    }

    pub fn alloc_pd(&self) -> Result<Pd<'_>> {
        // SAFETY: the context is open.
        let pd = unsafe { (self.v.f.alloc_pd)(self.ctx) };
        if pd.is_null() {
            return Err(err(Op::AllocPd, "ibv_alloc_pd", last_errno(), ""));
        }
        Ok(Pd { d: self, pd })
    }

    pub fn create_cq(&self, cqe: i32) -> Result<Cq<'_>> {
        // SAFETY: the context is open; no completion channel, vector 0.
        let cq = unsafe {
            (self.v.f.create_cq)(self.ctx, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0)
        };
        if cq.is_null() {
            return Err(err(Op::CreateCq, "ibv_create_cq", last_errno(), ""));
        }
        Ok(Cq { d: self, cq })
    }
}

impl Drop for Device<'_> {
    fn drop(&mut self) {
        // SAFETY: every child object borrows the device, so all are gone.
        unsafe { (self.v.f.close_device)(self.ctx) };
    }
}

// ---- protection domain, memory regions --------------------------------------

/// A protection domain.
pub struct Pd<'d> {
    d: &'d Device<'d>,
    pd: *mut ibv_pd,
}

/// Whether a device takes dma-buf registrations (`ibv_reg_dmabuf_mr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmabufSupport {
    /// The call exists and the device's driver has the method.
    Offered,
    /// libibverbs has no ibv_reg_dmabuf_mr (older than rdma-core 34).
    NotInLibrary,
    /// The provider or kernel driver refused the method itself (rxe, an old
    /// kernel or driver): `errno` is what it said.
    NotByDevice { errno: i32 },
}

/// errnos that mean "this device has no dma-buf registration at all".
fn is_unsupported(errno: i32) -> bool {
    errno == libc::EOPNOTSUPP
        || errno == libc::ENOSYS
        || errno == libc::EPROTONOSUPPORT
        || errno == peermem_sim::errno::ENOTSUPP
}

impl<'d> Pd<'d> {
    /// `ibv_reg_mr`; `op` tells the cause table what memory it was.
    pub fn reg_mr(&self, addr: u64, len: usize, op: Op) -> Result<Mr<'_>> {
        // SAFETY: registers [addr, addr+len); the caller keeps that memory
        // alive for the MR's lifetime (it borrows the owner in practice).
        let mr = unsafe { (self.d.v.f.reg_mr)(self.pd, addr as *mut c_void, len, access_rw()) };
        if mr.is_null() {
            return Err(err(
                op,
                "ibv_reg_mr",
                last_errno(),
                format!("{len} bytes at 0x{addr:x}"),
            ));
        }
        Ok(Mr { pd: self, mr })
    }

    /// `ibv_reg_dmabuf_mr(offset, len, iova, fd)`.
    pub fn reg_dmabuf_mr(&self, offset: u64, len: usize, iova: u64, fd: c_int) -> Result<Mr<'_>> {
        let Some(f) = self.d.v.f.reg_dmabuf_mr else {
            return Err(err(
                Op::RegDmabufMr,
                "ibv_reg_dmabuf_mr",
                libc::ENOSYS,
                "libibverbs is older than rdma-core 34",
            ));
        };
        // SAFETY: the fd is a live dma-buf the caller owns and keeps open
        // while the MR lives.
        let mr = unsafe { f(self.pd, offset, len, iova, fd, access_rw()) };
        if mr.is_null() {
            return Err(err(
                Op::RegDmabufMr,
                "ibv_reg_dmabuf_mr",
                last_errno(),
                format!("{len} bytes at dma-buf offset {offset}"),
            ));
        }
        Ok(Mr { pd: self, mr })
    }

    /// Asks the device whether it registers dma-bufs, without one: a
    /// registration of fd -1. The kernel refuses a device without the
    /// method (EOPNOTSUPP) before it looks at the fd, and libibverbs'
    /// default for a provider without it says the same; a device with it
    /// gets as far as the fd (EBADF).
    pub fn dmabuf_support(&self) -> DmabufSupport {
        let Some(f) = self.d.v.f.reg_dmabuf_mr else {
            return DmabufSupport::NotInLibrary;
        };
        // SAFETY: fd -1 is no dma-buf: the call fails without touching any
        // memory; offset and iova agree within the page as the kernel asks.
        let mr = unsafe { f(self.pd, 0, 4096, 0, -1, access_rw()) };
        if !mr.is_null() {
            // Not expected with no fd; give it back.
            drop(Mr { pd: self, mr });
            return DmabufSupport::Offered;
        }
        let e = last_errno();
        if is_unsupported(e) {
            DmabufSupport::NotByDevice { errno: e }
        } else {
            DmabufSupport::Offered
        }
    }

    /// An RC queue pair on `cq`.
    pub fn create_rc_qp(&self, cq: &'d Cq<'d>) -> Result<Qp<'_>> {
        // SAFETY: pointers and integers only; all-zero is a valid value.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.cq;
        init.recv_cq = cq.cq;
        init.cap = ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        // SAFETY: `init` is valid for the call; the CQ outlives the QP.
        let qp = unsafe { (self.d.v.f.create_qp)(self.pd, &mut init) };
        if qp.is_null() {
            return Err(err(Op::CreateQp, "ibv_create_qp", last_errno(), ""));
        }
        Ok(Qp { pd: self, qp, cq })
    }
}

impl Drop for Pd<'_> {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs borrow the PD, so none is left.
        unsafe { (self.d.v.f.dealloc_pd)(self.pd) };
    }
}

/// A memory region.
pub struct Mr<'p> {
    pd: &'p Pd<'p>,
    mr: *mut ibv_mr,
}

impl Mr<'_> {
    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live until drop.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is live until drop.
        unsafe { (*self.mr).rkey }
    }

    /// Explicit deregistration, reporting the error (drop ignores it).
    pub fn dereg(self) -> Result<()> {
        let mr = self.mr;
        let f = self.pd.d.v.f.dereg_mr;
        std::mem::forget(self);
        // SAFETY: we own `mr` and forgot the wrapper, so it is freed once.
        let rc = unsafe { f(mr) };
        if rc != 0 {
            return Err(err(Op::RegGpuMr, "ibv_dereg_mr", rc.abs(), ""));
        }
        Ok(())
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the MR.
        unsafe { (self.pd.d.v.f.dereg_mr)(self.mr) };
    }
}

/// A completion queue.
pub struct Cq<'d> {
    d: &'d Device<'d>,
    cq: *mut ibv_cq,
}

impl Drop for Cq<'_> {
    fn drop(&mut self) {
        // SAFETY: QPs borrow the CQ, so none is left.
        unsafe { (self.d.v.f.destroy_cq)(self.cq) };
    }
}

// ---- queue pair, transfers --------------------------------------------------

/// An RC queue pair.
pub struct Qp<'p> {
    pd: &'p Pd<'p>,
    qp: *mut ibv_qp,
    cq: &'p Cq<'p>,
}

/// Which way an RDMA transfer moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// RDMA WRITE: local to remote.
    Write,
    /// RDMA READ: remote to local.
    Read,
}

impl Direction {
    fn opcode(self) -> ibv_wr_opcode::Type {
        match self {
            Direction::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            Direction::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
        }
    }
}

/// One RDMA transfer: `len` bytes between the local `[laddr, +len)` of
/// `lkey` and the remote `[raddr, +len)` of `rkey`.
#[derive(Debug, Clone, Copy)]
pub struct RdmaOp {
    pub direction: Direction,
    pub laddr: u64,
    pub lkey: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// How to reach ourselves.
#[derive(Debug, Clone, Copy)]
pub struct Loopback {
    pub port: u8,
    pub lid: u16,
    pub mtu: ibv_mtu::Type,
    /// RoCE: the GID and its index.
    pub gid: Option<(Gid, u8)>,
}

fn mask(m: ibv_qp_attr_mask) -> c_int {
    m.0 as c_int
}

impl<'p> Qp<'p> {
    pub fn qp_num(&self) -> u32 {
        // SAFETY: `qp` is live until drop.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(&self, attr: &mut ibv_qp_attr, m: ibv_qp_attr_mask, what: &str) -> Result<()> {
        // SAFETY: the QP is live; `attr` is valid for the call.
        let rc = unsafe { (self.pd.d.v.f.modify_qp)(self.qp, attr, mask(m)) };
        if rc != 0 {
            return Err(err(
                Op::ModifyQp,
                "ibv_modify_qp",
                rc.abs(),
                what.to_string(),
            ));
        }
        Ok(())
    }

    /// A zeroed `ibv_qp_attr` in `state`.
    fn attr(state: ibv_qp_state::Type) -> ibv_qp_attr {
        // SAFETY: integers, enums and a GID union only; all-zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        a
    }

    /// Back to RESET (validate --fault qp-reset: a post must then fail
    /// with a named cause, not hang).
    pub fn reset(&self) -> Result<()> {
        let mut a = Self::attr(ibv_qp_state::IBV_QPS_RESET);
        self.modify(&mut a, ibv_qp_attr_mask::IBV_QP_STATE, "to RESET")
    }

    /// RESET -> INIT -> RTR -> RTS, connected to itself.
    pub fn connect_loopback(&self, l: &Loopback) -> Result<()> {
        use ibv_qp_attr_mask as M;
        let mut a = Self::attr(ibv_qp_state::IBV_QPS_INIT);
        a.port_num = l.port;
        a.qp_access_flags = access_rw() as u32;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "to INIT",
        )?;
        let mut a = Self::attr(ibv_qp_state::IBV_QPS_RTR);
        a.path_mtu = l.mtu;
        a.dest_qp_num = self.qp_num();
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = l.lid;
        a.ah_attr.port_num = l.port;
        if let Some((gid, idx)) = l.gid {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: gid.0 };
            a.ah_attr.grh.sgid_index = idx;
            a.ah_attr.grh.hop_limit = 1;
        }
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "to RTR",
        )?;
        let mut a = Self::attr(ibv_qp_state::IBV_QPS_RTS);
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = 0;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "to RTS",
        )
    }

    /// Runs `op` as signaled work requests of at most `max_wr` bytes, each
    /// waited for.
    pub fn rdma(&self, op: RdmaOp, max_wr: u64, timeout: Duration) -> Result<()> {
        let mut done = 0;
        while done < op.len {
            let n = (op.len - done).min(max_wr.clamp(1, u64::from(u32::MAX)));
            let chunk = RdmaOp {
                laddr: op.laddr + done,
                raddr: op.raddr + done,
                len: n,
                ..op
            };
            self.post_and_wait(&chunk, timeout)?;
            done += n;
        }
        Ok(())
    }

    /// One signaled work request (`op.len` < 4 GiB), waited for.
    fn post_and_wait(&self, op: &RdmaOp, timeout: Duration) -> Result<()> {
        let mut sge = ibv_sge {
            addr: op.laddr,
            length: op.len as u32,
            lkey: op.lkey,
        };
        // SAFETY: integers, pointers and unions of them; all-zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = 1;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = op.direction.opcode();
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = rdma_t {
            remote_addr: op.raddr,
            rkey: op.rkey,
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP and its context are live; rdma-sys's ibv_post_send
        // calls the provider's post_send from the context's ops, as the
        // header's inline does; `wr` and `sge` outlive the call.
        let rc = unsafe { rdma_sys::ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(err(Op::PostSend, "ibv_post_send", rc.abs(), ""));
        }
        let start = Instant::now();
        loop {
            // SAFETY: integers and a union of integers; all-zero is valid.
            let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is live; as above, the provider's poll_cq;
            // `wc` has room for one completion.
            let n = unsafe { rdma_sys::ibv_poll_cq(self.cq.cq, 1, &mut wc) };
            if n < 0 {
                return Err(err(
                    Op::Completion,
                    "ibv_poll_cq",
                    0,
                    format!("returned {n}"),
                ));
            }
            if n == 1 {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    return Err(err(
                        Op::Completion,
                        "work completion",
                        0,
                        format!(
                            "status {} ({}), vendor error 0x{:x}",
                            wc.status,
                            self.pd.d.v.wc_status_name(wc.status),
                            wc.vendor_err
                        ),
                    ));
                }
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(err(
                    Op::Completion,
                    "ibv_poll_cq",
                    libc::ETIMEDOUT,
                    format!("no completion in {timeout:?}"),
                ));
            }
            std::hint::spin_loop();
        }
    }
}

impl Drop for Qp<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the QP.
        unsafe { (self.pd.d.v.f.destroy_qp)(self.qp) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_gives_a_value_not_a_panic() {
        // With rdma-core installed this loads; without, it must be an error
        // value naming libibverbs.
        match Verbs::load() {
            Ok(v) => {
                assert_eq!(v.wc_status_name(ibv_wc_status::IBV_WC_SUCCESS), "success");
                // No RDMA device on a build host is a clean error too.
                if let Err(e) = v.open(Some("no-such-device")) {
                    assert!(matches!(e.op, Op::DeviceList | Op::OpenDevice), "{e}");
                }
            }
            Err(e) => assert!(e.to_string().contains("libibverbs"), "{e}"),
        }
    }

    #[test]
    fn access_and_masks_are_the_header_bits() {
        // IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
        assert_eq!(access_rw(), 0b111);
        assert_eq!(mask(ibv_qp_attr_mask::IBV_QP_STATE), 1);
        assert_eq!(Direction::Read.opcode(), ibv_wr_opcode::IBV_WR_RDMA_READ);
    }

    #[test]
    fn gid_kinds() {
        let mut g = Gid([0; 16]);
        assert!(g.is_zero());
        g.0[10] = 0xff;
        g.0[11] = 0xff;
        g.0[12..].copy_from_slice(&[10, 77, 0, 1]);
        assert!(g.is_ipv4_mapped());
        assert!(!Gid([0xfe; 16]).is_ipv4_mapped());
    }

    #[test]
    fn async_event_names_and_fatality() {
        use rdma_sys::ibv_event_type as E;
        assert_eq!(
            event_name(E::IBV_EVENT_DEVICE_FATAL as u32),
            "IBV_EVENT_DEVICE_FATAL"
        );
        assert_eq!(
            event_name(E::IBV_EVENT_WQ_FATAL as u32),
            "IBV_EVENT_WQ_FATAL"
        );
        assert_eq!(event_name(99), "unknown event");
        assert!(event_is_fatal(E::IBV_EVENT_PORT_ERR as u32));
        assert!(event_is_fatal(E::IBV_EVENT_DEVICE_FATAL as u32));
        assert!(!event_is_fatal(E::IBV_EVENT_PORT_ACTIVE as u32));
        assert!(!event_is_fatal(99));
    }

    #[test]
    fn unsupported_errnos() {
        assert!(is_unsupported(libc::EOPNOTSUPP));
        assert!(is_unsupported(libc::EPROTONOSUPPORT));
        assert!(!is_unsupported(libc::EBADF));
    }
}
