// SPDX-License-Identifier: GPL-2.0
//! What an operator breaks most, after the hardware: the module's
//! installation. DKMS state for the running kernel, the systemd unit that
//! loads the module at boot, and which `.ko` `modprobe nvidia-peermem`
//! would load (this project's drop-in or NVIDIA's own).
//!
//! Everything is read as files under the [`SysRoot`] (the DKMS tree in
//! `/var/lib/dkms`, `/lib/modules/<kernel>/modules.dep`, the unit files),
//! so fixture trees test every state. The unit's run-time state is the one
//! thing that is not a file: `systemctl show` on a live system, the file
//! `<root>/systemctl_show.txt` under a fixture root.

use serde_json::json;

use super::SysRoot;
use crate::report::Check;

/// The DKMS module names of this project: the module under its own name,
/// and the drop-in under NVIDIA's.
pub const DKMS_NAMES: &[&str] = &["nvidia-peermem-rs", "nvidia-peermem-rs-dropin"];

/// The systemd unit the packages install.
pub const UNIT: &str = "nvidia-peermem-rs.service";

/// Where unit files live, in systemd's order of precedence.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// The running kernel's release (`uname -r`), from procfs.
pub fn kernel_release(r: &SysRoot) -> Option<String> {
    r.read("/proc/sys/kernel/osrelease")
        .filter(|s| !s.is_empty())
}

/// The machine name DKMS uses in its tree (`uname -m`): procfs says it
/// (Linux 6.1 and later), else the one this binary was built for.
fn machine(r: &SysRoot) -> String {
    r.read("/proc/sys/kernel/arch")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Whether kernel `kver` was built with `CONFIG_RUST=y`: `Some(false)` only
/// when its config says so, `None` when no config is found.
fn kernel_has_rust(r: &SysRoot, kver: &str) -> Option<bool> {
    let config = [
        format!("/boot/config-{kver}"),
        format!("/lib/modules/{kver}/build/.config"),
    ]
    .iter()
    .find_map(|p| r.read(p))?;
    Some(config.lines().any(|l| l.trim() == "CONFIG_RUST=y"))
}

/// Module files of one name in a `/lib/modules/<kver>/...` directory,
/// compressed or not.
fn ko_names(base: &str) -> [String; 4] {
    [
        format!("{base}.ko"),
        format!("{base}.ko.xz"),
        format!("{base}.ko.zst"),
        format!("{base}.ko.gz"),
    ]
}

/// The last line of a DKMS make.log that says why the build stopped.
fn build_error(r: &SysRoot, name: &str, version: &str) -> Option<String> {
    let log = r.read(&format!("/var/lib/dkms/{name}/{version}/build/make.log"))?;
    log.lines()
        .rev()
        .find(|l| l.contains("error:") || l.contains("Error "))
        .map(|l| l.trim().to_string())
}

/// This project's DKMS modules registered with DKMS, as (name, version):
/// those whose source DKMS holds.
pub fn registered(r: &SysRoot) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for name in DKMS_NAMES {
        for version in r.list(&format!("/var/lib/dkms/{name}")) {
            if r.exists(&format!("/var/lib/dkms/{name}/{version}/source"))
                || r.exists(&format!("/usr/src/{name}-{version}/dkms.conf"))
            {
                out.push((*name, version));
            }
        }
    }
    out
}

/// The module file DKMS module `name` installed for kernel `kver`, in the
/// directories distributions have DKMS install to.
fn installed_file(r: &SysRoot, name: &str, kver: &str) -> Option<String> {
    // The drop-in's dkms.conf installs nvidia_peermem.ko, beside the
    // nvidia-peermem.ko an NVIDIA driver's DKMS package may own.
    let module = if name.ends_with("-dropin") {
        "nvidia_peermem"
    } else {
        "nvidia_peermem_rs"
    };
    ["updates/dkms", "updates", "extra"].iter().find_map(|d| {
        ko_names(module)
            .into_iter()
            .map(|f| format!("/lib/modules/{kver}/{d}/{f}"))
            .find(|p| r.exists(p))
    })
}

/// Where this project's module is installed for kernel `kver`: a file DKMS
/// installed (under either DKMS name), DKMS's record of the installation,
/// or an `nvidia_peermem_rs` that depmod indexed (installed by hand).
pub fn installed_module(r: &SysRoot, kver: &str) -> Option<String> {
    let arch = machine(r);
    DKMS_NAMES
        .iter()
        .find_map(|n| installed_file(r, n, kver))
        .or_else(|| {
            DKMS_NAMES
                .iter()
                .map(|n| format!("/var/lib/dkms/{n}/kernel-{kver}-{arch}"))
                .find(|p| r.exists(p))
        })
        .or_else(|| modprobe_file(r, kver, "nvidia_peermem_rs"))
}

