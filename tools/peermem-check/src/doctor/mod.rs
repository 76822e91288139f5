// SPDX-License-Identifier: GPL-2.0
//! `peermem-check doctor`: every check gives pass / warn / fail (or skip)
//! and a one-line fix. All inputs come from a [`SysRoot`] (so tests run the
//! checks against fixture trees) plus an optional CUDA view.

pub mod buildenv;
pub mod bundle;
pub mod dmesg;
pub mod install;
pub mod kernels;
pub mod libraries;
pub mod node;
pub mod path;
pub mod pci;
pub mod sysroot;

use serde_json::json;

use crate::gpuinfo::{ordering_name, CudaView, WRITES_ORDERING_OWNER};
use crate::report::{Check, Verdict};
use pci::{Acs, Link, PciDevice, ACS_CR, ACS_RR};
pub use sysroot::SysRoot;

/// Peer-memory client modules we know, and who made them.
pub const CLIENTS: &[(&str, &str)] = &[
    ("nvidia_peermem_rs", "nvidia-peermem-rs (this project)"),
    ("nvidia_peermem", "NVIDIA's nvidia-peermem"),
    ("nv_peer_mem", "Mellanox's legacy nv_peer_mem"),
];

/// The files NCCL's IB transport tests, in its order, to decide whether
/// to use GPUDirect RDMA: it only asks whether one exists.
pub const NCCL_PATHS: &[&str] = &[
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
];

/// The files UCX's IB memory domain tests for the same decision.
pub const UCX_PATHS: &[&str] = &[
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/module/nvidia_peermem/version",
    "/sys/module/nv_peer_mem/version",
];

/// The line doctor and validate print about NCCL and UCX.
pub const VISIBILITY_TITLE: &str = "NCCL / UCX will use GPUDirect RDMA";

/// The oldest driver branch whose P2P page tables the module reads.
pub const MIN_DRIVER_MAJOR: u32 = 515;

/// BAR1 smaller than this limits how much GPU memory can be exposed.
const BAR1_SMALL: u64 = 256 << 20;

/// What doctor looks at.
pub struct Inputs {
    pub root: SysRoot,
    /// `None`: CUDA was not probed (skip the attribute check).
    pub cuda: Option<CudaView>,
}

/// Runs every check, in a fixed order.
pub fn run(inp: &Inputs) -> Vec<Check> {
    let r = &inp.root;
    let gpus = pci::gpus(r);
    let nics = rdma_nics(r);
    let mut checks = vec![
        nvidia_driver(r, &gpus),
        peer_memory_client(r),
        buildenv::kernel_build_env(r),
        node::installed_modules(r),
        install::dkms_state(r),
    ];
    // The running kernel's lines above; the kernel the next boot starts
    // may be another: one line for each installed kernel.
    checks.extend(kernels::checks(r));
    checks.extend([
        install::systemd_unit(r),
        install::modprobe_target(r),
        node::secure_boot_check(r),
        p2p_page_table(r),
        gpudirect_visibility(r),
    ]);
    // Which NCCL and UCX are installed, and whether their versions test
    // the files the line above found (doctor/libraries.rs).
    checks.extend(libraries::checks(r));
    // Which path, dma-buf or peer memory, each of them takes per GPU, and
    // the driver's topology gate that can refuse both (doctor/path.rs).
    checks.extend(path::checks(r, inp.cuda.as_ref(), &gpus, &nics));
    checks.extend([
        peerdirect_core(r),
        peerdirect_support(r),
        rdma_devices(r),
        iommu(r, &gpus),
        pcie_topology(&gpus, &nics),
        acs(r, &gpus, &nics),
        bar1(r, &gpus),
        gpu_attributes(inp.cuda.as_ref()),
        kernel_log(r),
    ]);
    if r.exists(peermem_sim::uapi::PEERMEM_SIM_DEVICE) {
        checks.push(Check::pass(
            "simulated_stack",
            "Simulated stack (test VM)",
            "/dev/peermem_sim is present: the GPU and NIC here are simulated; prove the data path with validate --backend sim",
        ));
    }
    checks
}

/// Who made loaded client module `m`: the drop-in build of this project
/// takes NVIDIA's name (nvidia_peermem) and is told apart by the parameter
/// NVIDIA's module does not have.
pub fn implementation(r: &SysRoot, m: &str) -> &'static str {
    if m == "nvidia_peermem" && r.exists("/sys/module/nvidia_peermem/parameters/coalesce_sg") {
        return "nvidia-peermem-rs drop-in, under NVIDIA's name";
    }
    CLIENTS.iter().find(|(n, _)| *n == m).map_or("", |c| c.1)
}

/// The loaded peer-memory client modules.
pub fn loaded_clients(r: &SysRoot) -> Vec<&'static str> {
    CLIENTS
        .iter()
        .filter(|(m, _)| r.exists(&format!("/sys/module/{m}")))
        .map(|(m, _)| *m)
        .collect()
}

