// SPDX-License-Identifier: GPL-2.0
//! libibverbs, loaded at run time (dlopen of libibverbs.so.1), so the tool
//! starts and explains itself on nodes without rdma-core.
//!
//! The `#[repr(C)]` types mirror the parts of `<infiniband/verbs.h>` we use;
//! the unit test `layout_matches_system_header` compiles a probe against the
//! system header and compares every size and offset. `ibv_post_send` and
//! `ibv_poll_cq` are inline in the header (they jump through the context's
//! ops table), so they are called through that table here too.
//!
//! Every object is owned by an RAII wrapper that frees it on drop, in the
//! order the lifetimes force (QP and MRs before the PD, the PD before the
//! device context).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::time::{Duration, Instant};

use libloading::Library;

use crate::causes::Op;

// ---- the C mirror ---------------------------------------------------------

/// Opaque `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_pd`.
#[repr(C)]
pub struct IbvPd {
    _opaque: [u8; 0],
}

/// `struct ibv_context` up to the ops we call (never allocated by us).
#[repr(C)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    /// `struct ibv_context_ops`, as an array of function pointers.
    pub ops: [*const c_void; OPS_LEN],
}

/// Index of `poll_cq` in `struct ibv_context_ops`.
pub const OPS_POLL_CQ: usize = 11;
/// Index of `post_send` in `struct ibv_context_ops`.
pub const OPS_POST_SEND: usize = 25;
const OPS_LEN: usize = 26;

/// `struct ibv_cq` prefix.
#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
}

/// `struct ibv_qp` prefix, up to `qp_type`.
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_port_attr` (with room to spare for newer fields).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvPortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub _spare: [u8; 64],
}

/// `union ibv_gid`.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvGid {
    pub raw: [u8; 16],
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr`, with the `wr.rdma` member of its union spelled out.
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub rdma_remote_addr: u64,
    pub rdma_rkey: u32,
    pub _wr_pad: u32,
    pub _wr_rest: [u64; 2],
    pub qp_type_xrc: u32,
    pub _pad: u32,
    pub _tail: [u64; 6],
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub _pad: [u8; 2],
}

pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_ACCESS_REMOTE_READ: c_int = 4;
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub const IBV_WC_SUCCESS: u32 = 0;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// ---- loading --------------------------------------------------------------

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut IbvDevice);
type GetDeviceName = unsafe extern "C" fn(*mut IbvDevice) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext;
type CloseDevice = unsafe extern "C" fn(*mut IbvContext) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd;
type DeallocPd = unsafe extern "C" fn(*mut IbvPd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr;
type RegDmabufMr = unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> *mut IbvMr;
type DeregMr = unsafe extern "C" fn(*mut IbvMr) -> c_int;
type CreateCq =
    unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq;
type DestroyCq = unsafe extern "C" fn(*mut IbvCq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
type DestroyQp = unsafe extern "C" fn(*mut IbvQp) -> c_int;
type ModifyQp = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut IbvGid) -> c_int;
type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;

struct Fns {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    reg_dmabuf_mr: Option<RegDmabufMr>,
    dereg_mr: DeregMr,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    create_qp: CreateQp,
    destroy_qp: DestroyQp,
    modify_qp: ModifyQp,
    query_port: QueryPort,
    query_gid: QueryGid,
}

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

/// The loaded library and its entry points.
pub struct Verbs {
    f: Fns,
    _lib: Library,
}

/// Library names tried, in order.
pub const LIB_NAMES: &[&str] = &["libibverbs.so.1", "libibverbs.so"];

impl Verbs {
    /// dlopens libibverbs; a missing library or symbol is an error value.
    pub fn load() -> Result<Self> {
        let mut last = String::new();
        for name in LIB_NAMES {
            // SAFETY: loading libibverbs runs its constructors, which only
            // set up provider discovery.
            match unsafe { Library::new(name) } {
                Ok(lib) => return Self::from_lib(lib),
                Err(e) => last = e.to_string(),
            }
        }
        Err(err(Op::LoadVerbs, "dlopen(libibverbs.so.1)", 0, last))
    }

    fn from_lib(lib: Library) -> Result<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the C signature of the declared
                // function pointer type (verbs.h); we copy the pointer out
                // and keep the library alive in `_lib`.
                match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                    Ok(s) => *s,
                    Err(e) => {
                        return Err(err(
                            Op::LoadVerbs,
                            concat!("dlsym(", $name, ")"),
                            0,
                            e.to_string(),
                        ))
                    }
                }
            };
        }
        let f = Fns {
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            // SAFETY: as in sym!; absent before rdma-core 34.
            reg_dmabuf_mr: unsafe { lib.get::<RegDmabufMr>(b"ibv_reg_dmabuf_mr\0") }
                .ok()
                .map(|s| *s),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_qp: sym!("ibv_create_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
        };
        Ok(Self { f, _lib: lib })
    }

    /// True when ibv_reg_dmabuf_mr exists.
    pub fn has_dmabuf(&self) -> bool {
        self.f.reg_dmabuf_mr.is_some()
    }

    /// Opens device `name` (or the first one).
    pub fn open(&self, name: Option<&str>) -> Result<Device<'_>> {
        let mut n: c_int = 0;
        // SAFETY: as in device_names.
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
            // SAFETY: as in device_names.
            let p = unsafe { (self.f.get_device_name)(d) };
            // SAFETY: as in device_names.
            let dn = if p.is_null() {
                String::new()
            } else {
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            };
            if chosen.is_none() && name.is_none_or(|w| w == dn) {
                chosen = Some((d, dn.clone()));
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
            Some((d, dn)) => {
                // SAFETY: `d` is a device of the live list.
                let ctx = unsafe { (self.f.open_device)(d) };
                if ctx.is_null() {
                    Err(err(Op::OpenDevice, "ibv_open_device", last_errno(), dn))
                } else {
                    Ok(Device {
                        v: self,
                        ctx,
                        name: dn,
                    })
                }
            }
        };
        // SAFETY: frees the list; an opened context stays valid.
        unsafe { (self.f.free_device_list)(list) };
        r
    }
}

/// An open device context.
pub struct Device<'v> {
    v: &'v Verbs,
    ctx: *mut IbvContext,
    pub name: String,
}

/// What the loopback connection needs to know about a port.
#[derive(Debug, Clone, Copy)]
pub struct PortInfo {
    pub state: u32,
    pub active_mtu: u32,
    pub lid: u16,
    pub link_layer: u8,
    pub gid_tbl_len: i32,
    pub max_msg_sz: u32,
}

impl<'v> Device<'v> {
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        // SAFETY: IbvPortAttr is plain old data; zero is a valid value.
        let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: `a` is larger than the struct the library fills.
        let rc = unsafe { (self.v.f.query_port)(self.ctx, port, &mut a) };
        if rc != 0 {
            return Err(err(
                Op::ModifyQp,
                "ibv_query_port",
                rc.abs(),
                format!("port {port}"),
            ));
        }
        Ok(PortInfo {
            state: a.state,
            active_mtu: a.active_mtu,
            lid: a.lid,
            link_layer: a.link_layer,
            gid_tbl_len: a.gid_tbl_len,
            max_msg_sz: a.max_msg_sz,
        })
    }

    pub fn query_gid(&self, port: u8, index: i32) -> Result<IbvGid> {
        let mut g = IbvGid::default();
        // SAFETY: writes one GID.
        let rc = unsafe { (self.v.f.query_gid)(self.ctx, port, index, &mut g) };
        if rc != 0 {
            return Err(err(
                Op::ModifyQp,
                "ibv_query_gid",
                last_errno(),
                format!("index {index}"),
            ));
        }
        Ok(g)
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
        // SAFETY: the context is open; no channel, vector 0.
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

/// A protection domain.
pub struct Pd<'d> {
    d: &'d Device<'d>,
    pd: *mut IbvPd,
}

