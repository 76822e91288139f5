// SPDX-License-Identifier: GPL-2.0
//! What the running kernel would load, as depmod decided it, and whether
//! the module's signature would be accepted.
//!
//! depmod writes its decisions next to the modules: `modules.dep` names the
//! one file each module name resolves to (the copy modprobe loads; of two
//! copies at one priority, such as Ubuntu's DOCA-OFED in
//! `kernel/doca-ofed-<ver>/` and the inbox stack in
//! `kernel/drivers/infiniband/`, whichever depmod read first), and
//! `modules.symbols` which of those modules exports each symbol. So the
//! PeerDirect core is found by its symbol, `ib_register_peer_memory_client`,
//! in `ib_uverbs` (OFED 24.07 and later) or `ib_core` (older), without
//! reading a module file.
//!
//! Secure Boot: the state from `mokutil --sb-state` or the EFI variable, the
//! module's signer from `modinfo -F signer`, the enrolled keys from
//! `mokutil --list-enrolled` or `/proc/keys`. Under a fixture root the
//! command outputs come from `/mokutil-sb-state.txt`,
//! `/mokutil-list-enrolled.txt` and `/modinfo-signer.txt`.

use std::collections::BTreeMap;

use serde_json::json;

use super::buildenv::os_release;
use super::install::kernel_release;
use super::SysRoot;
use crate::report::Check;

/// The PeerDirect core's registration function, the symbol it is found by.
pub const PEERDIRECT_SYMBOL: &str = "ib_register_peer_memory_client";

/// The EFI variable that holds the Secure Boot state (last byte 1: on).
const SECURE_BOOT_VAR: &str =
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// The module name of a module file: `kernel/doca-ofed-3.4/ib_uverbs.ko.zst`
/// -> `ib_uverbs`, `nvidia-peermem.ko` -> `nvidia_peermem`.
pub fn module_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = file.split_once(".ko").map(|(s, _)| s)?;
    (!stem.is_empty()).then(|| stem.replace('-', "_"))
}

/// depmod's resolution for kernel `kver`: module name -> the absolute path
/// of the file modprobe loads. `None` when depmod has not run.
pub fn modules_dep(r: &SysRoot, kver: &str) -> Option<BTreeMap<String, String>> {
    let dir = format!("/lib/modules/{kver}");
    let text = r.read(&format!("{dir}/modules.dep"))?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(':').map(|(p, _)| p.trim()))
            .filter_map(|p| {
                let abs = if p.starts_with('/') {
                    p.to_string()
                } else {
                    format!("{dir}/{p}")
                };
                module_name(p).map(|m| (m, abs))
            })
            .collect(),
    )
}

/// The module depmod says exports `symbol` for kernel `kver`.
pub fn symbol_owner(r: &SysRoot, kver: &str, symbol: &str) -> Option<String> {
    let text = r.read(&format!("/lib/modules/{kver}/modules.symbols"))?;
    let key = format!("symbol:{symbol}");
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("alias") && w.next() == Some(key.as_str()))
            .then(|| w.next().map(str::to_string))
            .flatten()
    })
}

/// Copies of `ib_uverbs`/`ib_core` on disk other than those in `chosen`:
/// DOCA-OFED's modules that depmod did not pick, for one.
fn other_rdma_copies(r: &SysRoot, kver: &str, chosen: &[&String]) -> Vec<String> {
    let base = format!("/lib/modules/{kver}");
    let mut dirs = vec!["updates/dkms".to_string(), "updates".into(), "extra".into()];
    dirs.extend(
        r.list(&format!("{base}/kernel"))
            .into_iter()
            .filter(|d| d.starts_with("doca-ofed") || d.starts_with("mlnx-ofa"))
            .map(|d| format!("kernel/{d}")),
    );
    dirs.push("kernel/drivers/infiniband/core".into());
    let mut out = Vec::new();
    for d in dirs {
        for f in r.list(&format!("{base}/{d}")) {
            let p = format!("{base}/{d}/{f}");
            let name = module_name(&f);
            if matches!(name.as_deref(), Some("ib_uverbs" | "ib_core"))
                && !chosen.iter().any(|c| **c == p)
            {
                out.push(p);
            }
        }
    }
    out
}