fn nvidia_driver(r: &SysRoot, gpus: &[PciDevice]) -> Check {
    const T: &str = "NVIDIA driver";
    let proc_version = r
        .read("/proc/driver/nvidia/version")
        .and_then(|s| s.lines().next().map(str::to_string));
    let mod_version = r.read("/sys/module/nvidia/version");
    if proc_version.is_none() && mod_version.is_none() {
        let why = if gpus.is_empty() {
            "not loaded, and no NVIDIA GPU on the PCI bus".to_string()
        } else {
            format!("not loaded ({} NVIDIA GPU(s) on the PCI bus)", gpus.len())
        };
        return Check::fail("nvidia_driver", T, why)
            .fix("install the NVIDIA driver (R535+; open kernel modules for dma-buf) and modprobe nvidia")
            .data(json!({"loaded": false, "gpus_on_bus": gpus.len()}));
    }
    let text = proc_version.clone().unwrap_or_default();
    let version = mod_version.clone().or_else(|| {
        text.split_whitespace()
            .find(|w| {
                w.chars().filter(|c| *c == '.').count() >= 1
                    && w.chars().next().is_some_and(|c| c.is_ascii_digit())
            })
            .map(str::to_string)
    });
    let flavour = if text.contains("Open Kernel Module") {
        "open"
    } else if text.contains("Kernel Module") {
        "proprietary"
    } else {
        "unknown"
    };
    let v = version.clone().unwrap_or_else(|| "unknown version".into());
    let data =
        json!({"loaded": true, "version": version, "flavour": flavour, "gpus_on_bus": gpus.len()});
    // Before 515 the P2P page table is older than any the module reads: it
    // refuses every registration (kmod/p2p.rs).
    let major = version
        .as_deref()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    if let Some(m) = major.filter(|m| *m < MIN_DRIVER_MAJOR) {
        return Check::fail(
            "nvidia_driver",
            T,
            format!("{v}, {flavour} kernel modules: older than {MIN_DRIVER_MAJOR}; nvidia_peermem_rs refuses its P2P page tables (driver {m})"),
        )
        .fix(format!("install NVIDIA driver {MIN_DRIVER_MAJOR} or newer (R535+ recommended)"))
        .data(data);
    }
    match flavour {
        "proprietary" => Check::pass(
            "nvidia_driver",
            T,
            format!("{v}, proprietary kernel modules (the dma-buf path needs the open ones)"),
        )
        .data(data),
        _ => Check::pass("nvidia_driver", T, format!("{v}, {flavour} kernel modules")).data(data),
    }
}

/// The P2P page table version a driver of `version` ("580.65.06") stamps,
/// from NVIDIA's open kernel modules history (nv-p2p.h): 0x00020000 from
/// 580.65.06 on, 0x00010002 from 515 to 575.x; `None` if older or unknown.
pub fn page_table_version_of_driver(version: &str) -> Option<u32> {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    match major {
        m if m > 580 => Some(0x0002_0000),
        580 if minor >= 65 => Some(0x0002_0000),
        515..=580 => Some(0x0001_0002),
        _ => None,
    }
}

/// The page table versions nvidia_peermem_rs reads (kmod/p2p.rs).
pub const RS_PAGE_TABLES: (u32, u32) = (0x0001_0002, 0x0002_0000);

/// Whether nvidia_peermem_rs reads page table `v`.
pub fn rs_reads_page_table(v: u32) -> bool {
    matches!(v >> 16, 1 if v >= RS_PAGE_TABLES.0) || v >> 16 == 2
}

fn p2p_page_table(r: &SysRoot) -> Check {
    const T: &str = "P2P page table version";
    let driver = r.read("/sys/module/nvidia/version").or_else(|| {
        r.read("/proc/driver/nvidia/version").and_then(|t| {
            t.split_whitespace()
                .find(|w| w.contains('.') && w.starts_with(|c: char| c.is_ascii_digit()))
                .map(str::to_string)
        })
    });
    // What our module saw, when it is loaded and debugfs is readable.
    let stat = |k: &str| {
        r.read("/sys/kernel/debug/nvidia_peermem_rs/stats")
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
            })
    };
    let seen = stat("page_table_version ")
        .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .filter(|v| *v != 0);
    let expected = driver.as_deref().and_then(page_table_version_of_driver);
    let version = seen.or(expected);
    let loaded = loaded_clients(r);
    let data = json!({
        "driver": driver,
        "page_table_version": version.map(|v| format!("{v:#010x}")),
        "seen_by_module": seen.is_some(),
        "nvidia_peermem_rs_reads": format!("{:#010x}-{:#010x}", RS_PAGE_TABLES.0, RS_PAGE_TABLES.1),
    });
    let Some(v) = version else {
        return Check::skip(
            "p2p_page_table",
            T,
            match driver {
                Some(d) => format!("driver {d}: page table version unknown (older than 515?)"),
                None => "no NVIDIA driver version to read".to_string(),
            },
        )
        .data(data);
    };
    let how = if seen.is_some() {
        "seen by nvidia_peermem_rs"
    } else {
        "from the driver version"
    };
    if loaded.contains(&"nvidia_peermem_rs") && !rs_reads_page_table(v) {
        return Check::fail(
            "p2p_page_table",
            T,
            format!(
                "{v:#010x} ({how}): the loaded nvidia_peermem_rs reads {:#010x} to {:#010x} and refuses every registration",
                RS_PAGE_TABLES.0, RS_PAGE_TABLES.1
            ),
        )
        .fix("update nvidia-peermem-rs to a release that supports this driver")
        .data(data);
    }
    Check::pass(
        "p2p_page_table",
        T,
        format!(
            "{v:#010x} ({how}); nvidia_peermem_rs reads {:#010x} to {:#010x}{}",
            RS_PAGE_TABLES.0,
            RS_PAGE_TABLES.1,
            if rs_reads_page_table(v) {
                ""
            } else {
                ": NOT this one"
            }
        ),
    )
    .data(data)
}

