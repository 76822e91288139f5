// SPDX-License-Identifier: GPL-2.0
//! Where doctor reads the system from: `/` on a real node, a fixture tree in
//! tests (`--root DIR`). Paths are always given as absolute system paths
//! (`/sys/...`, `/proc/...`) and re-rooted here.
//!
//! Two inputs are not files on a real system: the kernel log and
//! `ofed_info -s`. Under a fixture root they come from `<root>/dmesg.txt`
//! and `<root>/ofed_info.txt`; on `/` from `dmesg` (or `/dev/kmsg`) and the
//! `ofed_info` command.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The filesystem view doctor inspects.
#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl SysRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// True when inspecting the live system.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `path` (absolute, e.g. `/sys/module`) under the root.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// A file's text, trimmed; `None` if it cannot be read.
    pub fn read(&self, path: &str) -> Option<String> {
        fs::read_to_string(self.path(path))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// At most `max` bytes of a file.
    pub fn read_bytes(&self, path: &str, max: usize) -> Option<Vec<u8>> {
        let mut f = fs::File::open(self.path(path)).ok()?;
        let mut buf = Vec::new();
        f.by_ref().take(max as u64).read_to_end(&mut buf).ok()?;
        Some(buf)
    }

    pub fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    /// Whether `path` is there, as a file or as a symlink even when its
    /// target is not (systemd's enablement links are absolute, so under a
    /// fixture root they point outside it).
    pub fn is_present(&self, path: &str) -> bool {
        fs::symlink_metadata(self.path(path)).is_ok()
    }

    /// Sorted entry names of a directory (empty if missing).
    pub fn list(&self, path: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.path(path))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Resolves a symlink (e.g. `/sys/class/infiniband/mlx5_0/device`) to a
    /// system path, relative to the root (`/sys/devices/pci0000:00/...`).
    pub fn resolve(&self, path: &str) -> Option<String> {
        let real = fs::canonicalize(self.path(path)).ok()?;
        let root = fs::canonicalize(&self.root).ok()?;
        let rel = real.strip_prefix(&root).ok()?;
        Some(format!("/{}", rel.to_string_lossy()))
    }

    /// The kernel log.
    pub fn dmesg(&self) -> Option<String> {
        if !self.is_live() {
            return self.read("/dmesg.txt");
        }
        if let Ok(o) = Command::new("dmesg").output() {
            if o.status.success() {
                return Some(String::from_utf8_lossy(&o.stdout).into_owned());
            }
        }
        read_kmsg()
    }

    /// `ofed_info -s` output, if MLNX_OFED / DOCA-OFED is installed.
    pub fn ofed_info(&self) -> Option<String> {
        if !self.is_live() {
            return self.read("/ofed_info.txt");
        }
        let o = Command::new("ofed_info").arg("-s").output().ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    }
}

impl SysRoot {
    /// The output of a command on the live system (`None` when it is
    /// missing or fails); under a fixture root, the file `fixture` stands
    /// in for it (as `/dmesg.txt` does for the kernel log).
    pub fn command(&self, program: &str, args: &[&str], fixture: &str) -> Option<String> {
        if !self.is_live() {
            return self.read(fixture);
        }
        let o = Command::new(program).args(args).output().ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    }
}

/// Reads what is buffered in /dev/kmsg without blocking (busybox systems
/// may lack `dmesg`). Each record is `prio,seq,time,flags;message`.
fn read_kmsg() -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut out = String::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                let msg = rec.split_once(';').map_or(rec.as_ref(), |(_, m)| m);
                out.push_str(msg.lines().next().unwrap_or(""));
                out.push('\n');
            }
            // EPIPE: a record was overwritten; keep reading.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Some(out)
}

/// A temporary root holding `files` (absolute paths), each with its text:
/// the doctor checks' tests read a node made of these.
#[cfg(test)]
pub fn test_root(files: &[(&str, &str)]) -> (tempfile::TempDir, SysRoot) {
    let t = tempfile::tempdir().unwrap();
    for (f, text) in files {
        let p = t.path().join(f.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let r = SysRoot::new(t.path());
    (t, r)
}