/// Which ib_uverbs, ib_core, nvidia and nvidia-peermem this kernel would
/// load, and which of them carries the PeerDirect API.
pub fn installed_modules(r: &SysRoot) -> Check {
    const ID: &str = "installed_modules";
    const T: &str = "Modules this kernel would load";
    let Some(kver) = kernel_release(r) else {
        return Check::skip(ID, T, "cannot read the running kernel's release");
    };
    let Some(dep) = modules_dep(r, &kver) else {
        return Check::skip(
            ID,
            T,
            format!("no /lib/modules/{kver}/modules.dep: depmod has not indexed this kernel"),
        )
        .fix(format!("sudo depmod {kver}"));
    };
    let owner = symbol_owner(r, &kver, PEERDIRECT_SYMBOL);
    let get = |m: &str| dep.get(m).cloned();
    let (uverbs, core, nvidia, peermem) = (
        get("ib_uverbs"),
        get("ib_core"),
        get("nvidia"),
        get("nvidia_peermem"),
    );
    let exporter = owner.as_deref().and_then(|m| dep.get(m).cloned());
    let data = json!({
        "kernel": kver,
        "ib_uverbs": uverbs,
        "ib_core": core,
        "nvidia": nvidia,
        "nvidia_peermem": peermem,
        "peerdirect_module": owner,
        "peerdirect_file": exporter,
    });
    let show = |m: &str, p: &Option<String>| format!("{m}: {}", p.as_deref().unwrap_or("none"));
    let mut detail = [
        show("ib_uverbs", &uverbs),
        show("ib_core", &core),
        show("nvidia", &nvidia),
        show("nvidia-peermem", &peermem),
    ]
    .join("; ");

    // The drop-in must win over NVIDIA's own nvidia-peermem.ko (a stub
    // where the driver was built without an OFED tree): its /etc/depmod.d
    // line makes depmod pick updates/dkms/nvidia_peermem.ko.
    let dkms_dir = format!("/lib/modules/{kver}/updates/dkms");
    let dropin = r
        .list(&dkms_dir)
        .into_iter()
        .find(|f| f.starts_with("nvidia_peermem.ko"))
        .map(|f| format!("{dkms_dir}/{f}"));
    if let Some(ours) = &dropin {
        if peermem.as_ref() != Some(ours) {
            return Check::fail(
                ID,
                T,
                format!(
                    "{detail}: modprobe nvidia-peermem would load {}, not the installed drop-in {ours}",
                    peermem.as_deref().unwrap_or("nothing")
                ),
            )
            .fix(format!(
                "restore /etc/depmod.d/nvidia-peermem-rs-dropin.conf (reinstall the package), then sudo depmod {kver}"
            ))
            .data(data);
        }
        detail.push_str(" (the drop-in, ahead of NVIDIA's nvidia-peermem.ko)");
    }

    match (&owner, &exporter) {
        (Some(m), Some(f)) => {
            Check::pass(ID, T, format!("{detail}; PeerDirect exported by {m} ({f})")).data(data)
        }
        _ => {
            let chosen: Vec<&String> = [&uverbs, &core].into_iter().flatten().collect();
            let others = other_rdma_copies(r, &kver, &chosen);
            if others.is_empty() {
                Check::fail(
                    ID,
                    T,
                    format!("{detail}; no installed module exports {PEERDIRECT_SYMBOL}: the inbox RDMA stack has no PeerDirect"),
                )
                .fix("install MLNX_OFED/DOCA-OFED for this kernel (Ubuntu 26.04: Canonical's DOCA-OFED packages or NVIDIA's DOCA-Host), then reboot")
                .data(data)
            } else {
                Check::fail(
                    ID,
                    T,
                    format!(
                        "{detail}; none of them exports {PEERDIRECT_SYMBOL}, and depmod did not pick {}",
                        others.join(", ")
                    ),
                )
                .fix(format!(
                    "make depmod prefer OFED's copies (an /etc/depmod.d line 'override <module> * <their directory>' for each), sudo depmod {kver}, then reboot"
                ))
                .data(data)
            }
        }
    }
}

/// The module that exports the PeerDirect API for kernel `kver` and the
/// file modprobe loads for it, as depmod decided; `None` where none does.
pub fn peerdirect_exporter(r: &SysRoot, kver: &str) -> Option<(String, String)> {
    let m = symbol_owner(r, kver, PEERDIRECT_SYMBOL)?;
    let f = modules_dep(r, kver)?.get(&m)?.clone();
    Some((m, f))
}

/// The fix, for the loaded RDMA stack lacking PeerDirect: `Some` with the
/// module that has it when this kernel's installed stack does (DOCA-OFED
/// installed since boot).
pub fn installed_exporter(r: &SysRoot) -> Option<(String, String)> {
    peerdirect_exporter(r, &kernel_release(r)?)
}

