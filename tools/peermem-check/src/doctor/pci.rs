// SPDX-License-Identifier: GPL-2.0
//! PCI facts: where GPUs and RDMA NICs sit, the link class between them (as
//! `nvidia-smi topo -m` names it), ACS on the bridges in between, BAR sizes.

use serde::Serialize;

use super::sysroot::SysRoot;

/// A PCI function and the chain of bridges above it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciDevice {
    pub bdf: String,
    /// Host bridge (`pci0000:00`) first, then every bridge, then `bdf`.
    pub path: Vec<String>,
    pub numa_node: Option<i64>,
}

/// Link classes of `nvidia-smi topo -m`, best first (named as it names them).
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Link {
    /// Same PCIe switch: at most one bridge level between the two.
    PIX,
    /// Several PCIe bridges, without crossing the host bridge.
    PXB,
    /// Through the PCIe host bridge (the CPU's root complex).
    PHB,
    /// Across host bridges of the same NUMA node.
    NODE,
    /// Across the SMP interconnect between NUMA nodes.
    SYS,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::PIX => "PIX",
            Link::PXB => "PXB",
            Link::PHB => "PHB",
            Link::NODE => "NODE",
            Link::SYS => "SYS",
        }
    }
}

/// Reads a PCI device (`/sys/bus/pci/devices/<bdf>` or any symlink to its
/// directory) into a [`PciDevice`].
pub fn device_at(root: &SysRoot, link: &str) -> Option<PciDevice> {
    let real = root.resolve(link)?;
    let rest = real.strip_prefix("/sys/devices/")?;
    let path: Vec<String> = rest.split('/').map(str::to_string).collect();
    if path.len() < 2 || !path[0].starts_with("pci") {
        return None;
    }
    let bdf = path.last()?.clone();
    let numa_node = root
        .read(&format!("{real}/numa_node"))
        .and_then(|s| s.parse().ok());
    Some(PciDevice {
        bdf,
        path,
        numa_node,
    })
}

/// NVIDIA GPUs: vendor 0x10de, class VGA (0x0300) or 3D controller (0x0302).
pub fn gpus(root: &SysRoot) -> Vec<PciDevice> {
    root.list("/sys/bus/pci/devices")
        .into_iter()
        .filter(|bdf| {
            let base = format!("/sys/bus/pci/devices/{bdf}");
            let vendor = root.read(&format!("{base}/vendor")).unwrap_or_default();
            let class = root.read(&format!("{base}/class")).unwrap_or_default();
            vendor == "0x10de" && (class.starts_with("0x0300") || class.starts_with("0x0302"))
        })
        .filter_map(|bdf| device_at(root, &format!("/sys/bus/pci/devices/{bdf}")))
        .collect()
}

/// Classifies the path between two devices.
pub fn classify(a: &PciDevice, b: &PciDevice) -> Link {
    if a.path[0] != b.path[0] {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y && x >= 0 => Link::NODE,
            _ => Link::SYS,
        };
    }
    let common = a
        .path
        .iter()
        .zip(&b.path)
        .take_while(|(x, y)| x == y)
        .count();
    if common <= 1 {
        return Link::PHB;
    }
    // Bridges below the deepest common bridge, endpoints excluded. Two
    // downstream ports of one switch (the usual GPU+NIC board) make 2.
    let below = (a.path.len() - common) + (b.path.len() - common);
    if below.saturating_sub(2) <= 2 {
        Link::PIX
    } else {
        Link::PXB
    }
}

/// An RDMA device as seen from one GPU: its PCI link class to the GPU, or
/// `None` when it has no PCI function (soft-RoCE) or the GPU is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    pub name: String,
    pub link: Option<Link>,
}

/// The RDMA devices of `/sys/class/infiniband`, nearest to the GPU at PCI
/// address `gpu_bdf` first (PIX before PXB before PHB, NODE, SYS; devices
/// without a PCI function last), by name among equals: the order
/// `validate` and `bench` pick from when no `-d` is given.
pub fn rdma_devices_by_distance(root: &SysRoot, gpu_bdf: Option<&str>) -> Vec<Candidate> {
    let gpu = gpu_bdf.and_then(|b| device_at(root, &format!("/sys/bus/pci/devices/{b}")));
    let mut v: Vec<Candidate> = root
        .list("/sys/class/infiniband")
        .into_iter()
        .map(|name| {
            let link = gpu.as_ref().and_then(|g| {
                device_at(root, &format!("/sys/class/infiniband/{name}/device"))
                    .map(|n| classify(g, &n))
            });
            Candidate { name, link }
        })
        .collect();
    // `None` sorts after every link: Option's order puts None first, so
    // compare on (is_none, link).
    v.sort_by(|a, b| (a.link.is_none(), a.link, &a.name).cmp(&(b.link.is_none(), b.link, &b.name)));
    v
}