/// Access rights the validation uses.
pub const ACCESS_RW: c_int =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

impl<'d> Pd<'d> {
    /// `ibv_reg_mr`; `op` tells the cause table what memory it was.
    pub fn reg_mr(&self, addr: u64, len: usize, op: Op) -> Result<Mr<'_>> {
        // SAFETY: registers [addr, addr+len); the caller keeps that memory
        // alive for the MR's lifetime (it borrows the owner in practice).
        let mr = unsafe { (self.d.v.f.reg_mr)(self.pd, addr as *mut c_void, len, ACCESS_RW) };
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
        // SAFETY: the fd is a live dma-buf the caller owns.
        let mr = unsafe { f(self.pd, offset, len, iova, fd, ACCESS_RW) };
        if mr.is_null() {
            return Err(err(
                Op::RegDmabufMr,
                "ibv_reg_dmabuf_mr",
                last_errno(),
                format!("{len} bytes"),
            ));
        }
        Ok(Mr { pd: self, mr })
    }

    /// An RC queue pair on `cq`.
    pub fn create_rc_qp(&self, cq: &'d Cq<'d>) -> Result<Qp<'_>> {
        let mut init = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.cq,
            recv_cq: cq.cq,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: 16,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
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
    mr: *mut IbvMr,
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
    cq: *mut IbvCq,
}

impl Drop for Cq<'_> {
    fn drop(&mut self) {
        // SAFETY: QPs borrow the CQ, so none is left.
        unsafe { (self.d.v.f.destroy_cq)(self.cq) };
    }
}

/// An RC queue pair.
pub struct Qp<'p> {
    pd: &'p Pd<'p>,
    qp: *mut IbvQp,
    cq: &'p Cq<'p>,
}

/// One RDMA transfer: `len` bytes between the local `[laddr, +len)` of
/// `lkey` and the remote `[raddr, +len)` of `rkey`; `opcode` is
/// `IBV_WR_RDMA_WRITE` (local to remote) or `IBV_WR_RDMA_READ`.
#[derive(Debug, Clone, Copy)]
pub struct RdmaOp {
    pub opcode: u32,
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
    pub mtu: u32,
    /// RoCE: the GID and its index.
    pub gid: Option<(IbvGid, u8)>,
}

