// SPDX-License-Identifier: GPL-2.0
//! Which GPUDirect RDMA path NCCL and UCX take on this node, per GPU and per
//! installed release: dma-buf, peer memory (a client such as this module),
//! or none; and whether the NVIDIA driver's PCI topology gate refuses a GPU.
//!
//! Both libraries prefer dma-buf and fall back to peer memory: NCCL sets
//! `useDmaBuf` whenever its probe succeeds, peer memory loaded or not
//! (`src/transport/net.cc`); UCX registers CUDA memory with every memory
//! domain that takes dma-buf once a dma-buf provider exists for it
//! (`src/ucp/core/ucp_context.c`). So where dma-buf works, this module is
//! not needed by them. Neither library reads a kernel version or config:
//! each calls `ibv_reg_dmabuf_mr` with fd -1 and takes EBADF as "supported"
//! (NCCL `net_ib/gdr.cc`, UCX `uct_ib_md_check_dmabuf`), so dma-buf works
//! exactly where every layer below has it:
//! - the NVIDIA driver exports GPU memory as dma-buf with the open kernel
//!   modules only (GPU Operator's prerequisites,
//!   `gpu-operator/gpu-operator-rdma.rst`); the open modules' `nv-dmabuf.c`
//!   is there from their first release, 515.43.04. Where CUDA was probed,
//!   its `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` answers per GPU, and both
//!   libraries need a CUDA driver API of 11.7 or later;
//! - the kernel imports dma-buf into an RDMA memory region with
//!   `ib_umem_dmabuf_get`, in mainline from 5.12, built with the user
//!   verbs (`CONFIG_INFINIBAND_USER_MEM`, which selects
//!   `CONFIG_DMA_SHARED_BUFFER`); distributions and OFED backport it, so
//!   the symbol in `/proc/kallsyms` decides where it can be read. NVIDIA's
//!   exporter has no `pin` operation, so `CONFIG_DMABUF_MOVE_NOTIFY`, which
//!   only changes how dynamic exporters are handled, plays no part;
//! - rdma-core added `ibv_reg_dmabuf_mr` and its mlx5 provider's
//!   implementation in release 34 (`libibverbs.so.1.<abi>.<release>.0`
//!   names the release);
//! - the NIC's kernel driver implements dma-buf memory regions: mlx5 does
//!   from 5.12; doctor knows no other driver's support and says so;
//! - NCCL uses dma-buf from 2.13 unless `NCCL_DMABUF_ENABLE=0` (its
//!   environment or `/etc/nccl.conf`); UCX registers dma-buf from 1.14, but
//!   only in protocols v2, its default from 1.16.0 (UCX NEWS), where
//!   `UCX_CUDA_COPY_DMABUF` (default `try`) can turn it off.
//!
//! The topology gate (driver 580.65.06 and later, `nv-pci.c`
//! `nv_grdma_pci_topology_supported`) refuses dma-buf and peer memory
//! alike: on a host whose chipset the driver flags as incapable of PCIe
//! peer-to-peer (Grace TH500, Ampere Altra, AmpereOne-160, found by a host
//! or PCI bridge's vendor and device ID in the driver's chipset table) it
//! allows RDMA between a non-coherent GPU and a peer only when the two have
//! an upstream bridge in common, unless the `nvidia` module parameter
//! `NVreg_GrdmaPciTopoCheckOverride` says 1 (allow) or 2 (deny). A
//! coherent GPU (reached over C2C) and a passthrough VM are exempt.

use serde_json::{json, Value};

use super::libraries::{self, History, Install, Version};
use super::pci::{self, PciDevice};
use super::{buildenv, install, Nic, SysRoot};
use crate::gpuinfo::CudaView;
use crate::report::{Check, Verdict};

/// The driver release that introduced the topology gate.
pub const GATE_FROM: Version = Version(580, 65, 6);

/// The driver parameter that overrides the gate.
pub const OVERRIDE: &str = "NVreg_GrdmaPciTopoCheckOverride";

/// The chipsets the driver flags as incapable of PCIe peer-to-peer, as
/// (vendor, device IDs, name): `chipsetInfo[]` in `nvcst.h`, the same from
/// 580.65.06 to 595.45.04. AmpereOne-192 (0xE208-0xE20C) is not flagged.
const GATED_CHIPSETS: &[(&str, &[&str], &str)] = &[
    (
        "0x10de",
        &["0x22b1", "0x22b2", "0x22b3", "0x22b4", "0x22b8", "0x22b9"],
        "Grace (TH500)",
    ),
    (
        "0x1def",
        &["0xe000", "0xe00d", "0xe00e", "0xe010", "0xe100", "0xe110"],
        "Ampere Altra",
    ),
    (
        "0x1def",
        &[
            "0xe200", "0xe201", "0xe202", "0xe203", "0xe204", "0xe205", "0xe206", "0xe207",
        ],
        "AmpereOne-160",
    ),
];

/// The first releases with dma-buf: NCCL; UCX (protocols v2 only); UCX by
/// default; rdma-core's `ibv_reg_dmabuf_mr`; the kernel's import; the
/// driver's export; the CUDA driver API both libraries require
/// (`cuDriverGetVersion` form).
const NCCL_DMABUF: Version = Version(2, 13, 0);
const UCX_DMABUF_V2: Version = Version(1, 14, 0);
const UCX_DMABUF: Version = Version(1, 16, 0);
const RDMA_CORE_DMABUF: u32 = 34;
const KERNEL_DMABUF: (u32, u32) = (5, 12);
const DRIVER_DMABUF: u32 = 515;
const CUDA_DMABUF: i32 = 11070;

/// One fact behind the dma-buf verdict, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    Yes(String),
    No(String),
    /// What could not be read.
    Unknown(String),
}

impl Fact {
    fn json(&self) -> Value {
        match self {
            Fact::Yes(s) => json!({"state": "yes", "why": s}),
            Fact::No(s) => json!({"state": "no", "why": s}),
            Fact::Unknown(s) => json!({"state": "unknown", "why": s}),
        }
    }