/// The bridges P2P traffic between `a` and `b` crosses: from the deepest
/// common bridge down to each device, endpoints and host bridge excluded.
pub fn bridges_between(a: &PciDevice, b: &PciDevice) -> Vec<String> {
    let common = a
        .path
        .iter()
        .zip(&b.path)
        .take_while(|(x, y)| x == y)
        .count();
    let mut v = Vec::new();
    if a.path[0] == b.path[0] && common > 1 {
        v.push(a.path[common - 1].clone());
    }
    for p in [a, b] {
        let start = if a.path[0] == b.path[0] { common } else { 1 };
        for bdf in &p.path[start.max(1)..p.path.len() - 1] {
            if !v.contains(bdf) {
                v.push(bdf.clone());
            }
        }
    }
    v
}

/// ACS control of a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Acs {
    /// Extended config space could not be read (not root?).
    Unreadable,
    /// No ACS capability.
    Absent,
    /// ACS control register value.
    Control(u16),
}

/// PCIe extended capability id of ACS.
const PCI_EXT_CAP_ID_ACS: u16 = 0x000d;
/// ACS control bits that send peer-to-peer traffic up to the root complex.
pub const ACS_RR: u16 = 1 << 2;
pub const ACS_CR: u16 = 1 << 3;

/// Reads the ACS control register of `bdf` from its config space.
pub fn acs(root: &SysRoot, bdf: &str) -> Acs {
    let Some(cfg) = root.read_bytes(&format!("/sys/bus/pci/devices/{bdf}/config"), 4096) else {
        return Acs::Unreadable;
    };
    acs_from_config(&cfg)
}