fn client_params(r: &SysRoot, m: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut params = serde_json::Map::new();
    for p in r.list(&format!("/sys/module/{m}/parameters")) {
        if let Some(v) = r.read(&format!("/sys/module/{m}/parameters/{p}")) {
            params.insert(p, json!(v));
        }
    }
    params
}

fn peer_memory_client(r: &SysRoot) -> Check {
    const T: &str = "Peer-memory client";
    let loaded = loaded_clients(r);
    let registered = r.list("/sys/kernel/mm/memory_peers");
    let data = json!({
        "loaded": loaded.iter().map(|m| json!({
            "module": m,
            "implementation": implementation(r, m),
            "version": r.read(&format!("/sys/module/{m}/version")),
            "parameters": client_params(r, m),
        })).collect::<Vec<_>>(),
        "registered_with_core": registered,
    });
    match loaded.as_slice() {
        [] => Check::fail(
            "peer_memory_client",
            T,
            "no peer-memory client module is loaded",
        )
        .fix("modprobe nvidia-peermem (this project's default install, or NVIDIA's)")
        .data(data),
        [m] => {
            let who = implementation(r, m);
            let params: Vec<String> = client_params(r, m)
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            let detail = format!(
                "{m} loaded ({who}){}",
                if params.is_empty() {
                    String::new()
                } else {
                    format!(", {}", params.join(" "))
                }
            );
            if *m == "nv_peer_mem" {
                Check::warn("peer_memory_client", T, detail)
                    .fix("nv_peer_mem is deprecated: replace it with nvidia_peermem_rs")
                    .data(data)
            } else {
                Check::pass("peer_memory_client", T, detail).data(data)
            }
        }
        many => Check::fail(
            "peer_memory_client",
            T,
            format!(
                "{} are all loaded: the core gives each memory region to the first client registered, and a core without /sys/kernel/mm/memory_peers does not refuse a second nv_mem",
                many.join(", ")
            ),
        )
        .fix(format!(
            "keep one: rmmod {}",
            many.iter()
                .filter(|m| **m != "nvidia_peermem_rs")
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        ))
        .data(data),
    }
}