/// DKMS state of this project's module for the running kernel.
pub fn dkms_state(r: &SysRoot) -> Check {
    const T: &str = "DKMS (running kernel)";
    let Some(kver) = kernel_release(r) else {
        return Check::skip(
            "dkms_state",
            T,
            "cannot read the running kernel's release (/proc/sys/kernel/osrelease)",
        );
    };
    let arch = machine(r);
    let registered = registered(r);
    let mut data = json!({"kernel": kver, "arch": arch, "registered": registered
        .iter()
        .map(|(n, v)| format!("{n}/{v}"))
        .collect::<Vec<_>>()});
    if registered.is_empty() {
        let loaded = super::loaded_clients(r).contains(&"nvidia_peermem_rs");
        return if loaded {
            Check::warn(
                "dkms_state",
                T,
                "nvidia_peermem_rs is loaded but not registered with DKMS: the next kernel will not get a module",
            )
            .fix("install the package (apt install ./nvidia-peermem-rs-dkms_*.deb) or run make dkms-install")
            .data(data)
        } else {
            Check::skip(
                "dkms_state",
                T,
                "nvidia-peermem-rs is not registered with DKMS (not installed from the package)",
            )
            .data(data)
        };
    }
    let rust = kernel_has_rust(r, &kver);
    data["kernel_config_rust"] = json!(rust);
    let mut found = Vec::new();
    for (name, version) in &registered {
        let built = r.exists(&format!("/var/lib/dkms/{name}/{version}/{kver}/{arch}"));
        let installed = r.exists(&format!("/var/lib/dkms/{name}/kernel-{kver}-{arch}"))
            || installed_file(r, name, &kver).is_some();
        found.push((name, version, built, installed));
    }
    data["states"] = json!(found
        .iter()
        .map(|(n, v, b, i)| json!({"name": n, "version": v, "built": b, "installed": i}))
        .collect::<Vec<_>>());
    if let Some((n, v, _, _)) = found.iter().find(|f| f.3) {
        return Check::pass(
            "dkms_state",
            T,
            format!("{n}/{v} installed for {kver} ({arch})"),
        )
        .data(data);
    }
    let (n, v, built, _) = found[0];
    if rust == Some(false) {
        return Check::fail(
            "dkms_state",
            T,
            format!("{n}/{v} is registered, but kernel {kver} was built without CONFIG_RUST=y: DKMS skips it"),
        )
        .fix("boot a kernel built with CONFIG_RUST=y (or use NVIDIA's dma-buf path: README)")
        .data(data);
    }
    if built {
        return Check::fail(
            "dkms_state",
            T,
            format!("{n}/{v} is built for {kver} but not installed"),
        )
        .fix(format!("dkms install {n}/{v} -k {kver}"))
        .data(data);
    }
    let why = build_error(r, n, v)
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    Check::fail(
        "dkms_state",
        T,
        format!("{n}/{v} is registered but not built for {kver}{why}"),
    )
    .fix(format!(
        "dkms install {n}/{v} -k {kver}; the reason is at the end of /var/lib/dkms/{n}/{v}/build/make.log"
    ))
    .data(data)
}

/// `systemctl show` of the unit as key=value lines: a live query, or
/// `<root>/systemctl_show.txt` under a fixture root.
fn unit_properties(r: &SysRoot) -> Option<String> {
    if !r.is_live() {
        return r.read("/systemctl_show.txt");
    }
    let o = std::process::Command::new("systemctl")
        .args([
            "show",
            "--property=ActiveState,SubState,Result,ConditionResult,UnitFileState",
            UNIT,
        ])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn property<'a>(props: &'a str, key: &str) -> Option<&'a str> {
    props
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
}

/// The boot-time unit: installed, enabled, and what its last start did.
pub fn systemd_unit(r: &SysRoot) -> Check {
    const T: &str = "systemd unit";
    let Some(file) = UNIT_DIRS
        .iter()
        .map(|d| format!("{d}/{UNIT}"))
        .find(|p| r.exists(p))
    else {
        return Check::skip(
            "systemd_unit",
            T,
            format!("{UNIT} is not installed (module not installed from the package)"),
        );
    };
    let enabled = r.is_present(&format!(
        "/etc/systemd/system/multi-user.target.wants/{UNIT}"
    ));
    let props = unit_properties(r).unwrap_or_default();
    let active = property(&props, "ActiveState")
        .unwrap_or("unknown")
        .to_string();
    let result = property(&props, "Result").unwrap_or("").to_string();
    let condition = property(&props, "ConditionResult")
        .unwrap_or("")
        .to_string();
    let data = json!({"file": file, "enabled": enabled, "active_state": active,
        "result": result, "condition_result": condition});
    let journal = format!("journalctl -b -u {UNIT}");
    if active == "failed" {
        return Check::fail(
            "systemd_unit",
            T,
            format!("{UNIT} failed ({result}): the module did not load at boot"),
        )
        .fix(format!(
            "read {journal}, fix the cause, then systemctl restart {UNIT}"
        ))
        .data(data);
    }
    if !enabled {
        return Check::warn(
            "systemd_unit",
            T,
            format!("{UNIT} is installed but not enabled: the module will not load at boot"),
        )
        .fix(format!("systemctl enable --now {UNIT}"))
        .data(data);
    }
    if condition == "no" {
        return Check::warn(
            "systemd_unit",
            T,
            format!("{UNIT} was skipped at boot: ib_core or the NVIDIA driver was not loaded when it ran"),
        )
        .fix(format!(
            "start openibd and the NVIDIA driver before it (or check their units), then systemctl start {UNIT}"
        ))
        .data(data);
    }
    match active.as_str() {
        "active" => Check::pass("systemd_unit", T, format!("{UNIT} enabled and active")).data(data),
        "unknown" => Check::pass(
            "systemd_unit",
            T,
            format!("{UNIT} enabled (its state could not be read)"),
        )
        .data(data),
        other => Check::warn(
            "systemd_unit",
            T,
            format!("{UNIT} enabled but {other}: the module is not loaded by it now"),
        )
        .fix(format!("systemctl start {UNIT}; if it fails: {journal}"))
        .data(data),
    }
}