impl<'p> Qp<'p> {
    pub fn qp_num(&self) -> u32 {
        // SAFETY: `qp` is live until drop.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(&self, attr: &mut IbvQpAttr, mask: c_int, what: &str) -> Result<()> {
        // SAFETY: `attr` is valid for the call.
        let rc = unsafe { (self.pd.d.v.f.modify_qp)(self.qp, attr, mask) };
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

    /// Back to RESET (validate --fault qp-reset: a post must then fail
    /// with a named cause, not hang).
    pub fn reset(&self) -> Result<()> {
        let mut a = IbvQpAttr {
            qp_state: IBV_QPS_RESET,
            ..Default::default()
        };
        self.modify(&mut a, IBV_QP_STATE, "to RESET")
    }

    /// RESET -> INIT -> RTR -> RTS, connected to itself.
    pub fn connect_loopback(&self, l: &Loopback) -> Result<()> {
        let mut a = IbvQpAttr {
            qp_state: IBV_QPS_INIT,
            port_num: l.port,
            qp_access_flags: ACCESS_RW as u32,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            "to INIT",
        )?;
        let mut a = IbvQpAttr {
            qp_state: IBV_QPS_RTR,
            path_mtu: l.mtu,
            dest_qp_num: self.qp_num(),
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.dlid = l.lid;
        a.ah_attr.port_num = l.port;
        if let Some((gid, idx)) = l.gid {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = gid;
            a.ah_attr.grh.sgid_index = idx;
            a.ah_attr.grh.hop_limit = 1;
        }
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            "to RTR",
        )?;
        let mut a = IbvQpAttr {
            qp_state: IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
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
        let (opcode, laddr, lkey, raddr, rkey) = (op.opcode, op.laddr, op.lkey, op.raddr, op.rkey);
        let len = op.len as u32;
        let mut sge = IbvSge {
            addr: laddr,
            length: len,
            lkey,
        };
        let mut wr = IbvSendWr {
            wr_id: 1,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode,
            send_flags: IBV_SEND_SIGNALED,
            imm_data: 0,
            rdma_remote_addr: raddr,
            rdma_rkey: rkey,
            _wr_pad: 0,
            _wr_rest: [0; 2],
            qp_type_xrc: 0,
            _pad: 0,
            _tail: [0; 6],
        };
        let mut bad: *mut IbvSendWr = std::ptr::null_mut();
        // SAFETY: the QP's context is live; ops[OPS_POST_SEND] is the
        // provider's post_send (offset checked against verbs.h by the
        // layout test); `wr` and `sge` outlive the call.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            let post: PostSend = std::mem::transmute((*ctx).ops[OPS_POST_SEND]);
            post(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(err(Op::PostSend, "ibv_post_send", rc.abs(), ""));
        }
        let start = Instant::now();
        loop {
            let mut wc = IbvWc::default();
            // SAFETY: as above, ops[OPS_POLL_CQ] is the provider's poll_cq;
            // `wc` has room for one completion.
            let n = unsafe {
                let ctx = (*self.cq.cq).context;
                let poll: PollCq = std::mem::transmute((*ctx).ops[OPS_POLL_CQ]);
                poll(self.cq.cq, 1, &mut wc)
            };
            if n < 0 {
                return Err(err(
                    Op::Completion,
                    "ibv_poll_cq",
                    0,
                    format!("returned {n}"),
                ));
            }
            if n == 1 {
                if wc.status != IBV_WC_SUCCESS {
                    return Err(err(
                        Op::Completion,
                        "work completion",
                        0,
                        format!(
                            "status {} ({}), vendor error 0x{:x}",
                            wc.status,
                            wc_status_name(wc.status),
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

/// `ibv_wc_status_str` names of the common statuses.
pub fn wc_status_name(s: u32) -> &'static str {
    match s {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        _ => "other error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <infiniband/verbs.h>
#define S(t) printf("sizeof_" #t " %zu\n", sizeof(struct t));
#define O(t, f) printf("offsetof_" #t "_" #f " %zu\n", offsetof(struct t, f));
#define V(n) printf(#n " %ld\n", (long)(n));
int main(void)
{
	S(ibv_mr) S(ibv_qp_cap) S(ibv_qp_init_attr) S(ibv_global_route)
	S(ibv_ah_attr) S(ibv_qp_attr) S(ibv_sge) S(ibv_send_wr) S(ibv_wc)
	O(ibv_context, ops.poll_cq) O(ibv_context, ops.post_send)
	O(ibv_cq, context) O(ibv_qp, context) O(ibv_qp, qp_num)
	O(ibv_mr, lkey) O(ibv_mr, rkey) O(ibv_mr, length)
	O(ibv_port_attr, active_mtu) O(ibv_port_attr, gid_tbl_len)
	O(ibv_port_attr, max_msg_sz) O(ibv_port_attr, lid)
	O(ibv_port_attr, link_layer) O(ibv_port_attr, port_cap_flags2)
	O(ibv_qp_init_attr, cap) O(ibv_qp_init_attr, qp_type)
	O(ibv_qp_attr, dest_qp_num) O(ibv_qp_attr, ah_attr)
	O(ibv_qp_attr, pkey_index) O(ibv_qp_attr, port_num)
	O(ibv_qp_attr, timeout) O(ibv_qp_attr, rnr_retry)
	O(ibv_qp_attr, rate_limit) O(ibv_ah_attr, dlid) O(ibv_ah_attr, is_global)
	O(ibv_ah_attr, port_num) O(ibv_global_route, sgid_index)
	O(ibv_send_wr, num_sge) O(ibv_send_wr, opcode) O(ibv_send_wr, send_flags)
	O(ibv_send_wr, wr.rdma.remote_addr) O(ibv_send_wr, wr.rdma.rkey)
	O(ibv_wc, status) O(ibv_wc, vendor_err) O(ibv_wc, qp_num)
	V(IBV_ACCESS_LOCAL_WRITE) V(IBV_ACCESS_REMOTE_WRITE) V(IBV_ACCESS_REMOTE_READ)
	V(IBV_QPT_RC) V(IBV_QPS_RESET) V(IBV_QPS_INIT) V(IBV_QPS_RTR) V(IBV_QPS_RTS)
	V(IBV_QP_STATE) V(IBV_QP_ACCESS_FLAGS) V(IBV_QP_PKEY_INDEX) V(IBV_QP_PORT)
	V(IBV_QP_AV) V(IBV_QP_PATH_MTU) V(IBV_QP_TIMEOUT) V(IBV_QP_RETRY_CNT)
	V(IBV_QP_RNR_RETRY) V(IBV_QP_RQ_PSN) V(IBV_QP_MAX_QP_RD_ATOMIC)
	V(IBV_QP_MIN_RNR_TIMER) V(IBV_QP_SQ_PSN) V(IBV_QP_MAX_DEST_RD_ATOMIC)
	V(IBV_QP_DEST_QPN) V(IBV_WR_RDMA_WRITE) V(IBV_WR_RDMA_READ)
	V(IBV_SEND_SIGNALED) V(IBV_WC_SUCCESS) V(IBV_PORT_ACTIVE)
	V(IBV_LINK_LAYER_ETHERNET) V(IBV_WC_REM_ACCESS_ERR)
	return 0;
}
"#;

    /// Compiles the probe against the system's verbs.h. `None` (and a
    /// message) when there is no C compiler or no libibverbs-dev.
    fn c_values() -> Option<BTreeMap<String, i64>> {
        if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
            eprintln!("SKIP: no /usr/include/infiniband/verbs.h (install libibverbs-dev)");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("verbs-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        let exe = dir.join("probe");
        std::fs::write(&src, PROBE).unwrap();
        let st = match Command::new("cc")
            .args(["-Wall", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("SKIP: no C compiler: {e}");
                return None;
            }
        };
        assert!(st.success(), "the verbs layout probe did not compile");
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        Some(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| {
                    let (k, v) = l.split_once(' ').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect(),
        )
    }

    #[test]
    fn layout_matches_system_header() {
        let Some(c) = c_values() else { return };
        let ptr = size_of::<*const c_void>();
        let ours: Vec<(&str, i64)> = vec![
            ("sizeof_ibv_mr", size_of::<IbvMr>() as i64),
            ("sizeof_ibv_qp_cap", size_of::<IbvQpCap>() as i64),
            ("sizeof_ibv_qp_init_attr", size_of::<IbvQpInitAttr>() as i64),
            (
                "sizeof_ibv_global_route",
                size_of::<IbvGlobalRoute>() as i64,
            ),
            ("sizeof_ibv_ah_attr", size_of::<IbvAhAttr>() as i64),
            ("sizeof_ibv_qp_attr", size_of::<IbvQpAttr>() as i64),
            ("sizeof_ibv_sge", size_of::<IbvSge>() as i64),
            ("sizeof_ibv_send_wr", size_of::<IbvSendWr>() as i64),
            ("sizeof_ibv_wc", size_of::<IbvWc>() as i64),
            (
                "offsetof_ibv_context_ops.poll_cq",
                (offset_of!(IbvContext, ops) + OPS_POLL_CQ * ptr) as i64,
            ),
            (
                "offsetof_ibv_context_ops.post_send",
                (offset_of!(IbvContext, ops) + OPS_POST_SEND * ptr) as i64,
            ),
            ("offsetof_ibv_cq_context", offset_of!(IbvCq, context) as i64),
            ("offsetof_ibv_qp_context", offset_of!(IbvQp, context) as i64),
            ("offsetof_ibv_qp_qp_num", offset_of!(IbvQp, qp_num) as i64),
            ("offsetof_ibv_mr_lkey", offset_of!(IbvMr, lkey) as i64),
            ("offsetof_ibv_mr_rkey", offset_of!(IbvMr, rkey) as i64),
            ("offsetof_ibv_mr_length", offset_of!(IbvMr, length) as i64),
            (
                "offsetof_ibv_port_attr_active_mtu",
                offset_of!(IbvPortAttr, active_mtu) as i64,
            ),
            (
                "offsetof_ibv_port_attr_gid_tbl_len",
                offset_of!(IbvPortAttr, gid_tbl_len) as i64,
            ),
            (
                "offsetof_ibv_port_attr_max_msg_sz",
                offset_of!(IbvPortAttr, max_msg_sz) as i64,
            ),
            (
                "offsetof_ibv_port_attr_lid",
                offset_of!(IbvPortAttr, lid) as i64,
            ),
            (
                "offsetof_ibv_port_attr_link_layer",
                offset_of!(IbvPortAttr, link_layer) as i64,
            ),
            (
                "offsetof_ibv_port_attr_port_cap_flags2",
                offset_of!(IbvPortAttr, port_cap_flags2) as i64,
            ),
            (
                "offsetof_ibv_qp_init_attr_cap",
                offset_of!(IbvQpInitAttr, cap) as i64,
            ),
            (
                "offsetof_ibv_qp_init_attr_qp_type",
                offset_of!(IbvQpInitAttr, qp_type) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_dest_qp_num",
                offset_of!(IbvQpAttr, dest_qp_num) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_ah_attr",
                offset_of!(IbvQpAttr, ah_attr) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_pkey_index",
                offset_of!(IbvQpAttr, pkey_index) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_port_num",
                offset_of!(IbvQpAttr, port_num) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_timeout",
                offset_of!(IbvQpAttr, timeout) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_rnr_retry",
                offset_of!(IbvQpAttr, rnr_retry) as i64,
            ),
            (
                "offsetof_ibv_qp_attr_rate_limit",
                offset_of!(IbvQpAttr, rate_limit) as i64,
            ),
            (
                "offsetof_ibv_ah_attr_dlid",
                offset_of!(IbvAhAttr, dlid) as i64,
            ),
            (
                "offsetof_ibv_ah_attr_is_global",
                offset_of!(IbvAhAttr, is_global) as i64,
            ),
            (
                "offsetof_ibv_ah_attr_port_num",
                offset_of!(IbvAhAttr, port_num) as i64,
            ),
            (
                "offsetof_ibv_global_route_sgid_index",
                offset_of!(IbvGlobalRoute, sgid_index) as i64,
            ),
            (
                "offsetof_ibv_send_wr_num_sge",
                offset_of!(IbvSendWr, num_sge) as i64,
            ),
            (
                "offsetof_ibv_send_wr_opcode",
                offset_of!(IbvSendWr, opcode) as i64,
            ),
            (
                "offsetof_ibv_send_wr_send_flags",
                offset_of!(IbvSendWr, send_flags) as i64,
            ),
            (
                "offsetof_ibv_send_wr_wr.rdma.remote_addr",
                offset_of!(IbvSendWr, rdma_remote_addr) as i64,
            ),
            (
                "offsetof_ibv_send_wr_wr.rdma.rkey",
                offset_of!(IbvSendWr, rdma_rkey) as i64,
            ),
            ("offsetof_ibv_wc_status", offset_of!(IbvWc, status) as i64),
            (
                "offsetof_ibv_wc_vendor_err",
                offset_of!(IbvWc, vendor_err) as i64,
            ),
            ("offsetof_ibv_wc_qp_num", offset_of!(IbvWc, qp_num) as i64),
            ("IBV_ACCESS_LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE as i64),
            ("IBV_ACCESS_REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE as i64),
            ("IBV_ACCESS_REMOTE_READ", IBV_ACCESS_REMOTE_READ as i64),
            ("IBV_QPT_RC", IBV_QPT_RC as i64),
            ("IBV_QPS_RESET", IBV_QPS_RESET as i64),
            ("IBV_QPS_INIT", IBV_QPS_INIT as i64),
            ("IBV_QPS_RTR", IBV_QPS_RTR as i64),
            ("IBV_QPS_RTS", IBV_QPS_RTS as i64),
            ("IBV_QP_STATE", IBV_QP_STATE as i64),
            ("IBV_QP_ACCESS_FLAGS", IBV_QP_ACCESS_FLAGS as i64),
            ("IBV_QP_PKEY_INDEX", IBV_QP_PKEY_INDEX as i64),
            ("IBV_QP_PORT", IBV_QP_PORT as i64),
            ("IBV_QP_AV", IBV_QP_AV as i64),
            ("IBV_QP_PATH_MTU", IBV_QP_PATH_MTU as i64),
            ("IBV_QP_TIMEOUT", IBV_QP_TIMEOUT as i64),
            ("IBV_QP_RETRY_CNT", IBV_QP_RETRY_CNT as i64),
            ("IBV_QP_RNR_RETRY", IBV_QP_RNR_RETRY as i64),
            ("IBV_QP_RQ_PSN", IBV_QP_RQ_PSN as i64),
            ("IBV_QP_MAX_QP_RD_ATOMIC", IBV_QP_MAX_QP_RD_ATOMIC as i64),
            ("IBV_QP_MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER as i64),
            ("IBV_QP_SQ_PSN", IBV_QP_SQ_PSN as i64),
            (
                "IBV_QP_MAX_DEST_RD_ATOMIC",
                IBV_QP_MAX_DEST_RD_ATOMIC as i64,
            ),
            ("IBV_QP_DEST_QPN", IBV_QP_DEST_QPN as i64),
            ("IBV_WR_RDMA_WRITE", IBV_WR_RDMA_WRITE as i64),
            ("IBV_WR_RDMA_READ", IBV_WR_RDMA_READ as i64),
            ("IBV_SEND_SIGNALED", IBV_SEND_SIGNALED as i64),
            ("IBV_WC_SUCCESS", IBV_WC_SUCCESS as i64),
            ("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE as i64),
            ("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET as i64),
            ("IBV_WC_REM_ACCESS_ERR", 10),
        ];
        let mut bad = Vec::new();
        for (k, v) in &ours {
            match c.get(*k) {
                Some(cv) if cv == v => {}
                other => bad.push(format!("{k}: rust={v} c={other:?}")),
            }
        }
        assert!(
            bad.is_empty(),
            "verbs mirror differs from verbs.h:\n{}",
            bad.join("\n")
        );
        assert_eq!(c.len(), ours.len());
        // Our port attr buffer must be at least as large as the header's.
        assert!(size_of::<IbvPortAttr>() >= 56);
    }

    #[test]
    fn load_gives_a_value_not_a_panic() {
        // With rdma-core installed this loads; without, it must be an error
        // value naming libibverbs.
        match Verbs::load() {
            Ok(v) => {
                // No RDMA device on a build host is a clean error too.
                if let Err(e) = v.open(Some("no-such-device")) {
                    assert!(matches!(e.op, Op::DeviceList | Op::OpenDevice), "{e}");
                }
            }
            Err(e) => assert!(e.to_string().contains("libibverbs"), "{e}"),
        }
    }
}