    /// All of `facts` together: no when one is no (every such reason),
    /// unknown when none is no and one is unknown, else yes.
    fn all(facts: &[Fact]) -> Fact {
        let pick = |f: fn(&Fact) -> Option<&String>| -> Vec<String> {
            facts.iter().filter_map(f).cloned().collect()
        };
        let no = pick(|f| match f {
            Fact::No(s) => Some(s),
            _ => None,
        });
        let unknown = pick(|f| match f {
            Fact::Unknown(s) => Some(s),
            _ => None,
        });
        let yes = pick(|f| match f {
            Fact::Yes(s) => Some(s),
            _ => None,
        });
        if !no.is_empty() {
            Fact::No(no.join("; "))
        } else if !unknown.is_empty() {
            Fact::Unknown(unknown.join("; "))
        } else {
            Fact::Yes(yes.join(", "))
        }
    }
}

/// The loaded NVIDIA driver, from `/proc/driver/nvidia/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    pub version: Option<Version>,
    /// The version as the driver writes it (`580.65.06`).
    pub text: Option<String>,
    /// `Some(true)`: open kernel modules; `None`: the line names neither.
    pub open: Option<bool>,
}

/// The driver's flavour and version: its first line names the open
/// modules "Open Kernel Module", the proprietary ones "Kernel Module".
pub fn driver(r: &SysRoot) -> Option<Driver> {
    let first = r
        .read("/proc/driver/nvidia/version")
        .and_then(|t| t.lines().next().map(str::to_string));
    let module = r.read("/sys/module/nvidia/version");
    if first.is_none() && module.is_none() {
        return None;
    }
    let line = first.unwrap_or_default();
    let open = if line.contains("Open Kernel Module") {
        Some(true)
    } else if line.contains("Kernel Module") {
        Some(false)
    } else {
        None
    };
    let text = module.or_else(|| {
        line.split_whitespace()
            .find(|w| w.contains('.') && Version::parse(w).is_some())
            .map(str::to_string)
    });
    let version = text.as_deref().and_then(Version::parse);
    Some(Driver {
        version,
        text,
        open,
    })
}

fn driver_fact(d: Option<&Driver>) -> Fact {
    let Some(d) = d else {
        return Fact::Unknown("no NVIDIA driver loaded (/proc/driver/nvidia/version)".into());
    };
    let v = d.text.as_deref().unwrap_or("of unknown version");
    match d.open {
        Some(false) => Fact::No(format!(
            "driver {v}: proprietary kernel modules (dma-buf export needs the open ones)"
        )),
        None => Fact::Unknown(format!(
            "driver {v}: /proc/driver/nvidia/version names neither flavour"
        )),
        Some(true) => match d.version {
            Some(ver) if ver.0 < DRIVER_DMABUF => Fact::No(format!(
                "driver {v}: older than {DRIVER_DMABUF}, the first with dma-buf export"
            )),
            _ => Fact::Yes(format!("open kernel modules {v}")),
        },
    }
}

/// What CUDA said of the GPU at `bdf`, where it was probed.
fn cuda_fact(cuda: Option<&CudaView>, bdf: &str) -> Option<Fact> {
    let c = cuda.filter(|c| c.error.is_none())?;
    if let Some(v) = c.driver_version.filter(|v| *v < CUDA_DMABUF) {
        return Some(Fact::No(format!(
            "CUDA driver API {}.{}, older than 11.7",
            v / 1000,
            v % 1000 / 10
        )));
    }
    let g = c
        .gpus
        .iter()
        .find(|g| g.pci_bus_id.eq_ignore_ascii_case(bdf))?;
    match g.dma_buf_supported {
        Some(true) => Some(Fact::Yes("CUDA: DMA_BUF_SUPPORTED".into())),
        Some(false) => Some(Fact::No("CUDA says DMA_BUF_SUPPORTED = 0".into())),
        None => None,
    }
}

/// The kernel's dma-buf import for RDMA.
fn kernel_fact(r: &SysRoot) -> Fact {
    if let Some(k) = r.read("/proc/kallsyms") {
        let has = |s: &str| k.lines().any(|l| l.split_whitespace().nth(2) == Some(s));
        if has("ib_umem_dmabuf_get") {
            return Fact::Yes("kernel: ib_umem_dmabuf_get".into());
        }
        if has("ib_umem_get") {
            return Fact::No(
                "the loaded RDMA core has no ib_umem_dmabuf_get (no dma-buf import)".into(),
            );
        }
    }
    let Some(kver) = install::kernel_release(r) else {
        return Fact::Unknown("kernel release unreadable (/proc/sys/kernel/osrelease)".into());
    };
    let mut nums = kver
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (nums.next(), nums.next()) else {
        return Fact::Unknown(format!("kernel release {kver} unparsed"));
    };
    if (major, minor) < KERNEL_DMABUF {
        return Fact::Unknown(format!(
            "Linux {kver} predates 5.12's dma-buf import and /proc/kallsyms does not say whether it was backported (load ib_uverbs, run as root)"
        ));
    }
    let config = [
        format!("/boot/config-{kver}"),
        format!("/lib/modules/{kver}/build/.config"),
    ]
    .iter()
    .find_map(|p| r.read(p))
    .or_else(|| buildenv::proc_config(r));
    let ofed = r.ofed_info().is_some();
    match config {
        Some(c) if buildenv::config_value(&c, "DMA_SHARED_BUFFER") != Some("y") => {
            Fact::No(format!("Linux {kver} without CONFIG_DMA_SHARED_BUFFER"))
        }
        // OFED builds its own ib_uverbs, whatever the kernel's RDMA config.
        Some(c) if buildenv::config_value(&c, "INFINIBAND_USER_MEM") != Some("y") && ofed => {
            Fact::Unknown(format!(
                "Linux {kver} has no inbox user verbs, and whether OFED's ib_uverbs imports dma-buf shows only in /proc/kallsyms (load ib_uverbs, run as root)"
            ))
        }
        Some(c) if buildenv::config_value(&c, "INFINIBAND_USER_MEM") != Some("y") => {
            Fact::No(format!(
                "Linux {kver} without CONFIG_INFINIBAND_USER_MEM (no user-memory verbs)"
            ))
        }
        Some(_) => Fact::Yes(format!("Linux {kver} with CONFIG_INFINIBAND_USER_MEM")),
        // Every 5.12+ kernel with user verbs has the import.
        None => Fact::Yes(format!("Linux {kver} >= 5.12")),
    }
}