/// The module file `modprobe NAME` loads for kernel `kver`, from depmod's
/// `modules.dep` (where depmod has already chosen between `updates/` and
/// the kernel's own directories): its path under `/lib/modules/<kver>`.
pub fn modprobe_file(r: &SysRoot, kver: &str, name: &str) -> Option<String> {
    let dep = r.read(&format!("/lib/modules/{kver}/modules.dep"))?;
    let wanted = name.replace('-', "_");
    dep.lines().find_map(|l| {
        let path = l.split(':').next()?.trim();
        let file = path.rsplit('/').next()?;
        let base = file.split(".ko").next()?;
        (base.replace('-', "_") == wanted).then(|| format!("/lib/modules/{kver}/{path}"))
    })
}

/// Whose module file `path` is: this project's carries the parameter
/// `coalesce_sg` in its `.modinfo` (NVIDIA's has none). On a live system a
/// compressed file is asked of `modinfo`; under a fixture root files are
/// stored uncompressed whatever their name.
fn file_is_ours(r: &SysRoot, path: &str) -> Option<bool> {
    const MARK: &[u8] = b"parmtype=coalesce_sg:";
    if path.ends_with(".ko") || !r.is_live() {
        let bytes = r.read_bytes(path, 64 << 20)?;
        return Some(bytes.windows(MARK.len()).any(|w| w == MARK));
    }
    let o = std::process::Command::new("modinfo")
        .args(["-F", "parm", path])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).contains("coalesce_sg"))
}

/// Which `.ko` `modprobe nvidia-peermem` would load: the drop-in or
/// NVIDIA's, and whether that fits what is installed.
pub fn modprobe_target(r: &SysRoot) -> Check {
    const T: &str = "modprobe nvidia-peermem";
    let Some(kver) = kernel_release(r) else {
        return Check::skip(
            "modprobe_target",
            T,
            "cannot read the running kernel's release",
        );
    };
    if !r.exists(&format!("/lib/modules/{kver}/modules.dep")) {
        return Check::skip(
            "modprobe_target",
            T,
            format!("no /lib/modules/{kver}/modules.dep to read"),
        );
    }
    let ours_rs = modprobe_file(r, &kver, "nvidia_peermem_rs");
    let Some(file) = modprobe_file(r, &kver, "nvidia-peermem") else {
        return Check::pass(
            "modprobe_target",
            T,
            format!(
                "no nvidia-peermem module for {kver}: nothing loads NVIDIA's client by that name{}",
                ours_rs
                    .as_deref()
                    .map(|f| format!("; modprobe nvidia_peermem_rs loads {f}"))
                    .unwrap_or_default()
            ),
        )
        .data(json!({"kernel": kver, "nvidia_peermem": null, "nvidia_peermem_rs": ours_rs}));
    };
    let ours = file_is_ours(r, &file);
    let who = match ours {
        Some(true) => "the nvidia-peermem-rs drop-in",
        Some(false) => "NVIDIA's module",
        None => "a module of unknown origin",
    };
    let data = json!({"kernel": kver, "nvidia_peermem": file, "ours": ours,
        "nvidia_peermem_rs": ours_rs});
    let detail = format!("loads {who}: {file}");
    match (ours, &ours_rs) {
        (Some(false), Some(rs)) => Check::warn("modprobe_target", T, format!(
            "{detail}; nvidia_peermem_rs is installed too ({rs}): whatever runs `modprobe nvidia-peermem` (GPU Operator, modules-load.d) loads NVIDIA's client, and the guard refuses one of the two"))
            .fix("use one client: the drop-in package (nvidia-peermem-rs-dropin-dkms) where nodes load nvidia-peermem by name, or remove those loaders")
            .data(data),
        _ => Check::pass("modprobe_target", T, detail).data(data),
    }
}