/// Whether NCCL and UCX will use GPUDirect RDMA here, decided as they
/// decide it: by whether one of the files they test exists. The PeerDirect
/// core publishes `/sys/kernel/mm/memory_peers` only where it was built
/// against a kernel that exports `mm_kobj` (every MLNX_OFED up to 23.07;
/// DOCA-OFED 23.10 on only on kernels before about 6.6), so on current
/// nodes only a module named `nvidia_peermem` (or `nv_peer_mem`) is seen.
pub fn gpudirect_visibility(r: &SysRoot) -> Check {
    let first = |paths: &[&'static str]| paths.iter().copied().find(|p| r.exists(p));
    let nccl = first(NCCL_PATHS);
    let ucx = first(UCX_PATHS);
    let tree = r.exists("/sys/kernel/mm/memory_peers");
    let data = json!({
        "nccl": nccl,
        "ucx": ucx,
        "nccl_checks": NCCL_PATHS,
        "ucx_checks": UCX_PATHS,
        "memory_peers_tree": tree,
    });
    let id = "nccl_detection";
    // The file found is tested only from some releases on: the line says
    // from which, and the next lines whether the installed ones are.
    let releases = |p: &str| match libraries::since(p) {
        s if s.is_empty() => String::new(),
        s => format!(" for {s}"),
    };
    match (nccl, ucx) {
        (Some(n), Some(u)) if n == u => Check::pass(
            id,
            VISIBILITY_TITLE,
            format!("yes (via {n}){}", releases(n)),
        )
        .data(data),
        (Some(n), Some(u)) => Check::pass(
            id,
            VISIBILITY_TITLE,
            format!(
                "yes (NCCL via {n}{}, UCX via {u}{})",
                releases(n),
                releases(u)
            ),
        )
        .data(data),
        (Some(n), None) => Check::warn(
            id,
            VISIBILITY_TITLE,
            format!(
                "NCCL yes (via {n}); UCX no: it tests none of {}",
                UCX_PATHS.join(", ")
            ),
        )
        .fix(VISIBILITY_FIX)
        .data(data),
        (None, Some(u)) => Check::warn(
            id,
            VISIBILITY_TITLE,
            format!(
                "UCX yes (via {u}); NCCL no: it tests none of {}",
                NCCL_PATHS.join(", ")
            ),
        )
        .fix(VISIBILITY_FIX)
        .data(data),
        (None, None) => {
            let loaded = loaded_clients(r);
            let why = if loaded.contains(&"nvidia_peermem_rs") && !tree {
                "no: nvidia_peermem_rs is loaded, but this PeerDirect core has no /sys/kernel/mm/memory_peers (DOCA-OFED 23.10+ on Linux 6.6+) and NCCL and UCX look for /sys/module/nvidia_peermem"
            } else if loaded.is_empty() {
                "no: no peer-memory client is loaded, none of the files NCCL and UCX test exists"
            } else {
                "no: a client module is loaded, but none of the files NCCL and UCX test exists (nv_mem not registered?)"
            };
            Check::fail(id, VISIBILITY_TITLE, why)
                .fix(VISIBILITY_FIX)
                .data(data)
        }
    }
}

/// How to become visible: the module under NVIDIA's name, which NCCL (from
/// 2.23.4) and UCX (from 1.18.0) find on every core and kernel; older
/// releases see only nv_mem in the memory_peers tree (doctor/libraries.rs).
const VISIBILITY_FIX: &str = "install the default package (module nvidia_peermem: nvidia-peermem-rs-dropin-dkms, or make dkms-install) and modprobe nvidia-peermem; nvidia_peermem_rs is seen only where /sys/kernel/mm/memory_peers exists";

/// Core generation from `ofed_info -s` (`MLNX_OFED_LINUX-5.8-3.0.7.0:`,
/// `OFED-internal-24.10-1.1.4:`): `Some(true)` legacy (<= 5.0).
pub fn ofed_is_legacy(ofed: &str) -> Option<bool> {
    let v = ofed
        .split(['-', ' '])
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))?;
    let mut it = v.split('.');
    let major: u32 = it.next()?.parse().ok()?;
    let minor: u32 = it.next()?.trim_end_matches(':').parse().ok()?;
    Some(major < 5 || (major == 5 && minor == 0))
}

fn peerdirect_core(r: &SysRoot) -> Check {
    const T: &str = "PeerDirect core";
    let ofed = r.ofed_info();
    let kallsyms = r.read("/proc/kallsyms");
    let exported = kallsyms.as_deref().map(|k| {
        k.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("ib_register_peer_memory_client"))
    });
    let peers_dir = r.exists("/sys/kernel/mm/memory_peers");
    let data =
        json!({"ofed_info": ofed, "symbol_exported": exported, "memory_peers_dir": peers_dir});
    let ofed_s = ofed.as_deref().map_or("no ofed_info".to_string(), |o| {
        o.lines().next().unwrap_or("").to_string()
    });
    match (exported, peers_dir) {
        (Some(true), _) | (_, true) => Check::pass(
            "peerdirect_core",
            T,
            format!("ib_register_peer_memory_client is available ({ofed_s})"),
        )
        .data(data),
        // DOCA-OFED installed for this kernel since boot: the inbox stack,
        // loaded then, stays in use until it is replaced.
        (Some(false), false) => match node::installed_exporter(r) {
            Some((m, f)) => Check::fail(
                "peerdirect_core",
                T,
                format!("the loaded ib_uverbs/ib_core have no PeerDirect API (the inbox RDMA stack, loaded at boot), but the installed {m} ({f}) has it"),
            )
            .fix("reboot (or reload the RDMA stack: stop its users, unload the inbox modules, modprobe mlx5_ib)"),
            None => Check::fail(
                "peerdirect_core",
                T,
                format!("the loaded ib_uverbs/ib_core have no PeerDirect API (inbox RDMA stack; {ofed_s})"),
            )
            .fix("install MLNX_OFED/DOCA-OFED, or use dma-buf (open NVIDIA modules, ibv_reg_dmabuf_mr)"),
        }
        .data(data),
        (None, false) => Check::warn(
            "peerdirect_core",
            T,
            "cannot read /proc/kallsyms and no /sys/kernel/mm/memory_peers",
        )
        .fix("run as root, with ib_core loaded")
        .data(data),
    }
}

