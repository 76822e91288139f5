// SPDX-License-Identifier: GPL-2.0
//! `doctor --bundle FILE`: one text file to attach to a bug report.
//!
//! It holds doctor's report (text and JSON) and the raw facts behind it:
//! versions, the peer-memory modules' parameters, the module's debugfs
//! counters, the package's configuration files, the DKMS build log's end,
//! `modules.dep` lines of the peer-memory modules, the unit's state and
//! journal, and the kernel log lines of the GPU / RDMA / peer-memory stack.
//!
//! No secrets: nothing from the environment, no user files, only the files
//! and command outputs listed in [`FILES`] and [`COMMANDS`] (the unit's
//! status without its journal lines and its journal as bare messages
//! (`-o cat`), so the node's host name is not in them), and of the kernel
//! log only the lines that name the stack. Under a fixture root no command runs: each
//! command's output is read from `<root>/<fixture>` instead.

use std::fmt::Write as _;

use super::install::{self, kernel_release};
use super::SysRoot;
use crate::report::Check;

/// Files copied whole (each at most [`MAX_FILE`] bytes), when present.
pub const FILES: &[&str] = &[
    "/proc/version",
    "/proc/cmdline",
    "/proc/driver/nvidia/version",
    "/sys/module/nvidia/version",
    "/sys/module/ib_core/version",
    "/sys/module/nvidia_peermem_rs/version",
    "/sys/module/nvidia_peermem/version",
    "/sys/module/nv_peer_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/kernel/debug/nvidia_peermem_rs/stats",
    "/etc/modprobe.d/nvidia-peermem-rs.conf",
    "/etc/nvidia-peermem-rs/build.conf",
];

/// Directories whose files (one level) are copied: the clients' parameters.
const PARAMETER_DIRS: &[&str] = &[
    "/sys/module/nvidia_peermem_rs/parameters",
    "/sys/module/nvidia_peermem/parameters",
    "/sys/module/nv_peer_mem/parameters",
];

/// Commands whose output is included on a live system: (program, arguments,
/// the file that stands for its output under a fixture root).
pub const COMMANDS: &[(&str, &[&str], &str)] = &[
    ("uname", &["-rm"], "uname.txt"),
    ("dkms", &["status"], "dkms_status.txt"),
    ("ofed_info", &["-s"], "ofed_info.txt"),
    (
        "systemctl",
        &["status", "--no-pager", "--full", "--lines=0", install::UNIT],
        "systemctl_status.txt",
    ),
    (
        "journalctl",
        &[
            "-b",
            "--no-pager",
            "-o",
            "cat",
            "-n",
            "200",
            "-u",
            install::UNIT,
        ],
        "journal.txt",
    ),
    ("modinfo", &["nvidia-peermem"], "modinfo_nvidia_peermem.txt"),
    (
        "modinfo",
        &["nvidia_peermem_rs"],
        "modinfo_nvidia_peermem_rs.txt",
    ),
];

/// At most this many bytes of any one file or command output.
const MAX_FILE: usize = 64 << 10;

/// Kernel log lines kept: those naming the stack, the last [`MAX_LOG_LINES`].
const LOG_WORDS: &[&str] = &[
    "peermem",
    "peer_mem",
    "nv_mem",
    "NVRM",
    "nvidia",
    "ib_core",
    "mlx5",
    "infiniband",
    "rdma",
    "PeerDirect",
    "DMAR",
    "IOMMU",
    "AMD-Vi",
];
const MAX_LOG_LINES: usize = 300;

fn section(out: &mut String, title: &str, body: &str) {
    let _ = writeln!(out, "===== {title}");
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
}

fn clip(s: String) -> String {
    if s.len() <= MAX_FILE {
        return s;
    }
    let mut end = MAX_FILE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[... cut at {MAX_FILE} bytes]\n", &s[..end])
}

fn command_output(r: &SysRoot, prog: &str, args: &[&str], fixture: &str) -> String {
    if !r.is_live() {
        return r
            .read(&format!("/{fixture}"))
            .map(clip)
            .unwrap_or_else(|| format!("(no {fixture} in the fixture root)"));
    }
    match std::process::Command::new(prog)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LC_ALL", "C")
        .output()
    {
        Ok(o) => {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            if !o.status.success() {
                let _ = writeln!(s, "(exit status {})", o.status);
            }
            clip(s)
        }
        Err(e) => format!("(could not run {prog}: {e})\n"),
    }
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The bundle's text: doctor's findings `checks` and `json` (its JSON
/// document), then the facts read under `r`.
pub fn bundle(r: &SysRoot, checks: &[Check], json: &str) -> String {
    let mut out = String::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "peermem-check {} diagnostics bundle, {}",
        env!("CARGO_PKG_VERSION"),
        utc(now)
    );
    let _ = writeln!(
        out,
        "Contents: doctor's report, versions, module parameters and counters, the package's\n\
         configuration, DKMS and systemd state, and the kernel log lines of the GPU/RDMA stack.\n\
         Nothing from the environment or user files. Read it before you send it."
    );
    section(&mut out, "doctor", &crate::report::human(checks));
    section(&mut out, "doctor --json", json);
    for f in FILES {
        if let Some(t) = r.read(f) {
            section(&mut out, &format!("file {f}"), &clip(t));
        }
    }
    for d in PARAMETER_DIRS {
        let names = r.list(d);
        if names.is_empty() {
            continue;
        }
        let mut body = String::new();
        for n in names {
            let v = r.read(&format!("{d}/{n}")).unwrap_or_default();
            let _ = writeln!(body, "{n}={v}");
        }
        section(&mut out, &format!("parameters {d}"), &body);
    }
    if let Some(kver) = kernel_release(r) {
        let dep = r
            .read(&format!("/lib/modules/{kver}/modules.dep"))
            .unwrap_or_default();
        let lines: Vec<&str> = dep
            .lines()
            .filter(|l| {
                let m = l.split(':').next().unwrap_or("");
                m.contains("peermem") || m.contains("peer_mem") || m.contains("ib_core")
            })
            .collect();
        section(
            &mut out,
            &format!("modules.dep of {kver} (peer-memory and ib_core lines)"),
            &(lines.join("\n") + "\n"),
        );
    }
    for name in install::DKMS_NAMES {
        for v in r.list(&format!("/var/lib/dkms/{name}")) {
            if let Some(log) = r.read(&format!("/var/lib/dkms/{name}/{v}/build/make.log")) {
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                section(
                    &mut out,
                    &format!("/var/lib/dkms/{name}/{v}/build/make.log (last 60 lines)"),
                    &(tail.join("\n") + "\n"),
                );
            }
        }
    }
    for (prog, args, fixture) in COMMANDS {
        let title = format!("command {prog} {}", args.join(" "));
        section(&mut out, &title, &command_output(r, prog, args, fixture));
    }
    let log = r.dmesg().unwrap_or_default();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| LOG_WORDS.iter().any(|w| l.contains(w)))
        .collect();
    let start = lines.len().saturating_sub(MAX_LOG_LINES);
    section(
        &mut out,
        &format!(
            "kernel log, lines naming the GPU/RDMA/peer-memory stack (last {MAX_LOG_LINES} of {})",
            lines.len()
        ),
        &(lines[start..].join("\n") + "\n"),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_638_896), "2026-11-25 20:34:56 UTC");
    }

    #[test]
    fn clip_cuts_long_text() {
        let s = "x".repeat(MAX_FILE + 10);
        let c = clip(s);
        assert!(c.len() < MAX_FILE + 64 && c.ends_with("bytes]\n"));
        assert_eq!(clip("short".into()), "short");
    }
}