/// The rdma-core release of a libibverbs file name
/// (`libibverbs.so.1.14.44.0` -> 44).
fn rdma_core_release(name: &str) -> Option<u32> {
    name.strip_prefix("libibverbs.so.1.")?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// rdma-core's `ibv_reg_dmabuf_mr`: by the release in libibverbs' file
/// name (or the one it links to), by Debian's package, else by whether the
/// library holds the symbol's name.
fn verbs_fact(r: &SysRoot) -> Fact {
    let mut unnamed = None;
    for dir in libraries::lib_dirs(r) {
        for name in r.list(&dir) {
            if !name.starts_with("libibverbs.so") {
                continue;
            }
            let path = format!("{dir}/{name}");
            let target = std::fs::read_link(r.path(&path))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            let release =
                rdma_core_release(&name).or_else(|| target.as_deref().and_then(rdma_core_release));
            match release {
                Some(v) => return release_fact(v, &path),
                None => {
                    unnamed.get_or_insert(path);
                }
            }
        }
    }
    if let Some(i) = libraries::dpkg(r, &["libibverbs1"]).first() {
        if let Some(v) = i.version {
            return release_fact(v.0, &i.source);
        }
    }
    let Some(path) = unnamed else {
        return Fact::Unknown("no libibverbs found (library folders, Debian packages)".into());
    };
    match r.read_bytes(&path, 16 << 20) {
        Some(b) if b.windows(17).any(|w| w == b"ibv_reg_dmabuf_mr") => {
            Fact::Yes(format!("{path} has ibv_reg_dmabuf_mr"))
        }
        Some(_) => Fact::No(format!("{path} has no ibv_reg_dmabuf_mr")),
        None => Fact::Unknown(format!("{path} unreadable")),
    }
}

fn release_fact(v: u32, source: &str) -> Fact {
    if v >= RDMA_CORE_DMABUF {
        Fact::Yes(format!("rdma-core {v}"))
    } else {
        Fact::No(format!(
            "rdma-core {v} ({source}) predates ibv_reg_dmabuf_mr ({RDMA_CORE_DMABUF})"
        ))
    }
}

/// The kernel driver of RDMA device `name`: its PCI function's `uevent`
/// says `DRIVER=`, else the `driver` link names it.
fn nic_driver(r: &SysRoot, name: &str) -> Option<String> {
    let dev = format!("/sys/class/infiniband/{name}/device");
    r.read(&format!("{dev}/uevent"))
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DRIVER=").map(str::to_string))
        })
        .or_else(|| {
            r.resolve(&format!("{dev}/driver"))
                .and_then(|p| p.rsplit('/').next().map(str::to_string))
        })
}

fn nic_fact(r: &SysRoot, nic: Option<&Nic>) -> Fact {
    let Some(n) = nic else {
        return Fact::Unknown("no RDMA device (/sys/class/infiniband)".into());
    };
    match nic_driver(r, &n.name).as_deref() {
        Some("mlx5_core") => Fact::Yes(format!("{} (mlx5_core)", n.name)),
        Some(d) => Fact::Unknown(format!(
            "{}'s driver {d}: doctor knows dma-buf support of mlx5 only",
            n.name
        )),
        None => Fact::Unknown(format!("{}'s kernel driver unreadable", n.name)),
    }
}

/// The topology gate for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It does not apply (why).
    Open(String),
    /// It applies: NICs it lets through and those it refuses, and in
    /// whose name (the chipset, or the override).
    Applies {
        allowed: Vec<String>,
        refused: Vec<String>,
        how: String,
    },
    Unknown(String),
}