fn peerdirect_support(r: &SysRoot) -> Check {
    const T: &str = "peerdirect_support vs core";
    let client = loaded_clients(r)
        .into_iter()
        .find(|m| r.exists(&format!("/sys/module/{m}/parameters/peerdirect_support")));
    let Some(m) = client else {
        return Check::skip(
            "peerdirect_support",
            T,
            "no loaded client has a peerdirect_support parameter",
        );
    };
    let val = r
        .read(&format!("/sys/module/{m}/parameters/peerdirect_support"))
        .unwrap_or_default();
    let ofed = r.ofed_info();
    let legacy = ofed.as_deref().and_then(ofed_is_legacy);
    let data = json!({"module": m, "peerdirect_support": val, "core_legacy": legacy});
    match (legacy, val.as_str()) {
        (None, _) => Check::skip(
            "peerdirect_support",
            T,
            format!("{m} peerdirect_support={val}; core generation unknown (no ofed_info -s)"),
        )
        .data(data),
        (Some(true), "1") | (Some(false), "0") => Check::pass(
            "peerdirect_support",
            T,
            format!(
                "{m} peerdirect_support={val} suits the {} core",
                if legacy == Some(true) { "legacy (<= 5.0)" } else { "5.1+" }
            ),
        )
        .data(data),
        (Some(true), _) => Check::fail(
            "peerdirect_support",
            T,
            format!("{m} peerdirect_support={val} but the core is legacy (MLNX_OFED <= 5.0): invalidation will misbehave"),
        )
        .fix(format!("reload: modprobe -r {m}; modprobe {m} peerdirect_support=1"))
        .data(data),
        (Some(false), _) => Check::warn(
            "peerdirect_support",
            T,
            format!("{m} peerdirect_support={val} on a 5.1+ core gives up the lock-inversion mitigation"),
        )
        .fix(format!("reload: modprobe -r {m}; modprobe {m} peerdirect_support=0"))
        .data(data),
    }
}

/// An RDMA device and its PCI function.
pub struct Nic {
    pub name: String,
    pub pci: Option<PciDevice>,
}

fn rdma_nics(r: &SysRoot) -> Vec<Nic> {
    r.list("/sys/class/infiniband")
        .into_iter()
        .map(|name| {
            let pci = pci::device_at(r, &format!("/sys/class/infiniband/{name}/device"));
            Nic { name, pci }
        })
        .collect()
}

fn rdma_devices(r: &SysRoot) -> Check {
    const T: &str = "RDMA devices";
    let devs = r.list("/sys/class/infiniband");
    if devs.is_empty() {
        return Check::fail("rdma_devices", T, "no RDMA device (/sys/class/infiniband is empty or missing)")
            .fix("GPUDirect RDMA needs an RDMA NIC (e.g. ConnectX) with its driver loaded (modprobe mlx5_ib)")
            .data(json!({"devices": []}));
    }
    let mut list = Vec::new();
    let mut words = Vec::new();
    let mut active = 0;
    for d in &devs {
        for p in r.list(&format!("/sys/class/infiniband/{d}/ports")) {
            let base = format!("/sys/class/infiniband/{d}/ports/{p}");
            let state = r.read(&format!("{base}/state")).unwrap_or_default();
            let link = r.read(&format!("{base}/link_layer")).unwrap_or_default();
            let is_active = state.contains("ACTIVE");
            active += usize::from(is_active);
            let short = state
                .split_once(": ")
                .map_or(state.as_str(), |(_, s)| s)
                .to_string();
            words.push(format!("{d}/{p} {short} {link}"));
            list.push(json!({"device": d, "port": p, "state": state, "link_layer": link, "active": is_active}));
        }
    }
    let data = json!({"devices": devs, "ports": list});
    if active == 0 {
        Check::warn(
            "rdma_devices",
            T,
            format!("no ACTIVE port: {}", words.join(", ")),
        )
        .fix("check the cable and the link (ibstat); InfiniBand needs a subnet manager (opensm)")
        .data(data)
    } else {
        Check::pass("rdma_devices", T, words.join(", ")).data(data)
    }
}