/// Walks the extended capability list of a config-space image.
pub fn acs_from_config(cfg: &[u8]) -> Acs {
    if cfg.len() <= 0x100 {
        return Acs::Unreadable;
    }
    let u32_at = |o: usize| -> Option<u32> {
        cfg.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut off = 0x100usize;
    for _ in 0..64 {
        let Some(hdr) = u32_at(off) else {
            return Acs::Absent;
        };
        if hdr == 0 || hdr == 0xffff_ffff {
            return Acs::Absent;
        }
        if (hdr & 0xffff) as u16 == PCI_EXT_CAP_ID_ACS {
            return match cfg.get(off + 6..off + 8) {
                Some(b) => Acs::Control(u16::from_le_bytes([b[0], b[1]])),
                None => Acs::Unreadable,
            };
        }
        let next = (hdr >> 20) as usize & 0xffc;
        if next < 0x100 {
            return Acs::Absent;
        }
        off = next;
    }
    Acs::Absent
}

/// Size of BAR `index`: the size of sysfs' `resourceN` file, else from the
/// `resource` file (one `start end flags` line per resource).
pub fn bar_size(root: &SysRoot, bdf: &str, index: usize) -> Option<u64> {
    // sysfs sizes each `resourceN` file to its BAR.
    if let Ok(m) =
        std::fs::metadata(root.path(&format!("/sys/bus/pci/devices/{bdf}/resource{index}")))
    {
        if m.len() > 0 {
            return Some(m.len());
        }
    }
    let text = root.read(&format!("/sys/bus/pci/devices/{bdf}/resource"))?;
    let line = text.lines().nth(index)?;
    let mut it = line.split_whitespace();
    let start = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
    let end = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
    (end > start).then(|| end - start + 1)
}

/// NVIDIA's "BAR1" (the aperture GPU memory is exposed through): the
/// second memory BAR present. Its resource index depends on whether BAR0 is
/// 64-bit (index 1 when BAR0 is 32-bit, 2 when it is 64-bit).
pub fn gpu_bar1(root: &SysRoot, bdf: &str) -> Option<u64> {
    (0..6).filter_map(|i| bar_size(root, bdf, i)).nth(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(path: &[&str], numa: Option<i64>) -> PciDevice {
        PciDevice {
            bdf: path.last().unwrap().to_string(),
            path: path.iter().map(|s| s.to_string()).collect(),
            numa_node: numa,
        }
    }

    #[test]
    fn rdma_devices_nearest_to_the_gpu_first() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path());
        let mk = |path: &str, numa: i64| {
            let d = t.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("numa_node"), format!("{numa}\n")).unwrap();
            d
        };
        let link = |from: &str, to: &std::path::Path| {
            let f = t.path().join(from.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            symlink(to, f).unwrap();
        };
        let gpu = mk(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
            0,
        );
        link("/sys/bus/pci/devices/0000:03:00.0", &gpu);
        // mlx5_0 on the other socket, mlx5_1 on the GPU's switch, rxe0 no PCI.
        let far = mk("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 1);
        link("/sys/class/infiniband/mlx5_0/device", &far);
        let near = mk(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
            0,
        );
        link("/sys/class/infiniband/mlx5_1/device", &near);
        std::fs::create_dir_all(t.path().join("sys/class/infiniband/rxe0")).unwrap();
        let got = rdma_devices_by_distance(&root, Some("0000:03:00.0"));
        let names: Vec<(&str, Option<Link>)> =
            got.iter().map(|c| (c.name.as_str(), c.link)).collect();
        assert_eq!(
            names,
            vec![
                ("mlx5_1", Some(Link::PIX)),
                ("mlx5_0", Some(Link::SYS)),
                ("rxe0", None)
            ]
        );
        // No GPU address (--memory host): by name.
        let got = rdma_devices_by_distance(&root, None);
        assert_eq!(got[0].name, "mlx5_0");
        assert!(got.iter().all(|c| c.link.is_none()));
    }

    #[test]
    fn link_classes() {
        let gpu = dev(
            &["pci0000:00", "00:01.0", "01:00.0", "02:00.0", "03:00.0"],
            Some(0),
        );
        let nic_same_switch = dev(
            &["pci0000:00", "00:01.0", "01:00.0", "02:01.0", "04:00.0"],
            Some(0),
        );
        assert_eq!(classify(&gpu, &nic_same_switch), Link::PIX);
        let nic_deeper = dev(
            &[
                "pci0000:00",
                "00:01.0",
                "01:00.0",
                "02:02.0",
                "05:00.0",
                "06:00.0",
                "07:00.0",
            ],
            Some(0),
        );
        assert_eq!(classify(&gpu, &nic_deeper), Link::PXB);
        let nic_other_rp = dev(&["pci0000:00", "00:02.0", "08:00.0"], Some(0));
        assert_eq!(classify(&gpu, &nic_other_rp), Link::PHB);
        let nic_other_hb_same_node = dev(&["pci0000:40", "40:01.0", "41:00.0"], Some(0));
        assert_eq!(classify(&gpu, &nic_other_hb_same_node), Link::NODE);
        let nic_other_socket = dev(&["pci0000:80", "80:01.0", "81:00.0"], Some(1));
        assert_eq!(classify(&gpu, &nic_other_socket), Link::SYS);
        let nic_unknown_numa = dev(&["pci0000:80", "80:01.0", "81:00.0"], None);
        assert_eq!(classify(&gpu, &nic_unknown_numa), Link::SYS);
    }

    #[test]
    fn bridges_on_path() {
        let gpu = dev(
            &["pci0000:00", "00:01.0", "01:00.0", "02:00.0", "03:00.0"],
            None,
        );
        let nic = dev(
            &["pci0000:00", "00:01.0", "01:00.0", "02:01.0", "04:00.0"],
            None,
        );
        assert_eq!(
            bridges_between(&gpu, &nic),
            vec!["01:00.0", "02:00.0", "02:01.0"]
        );
        let far = dev(&["pci0000:00", "00:02.0", "08:00.0"], None);
        assert_eq!(
            bridges_between(&gpu, &far),
            vec!["00:01.0", "01:00.0", "02:00.0", "00:02.0"]
        );
    }

    fn config_with_caps(caps: &[(u16, u16, u16)]) -> Vec<u8> {
        // caps: (offset, id, acs control)
        let mut cfg = vec![0u8; 4096];
        for (i, (off, id, ctl)) in caps.iter().enumerate() {
            let next = caps.get(i + 1).map_or(0, |c| c.0 as u32);
            let hdr = (*id as u32) | (1 << 16) | (next << 20);
            let o = *off as usize;
            cfg[o..o + 4].copy_from_slice(&hdr.to_le_bytes());
            cfg[o + 6..o + 8].copy_from_slice(&ctl.to_le_bytes());
        }
        cfg
    }

    #[test]
    fn bar1_is_the_second_memory_bar() {
        // A 64-bit BAR0 (registers) takes resource0 and 1: BAR1 is then
        // resource2, as on an H200 in a VM. sysfs sizes resourceN to its BAR.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("sys/bus/pci/devices/0000:00:06.0");
        std::fs::create_dir_all(&d).unwrap();
        for (n, size) in [
            ("resource0", 16u64 << 20),
            ("resource2", 256 << 30),
            ("resource4", 32 << 20),
        ] {
            std::fs::File::create(d.join(n))
                .unwrap()
                .set_len(size)
                .unwrap();
        }
        let root = SysRoot::new(dir.path());
        assert_eq!(gpu_bar1(&root, "0000:00:06.0"), Some(256 << 30));
        assert_eq!(bar_size(&root, "0000:00:06.0", 1), None);
        assert_eq!(gpu_bar1(&root, "0000:00:07.0"), None);
    }

    #[test]
    fn acs_parsing() {
        assert_eq!(acs_from_config(&[0u8; 256]), Acs::Unreadable);
        assert_eq!(acs_from_config(&vec![0u8; 4096]), Acs::Absent);
        let cfg = config_with_caps(&[(0x100, 0x0001, 0), (0x148, 0x000d, 0x001d)]);
        assert_eq!(acs_from_config(&cfg), Acs::Control(0x001d));
        let cfg = config_with_caps(&[(0x100, 0x000d, 0)]);
        assert_eq!(acs_from_config(&cfg), Acs::Control(0));
        // A loop in the list ends (no hang).
        let mut cfg = config_with_caps(&[(0x100, 0x0001, 0)]);
        cfg[0x100..0x104].copy_from_slice(&(1u32 | (0x100 << 20)).to_le_bytes());
        assert_eq!(acs_from_config(&cfg), Acs::Absent);
    }
}