/// The facts the gate is decided from.
struct GateInputs {
    driver: Option<Driver>,
    /// The flagged chipset and the bridge that shows it.
    chipset: Option<(&'static str, String)>,
    /// `None` when the parameter cannot be read.
    override_: Option<u32>,
}

/// A host or PCI bridge whose IDs the driver's chipset table flags.
fn gated_chipset(r: &SysRoot) -> Option<(&'static str, String)> {
    r.list("/sys/bus/pci/devices").into_iter().find_map(|bdf| {
        let base = format!("/sys/bus/pci/devices/{bdf}");
        let class = r.read(&format!("{base}/class")).unwrap_or_default();
        if !(class.starts_with("0x0600") || class.starts_with("0x0604")) {
            return None;
        }
        let vendor = r.read(&format!("{base}/vendor"))?.to_ascii_lowercase();
        let device = r.read(&format!("{base}/device"))?.to_ascii_lowercase();
        GATED_CHIPSETS
            .iter()
            .find(|(v, ids, _)| *v == vendor && ids.contains(&device.as_str()))
            .map(|(_, _, name)| (*name, format!("{bdf} {vendor}:{device}")))
    })
}

/// `NVreg_GrdmaPciTopoCheckOverride`: the driver's params file, else the
/// module parameter.
fn override_value(r: &SysRoot) -> Option<u32> {
    r.read("/proc/driver/nvidia/params")
        .and_then(|p| {
            p.lines().find_map(|l| {
                l.strip_prefix("GrdmaPciTopoCheckOverride:")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .or_else(|| {
            r.read(&format!("/sys/module/nvidia/parameters/{OVERRIDE}"))
                .and_then(|v| v.parse().ok())
        })
}

/// The deepest bridge above both `a` and `b`, as the driver looks for one
/// (`nv_pci_has_common_pci_switch` walks each device's upstream bridges,
/// root ports included; the host bridge is no PCI device).
fn common_bridge(a: &PciDevice, b: &PciDevice) -> Option<String> {
    if a.path[0] != b.path[0] {
        return None;
    }
    let bridges = |d: &PciDevice| d.path[1..d.path.len().saturating_sub(1)].to_vec();
    let (x, y) = (bridges(a), bridges(b));
    x.iter()
        .zip(&y)
        .take_while(|(p, q)| p == q)
        .last()
        .map(|(p, _)| p.clone())
}

fn gate_for(g: &GateInputs, gpu: &PciDevice, nics: &[Nic]) -> Gate {
    let Some(d) = &g.driver else {
        return Gate::Unknown(
            "no NVIDIA driver loaded: its version decides whether the gate exists (580.65.06 and later)"
                .into(),
        );
    };
    let (Some(version), Some(v)) = (d.version, d.text.as_deref()) else {
        return Gate::Unknown("the driver's version is unreadable".into());
    };
    if version < GATE_FROM {
        return Gate::Open(format!("driver {v} predates the gate (580.65.06)"));
    }
    let Some((chipset, bridge)) = &g.chipset else {
        return Gate::Open("no Grace, Ampere Altra or AmpereOne-160 chipset on the PCI bus".into());
    };
    let pci_nics: Vec<(&str, &PciDevice)> = nics
        .iter()
        .filter_map(|n| n.pci.as_ref().map(|p| (n.name.as_str(), p)))
        .collect();
    match g.override_ {
        Some(1) => return Gate::Open(format!("{OVERRIDE}=1 allows every GPU and NIC")),
        Some(2) => {
            return Gate::Applies {
                allowed: Vec::new(),
                refused: pci_nics.iter().map(|(n, _)| n.to_string()).collect(),
                how: format!("{OVERRIDE}=2 denies every GPU and NIC"),
            }
        }
        _ => {}
    }
    if pci_nics.is_empty() {
        return Gate::Unknown("no RDMA NIC on the PCI bus to check against".into());
    }
    let (mut allowed, mut refused) = (Vec::new(), Vec::new());
    for (name, nic) in &pci_nics {
        match common_bridge(gpu, nic) {
            Some(b) => allowed.push(format!("{name} (common bridge {b})")),
            None => refused.push(name.to_string()),
        }
    }
    let mut how = format!(
        "driver {v} on {chipset} (bridge {bridge}) allows GPUDirect RDMA only between a GPU and a NIC with a common upstream bridge"
    );
    if g.override_.is_none() {
        how.push_str(&format!("; {OVERRIDE} unreadable, taken as 0"));
    }
    Gate::Applies {
        allowed,
        refused,
        how,
    }
}

/// The RDMA devices nearest to `gpu` first, those the gate refuses left
/// out.
fn nics_for<'a>(gpu: &PciDevice, nics: &'a [Nic], gate: &Gate) -> Vec<&'a Nic> {
    let mut v: Vec<&Nic> = nics
        .iter()
        .filter(|n| match gate {
            Gate::Applies { refused, .. } => !refused.contains(&n.name),
            _ => true,
        })
        .collect();
    // Devices without a PCI function (soft-RoCE) last.
    v.sort_by_key(|n| {
        let link = n.pci.as_ref().map(|p| pci::classify(gpu, p));
        (link.is_none(), link)
    });
    v
}

/// What one GPU offers for dma-buf, below the libraries.
struct GpuFacts {
    bdf: String,
    gate: Gate,
    /// The gate refuses this GPU with every NIC.
    refused: bool,
    dmabuf: Fact,
    facts: Vec<Fact>,
}

fn gpu_facts(
    r: &SysRoot,
    cuda: Option<&CudaView>,
    g: &GateInputs,
    gpu: &PciDevice,
    nics: &[Nic],
    node: &[Fact],
) -> GpuFacts {
    let gate = gate_for(g, gpu, nics);
    let refused = matches!(&gate, Gate::Applies { allowed, .. } if allowed.is_empty());
    let near = nics_for(gpu, nics, &gate);
    let mut facts = node.to_vec();
    facts.extend(cuda_fact(cuda, &gpu.bdf));
    facts.push(nic_fact(r, near.first().copied()));
    GpuFacts {
        bdf: gpu.bdf.clone(),
        dmabuf: Fact::all(&facts),
        gate,
        refused,
        facts,
    }
}

/// Whether a library's release takes dma-buf when everything below has it.
fn library_dmabuf(r: &SysRoot, name: &str, v: Version) -> Fact {
    let env = |k: &str| r.is_live().then(|| std::env::var(k).ok()).flatten();
    if name == "NCCL" {
        if v < NCCL_DMABUF {
            return Fact::No(format!("NCCL {v} predates its dma-buf support (2.13)"));
        }
        let conf = r.read("/etc/nccl.conf").and_then(|c| {
            c.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("NCCL_DMABUF_ENABLE=")
                    .map(|v| v.trim().to_string())
            })
        });
        if conf.as_deref() == Some("0") {
            return Fact::No("NCCL_DMABUF_ENABLE=0 in /etc/nccl.conf".into());
        }
        if env("NCCL_DMABUF_ENABLE").as_deref() == Some("0") {
            return Fact::No("NCCL_DMABUF_ENABLE=0 in doctor's environment".into());
        }
        return Fact::Yes(format!("NCCL {v}"));
    }
    if v < UCX_DMABUF_V2 {
        return Fact::No(format!("UCX {v} predates its dma-buf support (1.14)"));
    }
    if v < UCX_DMABUF {
        return Fact::No(format!(
            "UCX {v} registers dma-buf only with UCX_PROTO_ENABLE=y (protocols v2, its default from 1.16.0)"
        ));
    }
    if env("UCX_CUDA_COPY_DMABUF").is_some_and(|v| matches!(v.as_str(), "n" | "no" | "0" | "off")) {
        return Fact::No("UCX_CUDA_COPY_DMABUF=no in doctor's environment".into());
    }
    Fact::Yes(format!("UCX {v}"))
}

/// The path one release takes for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    DmaBuf,
    Peer,
    NoPath,
    Refused,
    Unknown,
}

impl Route {
    fn name(&self) -> &'static str {
        match self {
            Route::DmaBuf => "dmabuf",
            Route::Peer => "peer_memory",
            Route::NoPath => "none",
            Route::Refused => "refused",
            Route::Unknown => "unknown",
        }
    }

    fn verdict(&self) -> Verdict {
        match self {
            Route::DmaBuf | Route::Peer => Verdict::Pass,
            Route::NoPath | Route::Refused => Verdict::Fail,
            Route::Unknown => Verdict::Skip,
        }
    }
}

/// The route and its words for release `v` of library `name` on GPU `g`.
fn route(
    r: &SysRoot,
    name: &str,
    label: &str,
    history: History,
    v: Version,
    g: &GpuFacts,
) -> (Route, String) {
    if g.refused {
        return (
            Route::Refused,
            format!(
                "none: the driver's topology gate refuses this GPU with every NIC ({OVERRIDE})"
            ),
        );
    }
    let present = |p: &str| r.exists(p);
    let peer = libraries::decide(history, v, &present).via;
    let lib = library_dmabuf(r, name, v);
    match (Fact::all(&[lib, g.dmabuf.clone()]), peer) {
        (Fact::Yes(_), Some(via)) => (
            Route::DmaBuf,
            format!("dma-buf; this module is not needed for {name} (peer memory via {via} stays its fallback)"),
        ),
        (Fact::Yes(_), None) => (
            Route::DmaBuf,
            format!("dma-buf; this module is not needed for {name}"),
        ),
        (Fact::No(why), Some(via)) => (
            Route::Peer,
            format!("peer memory (via {via}), the only path: no dma-buf: {why}"),
        ),
        (Fact::No(why), None) => (
            Route::NoPath,
            format!("none: no dma-buf: {why}; and {label} sees no peer-memory client"),
        ),
        (Fact::Unknown(what), Some(via)) => (
            Route::Unknown,
            format!("unknown: peer memory (via {via}) unless dma-buf works; dma-buf unknown: {what}"),
        ),
        (Fact::Unknown(what), None) => (
            Route::Unknown,
            format!("unknown: dma-buf or none; dma-buf unknown: {what}"),
        ),
    }
}