fn iommu(r: &SysRoot, gpus: &[PciDevice]) -> Check {
    const T: &str = "IOMMU";
    let cmdline = r.read("/proc/cmdline").unwrap_or_default();
    let args: Vec<&str> = cmdline.split_whitespace().collect();
    let has = |a: &str| args.contains(&a);
    let units = r.list("/sys/class/iommu");
    // The GPU's IOMMU group type is the most direct answer.
    let group_type = gpus
        .iter()
        .find_map(|g| r.read(&format!("/sys/bus/pci/devices/{}/iommu_group/type", g.bdf)));
    let pt_arg = has("iommu=pt") || has("iommu.passthrough=1");
    let off_arg = has("intel_iommu=off") || has("amd_iommu=off") || has("iommu=off");
    let data = json!({"cmdline_passthrough": pt_arg, "cmdline_off": off_arg, "iommu_units": units, "gpu_group_type": group_type});
    let translated = match group_type.as_deref() {
        Some("identity") => false,
        Some(t) if t.starts_with("DMA") => true,
        _ => !units.is_empty() && !pt_arg && !off_arg,
    };
    if units.is_empty() {
        return Check::pass(
            "iommu",
            T,
            "no IOMMU active (devices see physical addresses)",
        )
        .data(data);
    }
    if !translated {
        return Check::pass(
            "iommu",
            T,
            format!(
                "{} IOMMU unit(s), passthrough ({})",
                units.len(),
                group_type.as_deref().unwrap_or("iommu=pt")
            ),
        )
        .data(data);
    }
    Check::warn(
        "iommu",
        T,
        format!(
            "{} IOMMU unit(s) translating DMA{}: peer-to-peer between GPU and NIC may fail or be slow",
            units.len(),
            group_type.map_or(String::new(), |t| format!(" (GPU group type {t})"))
        ),
    )
    .fix("add iommu=pt to the kernel command line (or disable the IOMMU), then reboot")
    .data(data)
}

fn pcie_topology(gpus: &[PciDevice], nics: &[Nic]) -> Check {
    const T: &str = "PCIe path GPU<->NIC";
    let nics: Vec<(&str, &PciDevice)> = nics
        .iter()
        .filter_map(|n| n.pci.as_ref().map(|p| (n.name.as_str(), p)))
        .collect();
    if gpus.is_empty() || nics.is_empty() {
        return Check::skip(
            "pcie_topology",
            T,
            format!(
                "needs a GPU and a PCI RDMA NIC (found {} GPU(s), {} NIC(s))",
                gpus.len(),
                nics.len()
            ),
        );
    }
    let mut pairs = Vec::new();
    let mut words = Vec::new();
    // For each GPU, its best NIC decides (jobs pick the closest NIC).
    let mut worst_best = Link::PIX;
    for g in gpus {
        let mut best = Link::SYS;
        for (name, n) in &nics {
            let l = pci::classify(g, n);
            best = best.min(l);
            words.push(format!("{} <-> {name} ({}): {}", g.bdf, n.bdf, l.name()));
            pairs.push(json!({"gpu": g.bdf, "nic": name, "nic_bdf": n.bdf, "link": l.name()}));
        }
        worst_best = worst_best.max(best);
    }
    let data = json!({"pairs": pairs});
    let detail = words.join(", ");
    match worst_best {
        Link::PIX | Link::PXB => Check::pass("pcie_topology", T, detail).data(data),
        Link::PHB | Link::NODE => Check::warn("pcie_topology", T, detail)
            .fix("traffic crosses the CPU root complex: put GPU and NIC under one PCIe switch for full bandwidth")
            .data(data),
        // Works, through the inter-socket link, at a fraction of the
        // bandwidth: a warning, not a failure.
        Link::SYS => Check::warn("pcie_topology", T, detail)
            .fix("GPU and NIC are on different CPU sockets: traffic crosses the inter-socket link; use a NIC on the GPU's socket")
            .data(data),
    }
}

fn acs(r: &SysRoot, gpus: &[PciDevice], nics: &[Nic]) -> Check {
    const T: &str = "ACS on the P2P path";
    let mut bridges: Vec<(String, Link)> = Vec::new();
    for g in gpus {
        for n in nics.iter().filter_map(|n| n.pci.as_ref()) {
            let l = pci::classify(g, n);
            for b in pci::bridges_between(g, n) {
                if !bridges.iter().any(|(x, _)| *x == b) {
                    bridges.push((b, l));
                }
            }
        }
    }
    if bridges.is_empty() {
        return Check::skip("acs", T, "no bridge between a GPU and a NIC");
    }
    let mut redirecting = Vec::new();
    let mut unreadable = Vec::new();
    let mut list = Vec::new();
    for (b, link) in &bridges {
        let a = pci::acs(r, b);
        let (state, redir) = match a {
            Acs::Unreadable => ("unreadable".to_string(), false),
            Acs::Absent => ("no ACS".to_string(), false),
            Acs::Control(c) => (format!("ACSCtl=0x{c:04x}"), c & (ACS_RR | ACS_CR) != 0),
        };
        if a == Acs::Unreadable {
            unreadable.push(b.clone());
        }
        if redir && matches!(link, Link::PIX | Link::PXB) {
            redirecting.push(b.clone());
        }
        list.push(json!({"bridge": b, "acs": state, "redirects_p2p": redir}));
    }
    let data = json!({"bridges": list});
    if !redirecting.is_empty() {
        return Check::fail(
            "acs",
            T,
            format!(
                "ACS redirects peer-to-peer to the root complex on {}",
                redirecting.join(", ")
            ),
        )
        .fix(format!(
            "disable ACS redirect: setpci -s {} ECAP_ACS+0x6.w=0000 (or in BIOS)",
            redirecting[0]
        ))
        .data(data);
    }
    if unreadable.len() == bridges.len() {
        return Check::warn("acs", T, "cannot read the bridges' extended config space")
            .fix("run doctor as root")
            .data(data);
    }
    Check::pass(
        "acs",
        T,
        format!(
            "no P2P redirect on {} bridge(s)",
            bridges.len() - unreadable.len()
        ),
    )
    .data(data)
}