/// Secure Boot on, off, or unknown (`None`).
fn secure_boot(r: &SysRoot) -> (Option<bool>, &'static str) {
    if let Some(o) = r.command("mokutil", &["--sb-state"], "/mokutil-sb-state.txt") {
        let l = o.to_lowercase();
        if l.contains("enabled") {
            return (Some(true), "mokutil --sb-state");
        }
        if l.contains("disabled") {
            return (Some(false), "mokutil --sb-state");
        }
    }
    if let Some(b) = r.read_bytes(SECURE_BOOT_VAR, 64) {
        return (b.last().map(|&v| v == 1), "the SecureBoot EFI variable");
    }
    if !r.exists("/sys/firmware/efi") {
        return (Some(false), "no EFI firmware (legacy boot)");
    }
    (None, "")
}

/// Whether Secure Boot is on and, if so, whether the installed module's
/// signer is among the enrolled keys.
pub fn secure_boot_check(r: &SysRoot) -> Check {
    const ID: &str = "secure_boot";
    const T: &str = "Secure Boot";
    let (on, source) = secure_boot(r);
    let ubuntu = os_release(r).is_some_and(|o| o.id == "ubuntu");
    let enrol = if ubuntu {
        "sudo update-secureboot-policy --enroll-key (dkms's key, /var/lib/shim-signed/mok/MOK.der), reboot and confirm the key in MokManager"
    } else {
        "sudo mokutil --import /var/lib/dkms/mok.pub (dkms's key), reboot and confirm the key in MokManager"
    };
    let kver = kernel_release(r).unwrap_or_default();
    let dep = modules_dep(r, &kver).unwrap_or_default();
    let module = ["nvidia_peermem", "nvidia_peermem_rs"]
        .into_iter()
        .filter_map(|m| dep.get(m))
        .find(|p| p.contains("/updates/dkms/"))
        .cloned();
    let signer = module.as_ref().and_then(|m| {
        let path = r.path(m);
        r.command(
            "modinfo",
            &["-F", "signer", &path.to_string_lossy()],
            "/modinfo-signer.txt",
        )
    });
    let enrolled = r
        .command(
            "mokutil",
            &["--list-enrolled"],
            "/mokutil-list-enrolled.txt",
        )
        .or_else(|| r.read("/proc/keys"));
    let data = json!({
        "secure_boot": on, "source": source, "module": module,
        "signer": signer, "enrolled_readable": enrolled.is_some(),
    });
    match on {
        None => Check::warn(
            ID,
            T,
            "cannot tell whether Secure Boot is on (no mokutil, EFI variable unreadable)",
        )
        .fix("run as root, or install mokutil")
        .data(data),
        Some(false) => {
            Check::pass(ID, T, format!("off ({source}): unsigned modules load")).data(data)
        }
        Some(true) => {
            let Some(m) = module else {
                return Check::skip(ID, T, format!("on ({source}); the module is not installed by DKMS yet: once it is, its signing key must be enrolled"))
                    .data(data);
            };
            let signer = signer.filter(|s| !s.is_empty());
            match (signer, enrolled) {
                (None, _) => Check::fail(ID, T, format!("on ({source}), and {m} is not signed (or modinfo is missing): the kernel refuses it"))
                    .fix(format!("let dkms sign it (its key is created at the first build), rebuild with dkms, then {enrol}"))
                    .data(data),
                (Some(s), None) => Check::warn(ID, T, format!("on ({source}); {m} is signed by '{s}', but the enrolled keys cannot be read here"))
                    .fix(format!("as root: mokutil --list-enrolled; if '{s}' is not there: {enrol}"))
                    .data(data),
                (Some(s), Some(keys)) if keys.contains(&s) => Check::pass(ID, T, format!("on ({source}); {m} is signed by '{s}', an enrolled key"))
                    .data(data),
                (Some(s), Some(_)) => Check::fail(ID, T, format!("on ({source}); {m} is signed by '{s}', which is not among the enrolled keys: the kernel will refuse it (Key was rejected by service)"))
                    .fix(enrol)
                    .data(data),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    use crate::doctor::sysroot::test_root as root;

    const K: &str = "/lib/modules/7.0.0-31-generic";

    #[test]
    fn names() {
        assert_eq!(
            module_name("kernel/doca-ofed-3.4/ib_uverbs.ko.zst").as_deref(),
            Some("ib_uverbs")
        );
        assert_eq!(
            module_name("nvidia-peermem.ko").as_deref(),
            Some("nvidia_peermem")
        );
        assert_eq!(module_name("modules.dep"), None);
    }

    #[test]
    fn doca_exporter_in_ib_uverbs() {
        let dep = "kernel/doca-ofed-3.4/ib_uverbs.ko.zst: kernel/doca-ofed-3.4/ib_core.ko.zst\n\
                   kernel/doca-ofed-3.4/ib_core.ko.zst:\n\
                   kernel/nvidia-580-open/nvidia.ko:\n\
                   updates/dkms/nvidia_peermem.ko: kernel/nvidia-580-open/nvidia.ko\n";
        let (_t, r) = root(&[
            ("/proc/sys/kernel/osrelease", "7.0.0-31-generic\n"),
            (&format!("{K}/modules.dep"), dep),
            (
                &format!("{K}/modules.symbols"),
                "alias symbol:ib_register_peer_memory_client ib_uverbs\n",
            ),
            (&format!("{K}/updates/dkms/nvidia_peermem.ko"), ""),
        ]);
        let c = installed_modules(&r);
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(c.detail.contains(&format!(
            "PeerDirect exported by ib_uverbs ({K}/kernel/doca-ofed-3.4/ib_uverbs.ko.zst)"
        )));
        assert!(c.detail.contains("the drop-in, ahead of NVIDIA's"));
        assert_eq!(
            installed_exporter(&r).map(|(m, _)| m).as_deref(),
            Some("ib_uverbs")
        );
    }

    #[test]
    fn inbox_picked_over_doca_and_stub_over_dropin() {
        let dep = "kernel/drivers/infiniband/core/ib_uverbs.ko.zst:\n\
                   kernel/nvidia-580-open/nvidia-peermem.ko:\n";
        let (_t, r) = root(&[
            ("/proc/sys/kernel/osrelease", "7.0.0-31-generic\n"),
            (&format!("{K}/modules.dep"), dep),
            (&format!("{K}/modules.symbols"), ""),
            (&format!("{K}/kernel/doca-ofed-3.4/ib_uverbs.ko.zst"), ""),
        ]);
        let c = installed_modules(&r);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(
            c.detail.contains(&format!(
                "did not pick {K}/kernel/doca-ofed-3.4/ib_uverbs.ko.zst"
            )),
            "{}",
            c.detail
        );
        // With the drop-in installed but not picked, that is said first.
        std::fs::create_dir_all(r.path(&format!("{K}/updates/dkms"))).unwrap();
        std::fs::write(r.path(&format!("{K}/updates/dkms/nvidia_peermem.ko")), "").unwrap();
        let c = installed_modules(&r);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(
            c.detail.contains("not the installed drop-in"),
            "{}",
            c.detail
        );
        assert!(c.fix.unwrap().contains("nvidia-peermem-rs-dropin.conf"));
    }

    #[test]
    fn secure_boot_states() {
        let efi = |on: u8| vec![7u8, 0, 0, 0, on];
        let t = tempfile::tempdir().unwrap();
        let r = SysRoot::new(t.path());
        std::fs::create_dir_all(r.path("/sys/firmware/efi/efivars")).unwrap();
        std::fs::write(r.path(SECURE_BOOT_VAR), efi(0)).unwrap();
        assert_eq!(secure_boot_check(&r).verdict, Verdict::Pass);
        std::fs::write(r.path(SECURE_BOOT_VAR), efi(1)).unwrap();
        assert_eq!(secure_boot_check(&r).verdict, Verdict::Skip);
        // The drop-in installed, signed by a key that is not enrolled.
        for d in [&format!("{K}/updates/dkms"), "/proc/sys/kernel", "/etc"] {
            std::fs::create_dir_all(r.path(d)).unwrap();
        }
        std::fs::write(r.path("/proc/sys/kernel/osrelease"), "7.0.0-31-generic\n").unwrap();
        std::fs::write(
            r.path(&format!("{K}/modules.dep")),
            "updates/dkms/nvidia_peermem.ko:\n",
        )
        .unwrap();
        std::fs::write(
            r.path("/etc/os-release"),
            "ID=ubuntu\nVERSION_ID=\"26.04\"\n",
        )
        .unwrap();
        std::fs::write(
            r.path("/modinfo-signer.txt"),
            "node DKMS module signing key\n",
        )
        .unwrap();
        let c = secure_boot_check(&r);
        assert_eq!(c.verdict, Verdict::Warn, "{}", c.detail);
        std::fs::write(
            r.path("/mokutil-list-enrolled.txt"),
            "Subject: CN=Canonical Ltd. Master Certificate Authority\n",
        )
        .unwrap();
        let c = secure_boot_check(&r);
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert!(c.fix.unwrap().contains("/var/lib/shim-signed/mok/MOK.der"));
        std::fs::write(
            r.path("/mokutil-list-enrolled.txt"),
            "Subject: CN=node DKMS module signing key\n",
        )
        .unwrap();
        assert_eq!(secure_boot_check(&r).verdict, Verdict::Pass);
        // Not EFI at all: no Secure Boot.
        let t2 = tempfile::tempdir().unwrap();
        assert_eq!(
            secure_boot_check(&SysRoot::new(t2.path())).verdict,
            Verdict::Pass
        );
    }
}