/// One library's line: for each installation, each GPU's path.
fn judge(
    r: &SysRoot,
    name: &str,
    id: &'static str,
    history: History,
    installs: &[Install],
    gpus: &[GpuFacts],
) -> Check {
    let title = format!("{name}'s GPUDirect RDMA path");
    if gpus.is_empty() {
        return Check::skip(
            id,
            title,
            "unknown: no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices)",
        );
    }
    // Where none is installed, what a current release would take.
    let current = [Install {
        version: Some(Version(u32::MAX, 0, 0)),
        source: String::new(),
    }];
    let (installs, found) = if installs.is_empty() {
        (&current[..], false)
    } else {
        (installs, true)
    };
    let mut verdict = Verdict::Skip;
    let mut parts = Vec::new();
    let mut data = Vec::new();
    let mut fix = None;
    for i in installs {
        let who = match (found, i.version) {
            (false, _) => format!("no {name} found; a current {name} would take"),
            (true, Some(v)) => format!("{name} {v} ({})", i.source),
            (true, None) => format!("{name} of unknown version ({})", i.source),
        };
        let Some(v) = i.version else {
            parts.push(format!("{who}: unknown: its version decides"));
            data.push(json!({"source": i.source, "version": null, "path": "unknown"}));
            continue;
        };
        let label = if found {
            format!("{name} {v}")
        } else {
            format!("a current {name}")
        };
        // GPUs with the same words are said once.
        let mut groups: Vec<(Vec<&str>, String)> = Vec::new();
        for g in gpus {
            let (route, words) = route(r, name, &label, history, v, g);
            if found {
                verdict = verdict.max(route.verdict());
            }
            match route {
                Route::Refused => {
                    fix.get_or_insert_with(gate_fix);
                }
                Route::NoPath => {
                    fix.get_or_insert_with(|| format!(
                        "make one path work: dma-buf (open NVIDIA kernel modules, Linux >= 5.12, rdma-core >= 34, NCCL >= 2.13 / UCX >= 1.16) or a peer-memory client {label} sees (the line \"{name} will use GPUDirect RDMA (by its version)\")"
                    ));
                }
                _ => {}
            }
            data.push(json!({
                "source": i.source,
                "version": found.then(|| v.to_string()),
                "gpu": g.bdf,
                "path": route.name(),
                "detail": words,
                "dmabuf_facts": g.facts.iter().map(Fact::json).collect::<Vec<_>>(),
            }));
            match groups.iter_mut().find(|(_, w)| *w == words) {
                Some((bdfs, _)) => bdfs.push(&g.bdf),
                None => groups.push((vec![&g.bdf], words)),
            }
        }
        for (bdfs, words) in groups {
            let s = if bdfs.len() > 1 { "s" } else { "" };
            parts.push(format!("{who}: GPU{s} {}: {words}", bdfs.join(", ")));
        }
    }
    let mut c = Check::new(id, title, verdict, parts.join("; ")).data(json!(data));
    if let Some(f) = fix {
        c = c.fix(f);
    }
    c
}

fn gate_fix() -> String {
    format!("set the nvidia module parameter {OVERRIDE}=1 (options nvidia {OVERRIDE}=1 in /etc/modprobe.d, then reload nvidia), or put GPU and NIC under one PCIe switch")
}