fn human_bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn bar1(r: &SysRoot, gpus: &[PciDevice]) -> Check {
    const T: &str = "GPU BAR1";
    if gpus.is_empty() {
        return Check::skip("bar1", T, "no NVIDIA GPU on the PCI bus");
    }
    let mut words = Vec::new();
    let mut small = Vec::new();
    let mut list = Vec::new();
    for g in gpus {
        match pci::gpu_bar1(r, &g.bdf) {
            Some(s) => {
                words.push(format!("{} {}", g.bdf, human_bytes(s)));
                if s < BAR1_SMALL {
                    small.push(g.bdf.clone());
                }
                list.push(json!({"gpu": g.bdf, "bar1_bytes": s}));
            }
            None => {
                words.push(format!("{} unknown", g.bdf));
                list.push(json!({"gpu": g.bdf, "bar1_bytes": null}));
            }
        }
    }
    let data = json!({"gpus": list});
    if list.iter().all(|g| g["bar1_bytes"].is_null()) {
        return Check::skip(
            "bar1",
            T,
            format!("cannot read the BAR sizes of {}", words.join(", ")),
        )
        .fix("run as root; or see nvidia-smi -q -d MEMORY (BAR1 Memory Usage)")
        .data(data);
    }
    if !small.is_empty() {
        return Check::warn("bar1", T, words.join(", "))
            .fix("a small BAR1 caps how much GPU memory can be registered at once: enable large/resizable BAR in BIOS")
            .data(data);
    }
    Check::pass("bar1", T, words.join(", ")).data(data)
}

fn gpu_attributes(cuda: Option<&CudaView>) -> Check {
    const T: &str = "GPU attributes (CUDA)";
    let Some(c) = cuda else {
        return Check::skip("gpu_attributes", T, "CUDA not probed");
    };
    let data = serde_json::to_value(c).unwrap_or_default();
    if let Some(e) = &c.error {
        return Check::skip("gpu_attributes", T, e.clone()).data(data);
    }
    if c.gpus.is_empty() {
        return Check::fail("gpu_attributes", T, "CUDA sees no GPU")
            .fix("check nvidia-smi, CUDA_VISIBLE_DEVICES and the driver installation")
            .data(data);
    }
    let mut words = Vec::new();
    let mut no_rdma = Vec::new();
    let mut notes = Vec::new();
    let yn = |v: Option<bool>| match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    };
    for g in &c.gpus {
        words.push(format!(
            "GPU{} {} [{}]: GPUDirect RDMA {}, dma-buf {}, write ordering {}",
            g.index,
            g.name,
            g.pci_bus_id,
            yn(g.gpudirect_rdma_supported),
            yn(g.dma_buf_supported),
            g.rdma_writes_ordering.map_or("?", ordering_name)
        ));
        if g.gpudirect_rdma_supported == Some(false) {
            no_rdma.push(format!("GPU{}", g.index));
        }
        if g.rdma_writes_ordering
            .is_some_and(|o| o < WRITES_ORDERING_OWNER)
        {
            notes.push(format!(
                "GPU{}: flush GPUDirect writes (cuFlushGPUDirectRDMAWrites) before reading",
                g.index
            ));
        }
    }
    if !no_rdma.is_empty() {
        return Check::fail("gpu_attributes", T, words.join("; "))
            .fix(format!(
                "{} cannot do GPUDirect RDMA (consumer/unsupported GPU): use a data-center GPU",
                no_rdma.join(", ")
            ))
            .data(data);
    }
    let c = Check::pass("gpu_attributes", T, words.join("; ")).data(data);
    if notes.is_empty() {
        c
    } else {
        c.fix(notes.join("; "))
    }
}

fn kernel_log(r: &SysRoot) -> Check {
    const T: &str = "Kernel log signatures";
    let Some(log) = r.dmesg() else {
        return Check::skip("kernel_log", T, "cannot read the kernel log (run as root)");
    };
    let hits = dmesg::scan(&log);
    let data = json!({"hits": hits.iter().map(|h| json!({
        "signature": h.sig.id, "count": h.count, "first_line": h.first_line, "meaning": h.sig.meaning,
    })).collect::<Vec<_>>()});
    let Some(worst) = hits.iter().map(|h| h.sig.verdict).max() else {
        return Check::pass("kernel_log", T, "no known failure signature").data(data);
    };
    let first = hits.iter().find(|h| h.sig.verdict == worst);
    let detail = hits
        .iter()
        .map(|h| format!("{} x{}: {}", h.sig.id, h.count, h.sig.meaning))
        .collect::<Vec<_>>()
        .join("; ");
    let fix = first.map_or("", |h| h.sig.fix);
    Check::new("kernel_log", T, worst, detail)
        .fix(fix)
        .data(data)
}

/// The overall verdict lines at the end of human output.
pub fn verdict_line(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass | Verdict::Skip => "GPUDirect RDMA prerequisites look right on this node.",
        Verdict::Warn => "GPUDirect RDMA may work, with the warnings above.",
        Verdict::Fail => {
            "GPUDirect RDMA will not work on this node until the failures above are fixed."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ofed_generations() {
        assert_eq!(ofed_is_legacy("MLNX_OFED_LINUX-4.9-7.1.0.0:"), Some(true));
        assert_eq!(ofed_is_legacy("MLNX_OFED_LINUX-5.0-2.1.8.0:"), Some(true));
        assert_eq!(ofed_is_legacy("MLNX_OFED_LINUX-5.1-0.6.6.0:"), Some(false));
        assert_eq!(
            ofed_is_legacy("MLNX_OFED_LINUX-23.10-1.1.9.0:"),
            Some(false)
        );
        assert_eq!(ofed_is_legacy("OFED-internal-24.10-1.1.4:"), Some(false));
        assert_eq!(ofed_is_legacy("nothing here"), None);
    }

    #[test]
    fn page_table_versions_by_driver() {
        assert_eq!(page_table_version_of_driver("515.43.04"), Some(0x0001_0002));
        assert_eq!(
            page_table_version_of_driver("535.230.02"),
            Some(0x0001_0002)
        );
        assert_eq!(page_table_version_of_driver("575.64.05"), Some(0x0001_0002));
        assert_eq!(page_table_version_of_driver("580.65.06"), Some(0x0002_0000));
        assert_eq!(
            page_table_version_of_driver("580.159.04"),
            Some(0x0002_0000)
        );
        assert_eq!(page_table_version_of_driver("595.45.04"), Some(0x0002_0000));
        assert_eq!(page_table_version_of_driver("470.256.02"), None);
        assert_eq!(page_table_version_of_driver("garbage"), None);
        assert!(rs_reads_page_table(0x0001_0002));
        assert!(rs_reads_page_table(0x0002_0000));
        assert!(!rs_reads_page_table(0x0001_0001));
        assert!(!rs_reads_page_table(0x0003_0000));
    }

    /// A root holding `files` (paths under /sys), each with "1\n".
    fn root_with(files: &[&str]) -> (tempfile::TempDir, SysRoot) {
        let t = tempfile::tempdir().unwrap();
        for f in files {
            let p = t.path().join(f.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "1\n").unwrap();
        }
        let r = SysRoot::new(t.path());
        (t, r)
    }

    #[test]
    fn visibility_as_nccl_and_ucx_decide() {
        let cases: &[(&[&str], Verdict, &str)] = &[
            // The named build on a core with the tree.
            (
                &[
                    "/sys/module/nvidia_peermem_rs/version",
                    "/sys/kernel/mm/memory_peers/nv_mem/version",
                ],
                Verdict::Pass,
                "yes (via /sys/kernel/mm/memory_peers/nv_mem/version)",
            ),
            // The drop-in on a core without it.
            (
                &["/sys/module/nvidia_peermem/version"],
                Verdict::Pass,
                "yes (via /sys/module/nvidia_peermem/version)",
            ),
            // The named build on a core without it: seen by neither.
            (
                &["/sys/module/nvidia_peermem_rs/version"],
                Verdict::Fail,
                "no: nvidia_peermem_rs is loaded, but this PeerDirect core has no /sys/kernel/mm/memory_peers",
            ),
            (&[], Verdict::Fail, "no: no peer-memory client is loaded"),
            // nv_mem_nc alone: NCCL tests it, UCX does not.
            (
                &[
                    "/sys/module/nvidia_peermem_rs/version",
                    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                ],
                Verdict::Warn,
                "NCCL yes (via /sys/kernel/mm/memory_peers/nv_mem_nc/version); UCX no",
            ),
            // nv_peer_mem without the tree: UCX tests it, NCCL does not.
            (
                &["/sys/module/nv_peer_mem/version"],
                Verdict::Warn,
                "UCX yes (via /sys/module/nv_peer_mem/version); NCCL no",
            ),
        ];
        for (files, verdict, detail) in cases {
            let (_t, r) = root_with(files);
            let c = gpudirect_visibility(&r);
            assert_eq!(c.verdict, *verdict, "{files:?}: {}", c.detail);
            assert!(c.detail.starts_with(detail), "{files:?}: {}", c.detail);
            assert_eq!(c.title, VISIBILITY_TITLE);
            assert_eq!(c.fix.is_some(), *verdict != Verdict::Pass, "{files:?}");
        }
    }

    #[test]
    fn bytes() {
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(64 << 30), "64 GiB");
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
    }
}