/// The gate's line: per GPU, the NICs it lets through and refuses.
fn gate_check(r: &SysRoot, gpus: &[GpuFacts], chipset: Option<&(&'static str, String)>) -> Check {
    const ID: &str = "grdma_topology";
    const T: &str = "Driver's GPUDirect RDMA topology gate (580.65.06+, Grace/Altra/AmpereOne)";
    let arch = r.read("/proc/sys/kernel/arch");
    if gpus.is_empty() {
        return Check::skip(
            ID,
            T,
            "unknown: no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices)",
        );
    }
    let mut data = Vec::new();
    let mut parts = Vec::new();
    let mut verdict = Verdict::Pass;
    let mut open = None;
    let mut unknown = Vec::new();
    // A GPU reached over C2C passes whatever its PCI path; sysfs does not
    // show which a Grace host's GPU is.
    let grace = chipset.is_some_and(|(n, _)| n.starts_with("Grace"));
    let caveat = if grace {
        " unless it is coherent over C2C (a Grace Hopper/Blackwell superchip's own GPU)"
    } else {
        ""
    };
    for g in gpus {
        match &g.gate {
            Gate::Open(why) => {
                open.get_or_insert_with(|| why.clone());
                data.push(json!({"gpu": g.bdf, "gate": "does not apply", "why": why}));
            }
            Gate::Unknown(why) => {
                unknown.push(format!("GPU {}: {why}", g.bdf));
                data.push(json!({"gpu": g.bdf, "gate": "unknown", "why": why}));
            }
            Gate::Applies {
                allowed,
                refused,
                how,
            } => {
                data.push(json!({"gpu": g.bdf, "gate": "applies", "how": how, "allowed": allowed, "refused": refused}));
                if allowed.is_empty() {
                    verdict = verdict.max(if grace { Verdict::Warn } else { Verdict::Fail });
                    parts.push(format!(
                        "GPU {}: refused with {}{caveat}, dma-buf and peer memory alike: {how}",
                        g.bdf,
                        if refused.is_empty() {
                            "every NIC".to_string()
                        } else {
                            refused.join(", ")
                        }
                    ));
                } else {
                    let mut s = format!("GPU {}: allowed with {}", g.bdf, allowed.join(", "));
                    if !refused.is_empty() {
                        s.push_str(&format!(", refused with {}", refused.join(", ")));
                    }
                    parts.push(s);
                }
            }
        }
    }
    let data = json!({"arch": arch, "chipset": chipset.map(|c| c.0), "chipset_bridge": chipset.map(|c| &c.1), "gpus": data});
    if parts.is_empty() {
        return match (open, unknown.is_empty()) {
            (Some(why), true) => Check::pass(ID, T, format!("does not apply: {why}")),
            _ => Check::skip(ID, T, format!("unknown: {}", unknown.join("; "))),
        }
        .data(data);
    }
    parts.extend(unknown);
    let c = Check::new(ID, T, verdict, parts.join("; ")).data(data);
    if verdict == Verdict::Pass {
        c
    } else {
        c.fix(gate_fix())
    }
}

/// doctor's lines: the topology gate, then NCCL's and UCX's path.
pub fn checks(
    r: &SysRoot,
    cuda: Option<&CudaView>,
    gpus: &[PciDevice],
    nics: &[Nic],
) -> Vec<Check> {
    let d = driver(r);
    let node = [driver_fact(d.as_ref()), kernel_fact(r), verbs_fact(r)];
    let inputs = GateInputs {
        driver: d,
        chipset: gated_chipset(r),
        override_: override_value(r),
    };
    let facts: Vec<GpuFacts> = gpus
        .iter()
        .map(|g| gpu_facts(r, cuda, &inputs, g, nics, &node))
        .collect();
    vec![
        gate_check(r, &facts, inputs.chipset.as_ref()),
        judge(
            r,
            "NCCL",
            "nccl_path",
            libraries::NCCL_HISTORY,
            &libraries::find_nccl(r),
            &facts,
        ),
        judge(
            r,
            "UCX",
            "ucx_path",
            libraries::UCX_HISTORY,
            &libraries::find_ucx(r),
            &facts,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use crate::doctor::sysroot::test_root;

    const OPEN_580: &str = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n";
    const PROPRIETARY_580: &str =
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025\n";
    const KALLSYMS_DMABUF: &str = "0000000000000000 T ib_umem_get\t[ib_uverbs]\n0000000000000000 T ib_umem_dmabuf_get\t[ib_uverbs]\n";
    const SYS_MODULE: &str = "/sys/module/nvidia_peermem/version";

    /// A node made of files, PCI functions and their sysfs links.
    struct Node {
        t: tempfile::TempDir,
        r: SysRoot,
    }

    impl Node {
        fn new(files: &[(&str, &str)]) -> Self {
            let (t, r) = test_root(files);
            Node { t, r }
        }

        fn link(&self, from: &str, to: &std::path::Path) {
            let f = self.t.path().join(from.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            symlink(to, f).unwrap();
        }

        /// A PCI function below host bridge `host`, `chain` being the
        /// bridges above it and then itself.
        fn pci(&self, host: &str, chain: &[&str], ids: (&str, &str), class: &str) -> PathBuf {
            let d = self
                .t
                .path()
                .join(format!("sys/devices/{host}/{}", chain.join("/")));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [("vendor", ids.0), ("device", ids.1), ("class", class)] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
            let bdf = chain.last().unwrap();
            self.link(&format!("/sys/bus/pci/devices/{bdf}"), &d);
            d
        }

        fn bridge(&self, host: &str, chain: &[&str], ids: (&str, &str)) {
            self.pci(host, chain, ids, "0x060400");
        }

        fn gpu(&self, host: &str, chain: &[&str]) {
            self.pci(host, chain, ("0x10de", "0x2330"), "0x030200");
        }

        fn nic(&self, host: &str, chain: &[&str], name: &str) {
            let d = self.pci(host, chain, ("0x15b3", "0x1021"), "0x020700");
            std::fs::write(d.join("uevent"), "DRIVER=mlx5_core\nPCI_ID=15B3:1021\n").unwrap();
            self.link(&format!("/sys/class/infiniband/{name}/device"), &d);
        }

        /// GPU and NIC below one PCIe switch on an x86 root port.
        fn switch_board(self) -> Self {
            let h = "pci0000:00";
            let rp = ("0x8086", "0x352a");
            let sw = ("0x10b5", "0xc010");
            self.bridge(h, &["0000:00:01.0"], rp);
            self.bridge(h, &["0000:00:01.0", "0000:01:00.0"], sw);
            self.bridge(h, &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"], sw);
            self.bridge(h, &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"], sw);
            self.gpu(
                h,
                &[
                    "0000:00:01.0",
                    "0000:01:00.0",
                    "0000:02:00.0",
                    "0000:03:00.0",
                ],
            );
            self.nic(
                h,
                &[
                    "0000:00:01.0",
                    "0000:01:00.0",
                    "0000:02:01.0",
                    "0000:04:00.0",
                ],
                "mlx5_0",
            );
            self
        }

        /// An Ampere Altra host: GPU and NIC each on a root port of its own.
        fn altra_board(self) -> Self {
            let h = "pci0000:00";
            let rp = ("0x1def", "0xe100");
            self.bridge(h, &["0000:00:01.0"], rp);
            self.bridge(h, &["0000:00:02.0"], rp);
            self.gpu(h, &["0000:00:01.0", "0000:01:00.0"]);
            self.nic(h, &["0000:00:02.0", "0000:02:00.0"], "mlx5_0");
            self
        }

        fn checks(&self) -> Vec<Check> {
            let gpus = pci::gpus(&self.r);
            let nics: Vec<Nic> = self
                .r
                .list("/sys/class/infiniband")
                .into_iter()
                .map(|name| Nic {
                    pci: pci::device_at(&self.r, &format!("/sys/class/infiniband/{name}/device")),
                    name,
                })
                .collect();
            checks(&self.r, None, &gpus, &nics)
        }

        fn check(&self, id: &str) -> Check {
            self.checks()
                .into_iter()
                .find(|c| c.id == id)
                .unwrap_or_else(|| panic!("no check {id}"))
        }
    }

    /// A dma-buf-capable x86 node: open modules, a 6.8 kernel with the
    /// import, rdma-core 50, ConnectX; NCCL 2.23.4 and the module loaded.
    fn dmabuf_node(extra: &[(&str, &str)]) -> Node {
        let mut files = vec![
            ("/proc/driver/nvidia/version", OPEN_580),
            ("/proc/sys/kernel/osrelease", "6.8.0-50-generic\n"),
            ("/proc/sys/kernel/arch", "x86_64\n"),
            ("/proc/kallsyms", KALLSYMS_DMABUF),
            ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", ""),
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4", ""),
            (SYS_MODULE, "25.10.0\n"),
        ];
        for (p, t) in extra {
            match files.iter_mut().find(|(q, _)| q == p) {
                Some(f) => f.1 = t,
                None => files.push((p, t)),
            }
        }
        Node::new(&files).switch_board()
    }

    #[test]
    fn dmabuf_serves_nccl_and_this_module_is_not_needed() {
        let n = dmabuf_node(&[]);
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert_eq!(
            c.detail,
            "NCCL 2.23.4 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4): GPU 0000:03:00.0: dma-buf; this module is not needed for NCCL (peer memory via /sys/module/nvidia_peermem/version stays its fallback)"
        );
        assert_eq!(c.data[0]["path"], "dmabuf");
        assert_eq!(
            c.data[0]["dmabuf_facts"][0]["why"],
            "open kernel modules 580.65.06"
        );
        // No UCX installed: what a current one would take, not a verdict.
        let u = n.check("ucx_path");
        assert_eq!(u.verdict, Verdict::Skip);
        assert_eq!(
            u.detail,
            "no UCX found; a current UCX would take: GPU 0000:03:00.0: dma-buf; this module is not needed for UCX (peer memory via /sys/module/nvidia_peermem/version stays its fallback)"
        );
        // x86: no flagged chipset, the gate does not apply.
        let g = n.check("grdma_topology");
        assert_eq!(g.verdict, Verdict::Pass);
        assert!(
            g.detail.starts_with("does not apply: no Grace"),
            "{}",
            g.detail
        );
    }

    #[test]
    fn proprietary_driver_leaves_peer_memory() {
        let n = dmabuf_node(&[("/proc/driver/nvidia/version", PROPRIETARY_580)]);
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(
            c.detail.ends_with(
                "GPU 0000:03:00.0: peer memory (via /sys/module/nvidia_peermem/version), the only path: no dma-buf: driver 580.65.06: proprietary kernel modules (dma-buf export needs the open ones)"
            ),
            "{}",
            c.detail
        );
        // Without a client NCCL sees: no path at all.
        std::fs::remove_file(n.r.path(SYS_MODULE)).unwrap();
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert!(
            c.detail
                .contains("GPU 0000:03:00.0: none: no dma-buf: driver 580.65.06: proprietary"),
            "{}",
            c.detail
        );
        assert!(c
            .fix
            .as_deref()
            .is_some_and(|f| f.starts_with("make one path work")));
    }

    #[test]
    fn old_nccl_and_ucx_take_peer_memory() {
        let n = dmabuf_node(&[
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4", ""),
            ("/usr/lib/libnccl.so.2.12.12", ""),
            ("/sys/kernel/mm/memory_peers/nv_mem/version", "25.10.0\n"),
            ("/ucx_info.txt", "# Library version: 1.15.0\n"),
        ]);
        let c = n.check("nccl_path");
        assert!(
            c.detail.contains(
                "NCCL 2.12.12 (/usr/lib/libnccl.so.2.12.12): GPU 0000:03:00.0: peer memory (via /sys/kernel/mm/memory_peers/nv_mem/version), the only path: no dma-buf: NCCL 2.12.12 predates its dma-buf support (2.13)"
            ),
            "{}",
            c.detail
        );
        // The newer NCCL beside it takes dma-buf.
        assert!(c.detail.contains("NCCL 2.23.4 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4): GPU 0000:03:00.0: dma-buf"), "{}", c.detail);
        let u = n.check("ucx_path");
        assert_eq!(u.verdict, Verdict::Pass, "{}", u.detail);
        assert!(
            u.detail.contains("peer memory (via /sys/kernel/mm/memory_peers/nv_mem/version), the only path: no dma-buf: UCX 1.15.0 registers dma-buf only with UCX_PROTO_ENABLE=y"),
            "{}",
            u.detail
        );
    }

    #[test]
    fn no_gpu_is_unknown() {
        let n = Node::new(&[
            ("/proc/sys/kernel/osrelease", "6.8.0-50-generic\n"),
            ("/usr/lib/libnccl.so.2.23.4", ""),
        ]);
        for id in ["nccl_path", "ucx_path", "grdma_topology"] {
            let c = n.check(id);
            assert_eq!(c.verdict, Verdict::Skip, "{id}");
            assert_eq!(
                c.detail, "unknown: no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices)",
                "{id}"
            );
        }
        // A GPU but no driver, no libibverbs, no NIC: unknown, each missing
        // fact named.
        let n = Node::new(&[
            ("/proc/sys/kernel/osrelease", "6.8.0-50-generic\n"),
            ("/usr/lib/libnccl.so.2.23.4", ""),
        ]);
        n.gpu("pci0000:00", &["0000:00:01.0", "0000:01:00.0"]);
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Skip, "{}", c.detail);
        assert!(
            c.detail.ends_with("unknown: dma-buf or none; dma-buf unknown: no NVIDIA driver loaded (/proc/driver/nvidia/version); no libibverbs found (library folders, Debian packages); no RDMA device (/sys/class/infiniband)"),
            "{}",
            c.detail
        );
    }

    fn arm_node(extra: &[(&str, &str)]) -> Node {
        let mut files = vec![
            (
                "/proc/driver/nvidia/version",
                "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Sun Jul 27 06:54:38 UTC 2025\n",
            ),
            ("/proc/driver/nvidia/params", "ResmanDebugLevel: 4294967295\nGrdmaPciTopoCheckOverride: 0\nRegistryDwords: \"\"\n"),
            ("/proc/sys/kernel/osrelease", "6.8.0-1013-nvidia-64k\n"),
            ("/proc/sys/kernel/arch", "aarch64\n"),
            ("/proc/kallsyms", KALLSYMS_DMABUF),
            ("/usr/lib/aarch64-linux-gnu/libibverbs.so.1.14.50.0", ""),
            ("/usr/lib/aarch64-linux-gnu/libnccl.so.2.27.7", ""),
        ];
        for (p, t) in extra {
            match files.iter_mut().find(|(q, _)| q == p) {
                Some(f) => f.1 = t,
                None => files.push((p, t)),
            }
        }
        Node::new(&files).altra_board()
    }

    #[test]
    fn arm_topology_gate_refuses_gpu_and_nic_without_a_common_switch() {
        let n = arm_node(&[]);
        let g = n.check("grdma_topology");
        assert_eq!(g.verdict, Verdict::Fail, "{}", g.detail);
        assert_eq!(
            g.detail,
            "GPU 0000:01:00.0: refused with mlx5_0, dma-buf and peer memory alike: driver 580.65.06 on Ampere Altra (bridge 0000:00:01.0 0x1def:0xe100) allows GPUDirect RDMA only between a GPU and a NIC with a common upstream bridge"
        );
        assert!(
            g.fix.as_deref().is_some_and(|f| f
                .starts_with("set the nvidia module parameter NVreg_GrdmaPciTopoCheckOverride=1")),
            "{:?}",
            g.fix
        );
        assert_eq!(g.data["chipset"], "Ampere Altra");
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert!(
            c.detail.ends_with("GPU 0000:01:00.0: none: the driver's topology gate refuses this GPU with every NIC (NVreg_GrdmaPciTopoCheckOverride)"),
            "{}",
            c.detail
        );
        // Before 580.65.06 there is no gate.
        let n = arm_node(&[(
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  575.64.05  Release Build\n",
        )]);
        let g = n.check("grdma_topology");
        assert_eq!(g.verdict, Verdict::Pass, "{}", g.detail);
        assert_eq!(
            g.detail,
            "does not apply: driver 575.64.05 predates the gate (580.65.06)"
        );
        assert_eq!(n.check("nccl_path").verdict, Verdict::Pass);
    }

    #[test]
    fn arm_topology_gate_allows_with_the_override_or_a_common_switch() {
        let n = arm_node(&[(
            "/proc/driver/nvidia/params",
            "GrdmaPciTopoCheckOverride: 1\n",
        )]);
        let g = n.check("grdma_topology");
        assert_eq!(g.verdict, Verdict::Pass, "{}", g.detail);
        assert_eq!(
            g.detail,
            "does not apply: NVreg_GrdmaPciTopoCheckOverride=1 allows every GPU and NIC"
        );
        let c = n.check("nccl_path");
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(
            c.detail
                .ends_with("GPU 0000:01:00.0: dma-buf; this module is not needed for NCCL"),
            "{}",
            c.detail
        );
        // The module parameter, where the params file is not readable.
        let n = arm_node(&[("/proc/driver/nvidia/params", "")]);
        std::fs::remove_file(n.r.path("/proc/driver/nvidia/params")).unwrap();
        let p =
            n.r.path("/sys/module/nvidia/parameters/NVreg_GrdmaPciTopoCheckOverride");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "1\n").unwrap();
        assert_eq!(n.check("grdma_topology").verdict, Verdict::Pass);
        // A NIC on the GPU's switch passes the gate without the override;
        // one on another root port does not.
        let n = Node::new(&[
            ("/proc/driver/nvidia/version", OPEN_580),
            ("/proc/sys/kernel/arch", "aarch64\n"),
        ]);
        let (h, rp, sw) = ("pci0000:00", ("0x1def", "0xe100"), ("0x10b5", "0xc010"));
        n.bridge(h, &["0000:00:01.0"], rp);
        n.bridge(h, &["0000:00:02.0"], rp);
        n.bridge(h, &["0000:00:01.0", "0000:01:00.0"], sw);
        n.bridge(h, &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"], sw);
        n.bridge(h, &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"], sw);
        n.gpu(
            h,
            &[
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
            ],
        );
        n.nic(
            h,
            &[
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:01.0",
                "0000:04:00.0",
            ],
            "mlx5_1",
        );
        n.nic(h, &["0000:00:02.0", "0000:05:00.0"], "mlx5_0");
        let g = n.check("grdma_topology");
        assert!(
            g.detail.contains("GPU 0000:03:00.0: allowed with mlx5_1 (common bridge 0000:01:00.0), refused with mlx5_0"),
            "{}",
            g.detail
        );
    }

    #[test]
    fn rdma_core_release_from_the_file_name() {
        assert_eq!(rdma_core_release("libibverbs.so.1.14.44.0"), Some(44));
        assert_eq!(rdma_core_release("libibverbs.so.1.11.32.0"), Some(32));
        assert_eq!(rdma_core_release("libibverbs.so.1"), None);
        let n = Node::new(&[("/usr/lib64/libibverbs.so.1.11.32.0", "")]);
        assert_eq!(
            verbs_fact(&n.r),
            Fact::No(
                "rdma-core 32 (/usr/lib64/libibverbs.so.1.11.32.0) predates ibv_reg_dmabuf_mr (34)"
                    .into()
            )
        );
        // A file that names no release: the symbol's name in it decides.
        let n = Node::new(&[(
            "/usr/lib64/libibverbs.so.1",
            "\0ibv_reg_mr\0ibv_reg_dmabuf_mr\0",
        )]);
        assert_eq!(
            verbs_fact(&n.r),
            Fact::Yes("/usr/lib64/libibverbs.so.1 has ibv_reg_dmabuf_mr".into())
        );
    }

    #[test]
    fn kernel_import_from_kallsyms_then_version_and_config() {
        let n = Node::new(&[("/proc/kallsyms", "0 T ib_umem_get\t[ib_uverbs]\n")]);
        assert!(matches!(kernel_fact(&n.r), Fact::No(_)));
        let n = Node::new(&[("/proc/sys/kernel/osrelease", "5.4.0-216-generic\n")]);
        assert!(matches!(kernel_fact(&n.r), Fact::Unknown(_)));
        let n = Node::new(&[
            ("/proc/sys/kernel/osrelease", "6.1.0-30-amd64\n"),
            (
                "/boot/config-6.1.0-30-amd64",
                "CONFIG_INFINIBAND_USER_MEM=y\nCONFIG_DMA_SHARED_BUFFER=y\n",
            ),
        ]);
        assert_eq!(
            kernel_fact(&n.r),
            Fact::Yes("Linux 6.1.0-30-amd64 with CONFIG_INFINIBAND_USER_MEM".into())
        );
        let no_ib = "# CONFIG_INFINIBAND is not set\nCONFIG_DMA_SHARED_BUFFER=y\n";
        let n = Node::new(&[
            ("/proc/sys/kernel/osrelease", "6.1.0-30-amd64\n"),
            ("/boot/config-6.1.0-30-amd64", no_ib),
        ]);
        assert!(matches!(kernel_fact(&n.r), Fact::No(_)));
        // Unless OFED brings its own ib_uverbs.
        let n = Node::new(&[
            ("/proc/sys/kernel/osrelease", "6.1.0-30-amd64\n"),
            ("/boot/config-6.1.0-30-amd64", no_ib),
            ("/ofed_info.txt", "OFED-internal-24.10-1.1.4:\n"),
        ]);
        assert!(matches!(kernel_fact(&n.r), Fact::Unknown(_)));
    }
}
