// SPDX-License-Identifier: GPL-2.0
//! Which NCCL and UCX are installed, and whether each will use GPUDirect
//! RDMA here by the files its own version tests.
//!
//! NCCL and UCX decide by whether a file exists, and which files they test
//! changed over their releases (read in their sources, each list from the
//! release that first has it):
//! - NCCL 2.3.5 - 2.9.6: `memory_peers/nv_mem/version` only;
//!   2.9.8 - 2.21.5: also `memory_peers/nvidia-peermem/version`;
//!   2.22.3: `nv_mem` and `nv_mem_nc`; 2.23.4 (September 2024) on: also
//!   `/sys/module/nvidia_peermem/version`. From 2.29.7 (February 2026) its
//!   GIN/GDAKI path tests `/sys/module/nvidia_peermem/version` only
//!   (`ncclIbPeerMemSupport`, "GDAKI does not support nv_peer_mem").
//! - UCX up to 1.17: `memory_peers/nv_mem/version` only; 1.18.0 (January
//!   2025) on: also `/sys/module/nvidia_peermem/version` and
//!   `/sys/module/nv_peer_mem/version`.
//!
//! So on a PeerDirect core without `/sys/kernel/mm/memory_peers` (DOCA-OFED
//! 23.10+ on Linux 6.6+) an older NCCL or UCX sees no peer-memory module at
//! all, NVIDIA's own included. DMA-BUF, which both can use instead on
//! recent kernels and drivers, is not judged here.

use std::process::Command;

use serde_json::json;

use super::SysRoot;
use crate::report::{Check, Verdict};

/// A release, major.minor.patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl Version {
    /// The version at the start of `s` (`2.21.5`, `2.21.5-1+cuda12.4`,
    /// `1.17.0+ds-3`); a missing patch is 0.
    pub fn parse(s: &str) -> Option<Version> {
        let head: String = s
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = head.split('.').filter(|p| !p.is_empty());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        Some(Version(major, minor, patch))
    }
}

const NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
const NV_MEM_NC: &str = "/sys/kernel/mm/memory_peers/nv_mem_nc/version";
const NVIDIA_PEERMEM_TREE: &str = "/sys/kernel/mm/memory_peers/nvidia-peermem/version";
const SYS_MODULE: &str = "/sys/module/nvidia_peermem/version";
const NV_PEER_MEM: &str = "/sys/module/nv_peer_mem/version";

/// The files a library's releases test, from the release that first tests
/// that list; the lists in release order.
pub type History = &'static [(Version, &'static [&'static str])];

/// NCCL's IB transport (`net_ib.cu`, `net_ib.cc`, `net_ib/gdr.cc`).
pub const NCCL_HISTORY: History = &[
    (Version(0, 0, 0), &[NV_MEM]),
    (Version(2, 9, 8), &[NV_MEM, NVIDIA_PEERMEM_TREE]),
    (Version(2, 22, 3), &[NV_MEM, NV_MEM_NC]),
    (Version(2, 23, 4), &[NV_MEM, NV_MEM_NC, SYS_MODULE]),
];

/// NCCL's GIN/GDAKI path (`net_ib/gin.cc`): from this release on it tests
/// only [`SYS_MODULE`].
pub const NCCL_GDAKI_FROM: Version = Version(2, 29, 7);

/// UCX's IB memory domain (`src/uct/ib/base/ib_md.c`).
pub const UCX_HISTORY: History = &[
    (Version(0, 0, 0), &[NV_MEM]),
    (Version(1, 18, 0), &[NV_MEM, SYS_MODULE, NV_PEER_MEM]),
];

/// The files release `v` tests.
pub fn tested_by(history: History, v: Version) -> &'static [&'static str] {
    history
        .iter()
        .rev()
        .find(|(from, _)| *from <= v)
        .map_or(&[], |(_, files)| *files)
}

/// The first release after `v` that tests a file `present` says is there,
/// and that file.
fn first_that_sees(
    history: History,
    v: Version,
    present: &dyn Fn(&str) -> bool,
) -> Option<(Version, &'static str)> {
    history
        .iter()
        .filter(|(from, _)| *from > v)
        .find_map(|(from, files)| files.iter().find(|f| present(f)).map(|f| (*from, *f)))
}

/// The releases from which the file `path` is tested by NCCL and by UCX,
/// in words, for doctor's line about the file NCCL and UCX find
/// (`NCCL >= 2.23.4, UCX >= 1.18.0`); empty when every release of both
/// tests it.
pub fn since(path: &str) -> String {
    let mut out = Vec::new();
    for (name, history) in [("NCCL", NCCL_HISTORY), ("UCX", UCX_HISTORY)] {
        let Some(first) = history.iter().position(|(_, files)| files.contains(&path)) else {
            out.push(format!("not {name}"));
            continue;
        };
        let from = history[first].0;
        match history[first..]
            .iter()
            .find(|(_, files)| !files.contains(&path))
        {
            Some((end, _)) => out.push(format!("{name} {from} to before {end}")),
            None if from == Version(0, 0, 0) => {}
            None => out.push(format!("{name} >= {from}")),
        }
    }
    out.join(", ")
}

/// One installation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// Its version, where one of its sources says.
    pub version: Option<Version>,
    /// Where it was found (a library file, a wheel, a package).
    pub source: String,
}

/// The library folders a distribution, CUDA, HPC-X or a local build puts
/// libraries in (`*` is any one name).
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda-*/lib64",
    "/usr/local/cuda*/targets/*/lib",
    "/opt/*/lib",
    "/opt/*/lib64",
    "/opt/hpcx*/*/lib",
    "/opt/conda/lib",
];

/// Where Python keeps installed wheels: the system's and the user's
/// site directories, and the virtual environments AI stacks are commonly
/// installed in (`/opt/<app>` itself, `/opt/<app>/.venv` as uv makes it,
/// a `.venv` in a home or a project of it, conda's environments). PyTorch
/// and JAX bring their own NCCL as a wheel (`nvidia-nccl-cu12`, `-cu13`),
/// and that, not the system's, is the NCCL they run.
const SITE_DIRS: &[&str] = &[
    "/usr/lib/python3*/site-packages",
    "/usr/lib/python3/dist-packages",
    "/usr/local/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/opt/conda/lib/python3*/site-packages",
    "/opt/conda/envs/*/lib/python3*/site-packages",
    "/opt/*/lib/python3*/site-packages",
    "/opt/*/.venv/lib/python3*/site-packages",
    "/opt/*/venv/lib/python3*/site-packages",
    "/root/.local/lib/python3*/site-packages",
    "/root/.venv/lib/python3*/site-packages",
    "/root/*/.venv/lib/python3*/site-packages",
    "/home/*/.local/lib/python3*/site-packages",
    "/home/*/.venv/lib/python3*/site-packages",
    "/home/*/*/.venv/lib/python3*/site-packages",
];

/// The site directories of the environment doctor runs in, when one is
/// active (`VIRTUAL_ENV`, `CONDA_PREFIX`), wherever it is.
fn active_env_site_dirs() -> Vec<String> {
    ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .filter(|d| d.starts_with('/'))
        .map(|d| format!("{}/lib/python3*/site-packages", d.trim_end_matches('/')))
        .collect()
}

/// The paths under `r` that `pattern` names, `*` matching within one name.
fn expand(r: &SysRoot, pattern: &str) -> Vec<String> {
    let mut paths = vec![String::new()];
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        let mut next = Vec::new();
        for p in &paths {
            if part.contains('*') {
                for name in r.list(if p.is_empty() { "/" } else { p }) {
                    if glob_match(part, &name) {
                        next.push(format!("{p}/{name}"));
                    }
                }
            } else {
                let q = format!("{p}/{part}");
                if r.is_present(&q) {
                    next.push(q);
                }
            }
        }
        paths = next;
    }
    paths
}

/// `name` against a pattern whose `*` match any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = (parts[0], &parts[1..]);
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    for (i, p) in rest.iter().enumerate() {
        if i == rest.len() - 1 {
            return tail.ends_with(p) && tail.len() >= p.len();
        }
        match tail.find(p) {
            Some(at) => tail = &tail[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// The folders to look for libraries in: the usual ones, and on the live
/// system those of `LD_LIBRARY_PATH`.
pub(super) fn lib_dirs(r: &SysRoot) -> Vec<String> {
    let mut dirs: Vec<String> = LIB_DIRS.iter().flat_map(|d| expand(r, d)).collect();
    if r.is_live() {
        if let Ok(p) = std::env::var("LD_LIBRARY_PATH") {
            dirs.extend(
                p.split(':')
                    .filter(|d| d.starts_with('/'))
                    .map(String::from),
            );
        }
    }
    dirs.dedup();
    dirs
}

/// A library file's version from its name (`libnccl.so.2.21.5`), or from
/// the name of the file its link points to.
fn version_of_lib(r: &SysRoot, path: &str, stem: &str) -> Option<Version> {
    let from_name = |name: &str| name.strip_prefix(stem).and_then(Version::parse);
    let name = path.rsplit('/').next()?;
    from_name(name).or_else(|| {
        let target = std::fs::read_link(r.path(path)).ok()?;
        from_name(target.file_name()?.to_str()?)
    })
}

/// What `/var/lib/dpkg/status` says of installed `packages`: each one's
/// version.
pub(super) fn dpkg(r: &SysRoot, packages: &[&str]) -> Vec<Install> {
    let Some(status) = r.read("/var/lib/dpkg/status") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stanza in status.split("\n\n") {
        let field = |k: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        let (Some(pkg), Some(st), Some(ver)) =
            (field("Package:"), field("Status:"), field("Version:"))
        else {
            continue;
        };
        if packages.contains(&pkg.as_str()) && st.ends_with(" installed") {
            out.push(Install {
                version: Version::parse(&ver),
                source: format!("Debian package {pkg} {ver}"),
            });
        }
    }
    out
}

/// The wheels (`NAME-VERSION.dist-info`) and conda packages
/// (`conda-meta/NAME-VERSION-BUILD.json`) whose name starts with one of
/// `names`.
fn python_packages(r: &SysRoot, names: &[&str]) -> Vec<Install> {
    let mut out = Vec::new();
    let patterns = SITE_DIRS
        .iter()
        .map(|d| d.to_string())
        .chain(active_env_site_dirs());
    let mut sites: Vec<String> = Vec::new();
    for site in patterns.flat_map(|d| expand(r, &d)) {
        if !sites.contains(&site) {
            sites.push(site);
        }
    }
    for site in sites {
        for entry in r.list(&site) {
            let Some(stem) = entry.strip_suffix(".dist-info") else {
                continue;
            };
            let Some((name, ver)) = stem.rsplit_once('-') else {
                continue;
            };
            if names.iter().any(|n| name.starts_with(n)) {
                out.push(Install {
                    version: Version::parse(ver),
                    source: format!("Python wheel {name} {ver} ({site})"),
                });
            }
        }
    }
    for entry in r.list("/opt/conda/conda-meta") {
        let Some(stem) = entry.strip_suffix(".json") else {
            continue;
        };
        let mut words = stem.rsplitn(3, '-');
        let (_build, ver, name) = (words.next(), words.next(), words.next());
        if let (Some(ver), Some(name)) = (ver, name) {
            if names.contains(&name) {
                out.push(Install {
                    version: Version::parse(ver),
                    source: format!("conda package {name} {ver}"),
                });
            }
        }
    }
    out
}

/// Every NCCL found: library files, wheels (nvidia-nccl-cu12, ...), conda
/// and Debian packages.
pub fn find_nccl(r: &SysRoot) -> Vec<Install> {
    let mut out = Vec::new();
    for dir in lib_dirs(r) {
        for name in r.list(&dir) {
            if name.starts_with("libnccl.so") {
                let path = format!("{dir}/{name}");
                out.push(Install {
                    version: version_of_lib(r, &path, "libnccl.so."),
                    source: path,
                });
            }
        }
    }
    out.extend(python_packages(r, &["nvidia_nccl_cu", "nccl"]));
    out.extend(dpkg(r, &["libnccl2"]));
    dedup(out)
}

/// Every UCX found: `ucx_info -v`, `ucx.pc`, the UCX library without a
/// version, wheels (libucx-cu12), conda and Debian packages.
pub fn find_ucx(r: &SysRoot) -> Vec<Install> {
    let mut out = Vec::new();
    if let Some(info) = ucx_info(r) {
        let ver = info.lines().find_map(|l| {
            l.split_once("Library version:")
                .map(|(_, v)| v.trim().to_string())
        });
        let path = info.lines().find_map(|l| {
            l.split_once("Library path:")
                .map(|(_, v)| v.trim().to_string())
        });
        if let Some(ver) = ver {
            out.push(Install {
                version: Version::parse(&ver),
                source: format!(
                    "ucx_info -v ({})",
                    path.as_deref().unwrap_or("library path not said")
                ),
            });
        }
    }
    for dir in lib_dirs(r) {
        let pc = format!("{dir}/pkgconfig/ucx.pc");
        if let Some(text) = r.read(&pc) {
            let ver = text.lines().find_map(|l| l.strip_prefix("Version:"));
            out.push(Install {
                version: ver.and_then(Version::parse),
                source: pc,
            });
        }
        for name in r.list(&dir) {
            if name.starts_with("libucs.so") {
                out.push(Install {
                    version: None,
                    source: format!("{dir}/{name}"),
                });
            }
        }
    }
    out.extend(python_packages(r, &["libucx_cu", "ucx"]));
    out.extend(dpkg(r, &["libucx0", "ucx"]));
    dedup(out)
}

/// One entry per version, the first source found for it kept; entries
/// without a version only when no source says one (a library file that
/// does not name its version is the same install as a package that does).
fn dedup(all: Vec<Install>) -> Vec<Install> {
    let mut out: Vec<Install> = Vec::new();
    for i in all.iter().filter(|i| i.version.is_some()) {
        if !out.iter().any(|o| o.version == i.version) {
            out.push(i.clone());
        }
    }
    if out.is_empty() {
        if let Some(i) = all.first() {
            out.push(i.clone());
        }
    }
    out
}

/// `ucx_info -v`: under a fixture root, `<root>/ucx_info.txt`.
fn ucx_info(r: &SysRoot) -> Option<String> {
    if !r.is_live() {
        return r.read("/ucx_info.txt");
    }
    let o = Command::new("ucx_info").arg("-v").output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// What one installed release will do here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The file through which it will use GPUDirect RDMA, if any.
    pub via: Option<&'static str>,
    /// The files it tests.
    pub tests: &'static [&'static str],
    /// The first later release that would see a file present here.
    pub later: Option<(Version, &'static str)>,
}

/// What release `v` of a library with `history` decides where `present`
/// says which files exist.
pub fn decide(history: History, v: Version, present: &dyn Fn(&str) -> bool) -> Decision {
    let tests = tested_by(history, v);
    Decision {
        via: tests.iter().copied().find(|f| present(f)),
        tests,
        later: first_that_sees(history, v, present),
    }
}

/// One library's line: each installation found, and whether it will use
/// GPUDirect RDMA here.
fn judge(
    r: &SysRoot,
    name: &str,
    id: &'static str,
    history: History,
    installs: &[Install],
    gdaki: Option<Version>,
) -> Check {
    let title = format!("{name} will use GPUDirect RDMA (by its version)");
    let present = |p: &str| r.exists(p);
    if installs.is_empty() {
        let newest = history.last().map(|(v, _)| *v).unwrap_or(Version(0, 0, 0));
        return Check::skip(
            id,
            title,
            format!(
                "no {name} found (library folders, Python wheels, conda and Debian packages); {name} >= {newest} tests {}",
                tested_by(history, newest).join(", ")
            ),
        );
    }
    let mut verdict = Verdict::Pass;
    let mut parts = Vec::new();
    let mut fix = None;
    let mut data = Vec::new();
    for i in installs {
        let Some(v) = i.version else {
            verdict = verdict.max(Verdict::Warn);
            parts.push(format!(
                "{name} of unknown version ({}): from its version, it tests {}",
                i.source,
                history_words(history)
            ));
            fix.get_or_insert_with(|| format!("find {name}'s version (for UCX: ucx_info -v) and compare it with the line above"));
            data.push(json!({"source": i.source, "version": null}));
            continue;
        };
        let d = decide(history, v, &present);
        data.push(json!({
            "source": i.source,
            "version": v.to_string(),
            "via": d.via,
            "tests": d.tests,
        }));
        match (d.via, d.later) {
            (Some(via), _) => {
                let mut part = format!("{name} {v} ({}): yes (via {via})", i.source);
                if let Some(from) = gdaki.filter(|g| v >= *g) {
                    if !present(SYS_MODULE) {
                        verdict = verdict.max(Verdict::Warn);
                        part.push_str(&format!(
                            "; but its GIN/GDAKI path (from {from}) tests only {SYS_MODULE}, absent here: GDAKI will not use peer memory"
                        ));
                        fix.get_or_insert_with(|| {
                            "load the default package's module (nvidia_peermem: the drop-in), which GDAKI sees".to_string()
                        });
                    }
                }
                parts.push(part);
            }
            (None, Some((from, file))) => {
                verdict = Verdict::Fail;
                parts.push(format!(
                    "{name} {v} ({}): no: it tests only {}, none here; {name} >= {from} would (via {file})",
                    i.source,
                    d.tests.join(", ")
                ));
                fix.get_or_insert_with(|| format!("install {name} {from} or later"));
            }
            (None, None) => {
                verdict = Verdict::Fail;
                parts.push(format!(
                    "{name} {v} ({}): no: it tests only {}, none here, nor does any release see a file present here",
                    i.source,
                    d.tests.join(", ")
                ));
                fix.get_or_insert_with(|| {
                    "load a peer-memory client NCCL and UCX see (the default package: module nvidia_peermem)".to_string()
                });
            }
        }
    }
    let mut c = Check::new(id, title, verdict, parts.join("; ")).data(json!(data));
    if let Some(f) = fix {
        c = c.fix(f);
    }
    c
}

/// A library's history in words: `nv_mem (from 0), ... (from 2.23.4)`.
fn history_words(history: History) -> String {
    history
        .iter()
        .map(|(v, files)| {
            if *v == Version(0, 0, 0) {
                files.join(", ")
            } else {
                format!("from {v}: {}", files.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// doctor's lines for NCCL and UCX.
pub fn checks(r: &SysRoot) -> Vec<Check> {
    vec![
        judge(
            r,
            "NCCL",
            "nccl_version",
            NCCL_HISTORY,
            &find_nccl(r),
            Some(NCCL_GDAKI_FROM),
        ),
        judge(r, "UCX", "ucx_version", UCX_HISTORY, &find_ucx(r), None),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::doctor::sysroot::test_root as root;

    fn present<'a>(files: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
        move |p| files.contains(&p)
    }

    #[test]
    fn versions() {
        assert_eq!(Version::parse("2.21.5"), Some(Version(2, 21, 5)));
        assert_eq!(Version::parse("2.21.5-1+cuda12.4"), Some(Version(2, 21, 5)));
        assert_eq!(Version::parse("1.17.0+ds-3"), Some(Version(1, 17, 0)));
        assert_eq!(Version::parse("1.18"), Some(Version(1, 18, 0)));
        assert_eq!(Version::parse("x"), None);
        assert_eq!(Version::parse("2"), None);
    }

    /// NCCL's lists, release by release, as its sources have them.
    #[test]
    fn each_nccl_list_as_its_releases_test_it() {
        let t = |v| tested_by(NCCL_HISTORY, v);
        assert_eq!(t(Version(2, 3, 5)), [NV_MEM]);
        assert_eq!(t(Version(2, 9, 6)), [NV_MEM]);
        assert_eq!(t(Version(2, 9, 8)), [NV_MEM, NVIDIA_PEERMEM_TREE]);
        assert_eq!(t(Version(2, 21, 5)), [NV_MEM, NVIDIA_PEERMEM_TREE]);
        assert_eq!(t(Version(2, 22, 3)), [NV_MEM, NV_MEM_NC]);
        assert_eq!(t(Version(2, 23, 4)), [NV_MEM, NV_MEM_NC, SYS_MODULE]);
        assert_eq!(t(Version(2, 29, 7)), [NV_MEM, NV_MEM_NC, SYS_MODULE]);
    }

    #[test]
    fn each_ucx_list_as_its_releases_test_it() {
        let t = |v| tested_by(UCX_HISTORY, v);
        assert_eq!(t(Version(1, 10, 0)), [NV_MEM]);
        assert_eq!(t(Version(1, 17, 0)), [NV_MEM]);
        assert_eq!(t(Version(1, 18, 0)), [NV_MEM, SYS_MODULE, NV_PEER_MEM]);
    }

    /// The audit's case: NCCL 2.22's list and only
    /// /sys/module/nvidia_peermem/version present (the default install on
    /// a core without memory_peers): NCCL 2.22 does not see it, 2.23.4
    /// would.
    #[test]
    fn nccl_2_22_does_not_see_the_module_by_its_name() {
        let only_module = [SYS_MODULE];
        let d = decide(NCCL_HISTORY, Version(2, 22, 3), &present(&only_module));
        assert_eq!(d.via, None);
        assert_eq!(d.later, Some((Version(2, 23, 4), SYS_MODULE)));
        for v in [Version(2, 3, 5), Version(2, 9, 8), Version(2, 21, 5)] {
            let d = decide(NCCL_HISTORY, v, &present(&only_module));
            assert_eq!(d.via, None, "{v}");
            assert_eq!(d.later, Some((Version(2, 23, 4), SYS_MODULE)), "{v}");
        }
        let d = decide(NCCL_HISTORY, Version(2, 23, 4), &present(&only_module));
        assert_eq!(d.via, Some(SYS_MODULE));
        // nv_mem: every release
        for (v, _) in NCCL_HISTORY {
            assert_eq!(
                decide(NCCL_HISTORY, *v, &present(&[NV_MEM])).via,
                Some(NV_MEM)
            );
        }
        // the tree's nvidia-peermem entry: 2.9.8 - 2.21.5 only
        let tree = [NVIDIA_PEERMEM_TREE];
        assert!(decide(NCCL_HISTORY, Version(2, 9, 6), &present(&tree))
            .via
            .is_none());
        assert!(decide(NCCL_HISTORY, Version(2, 21, 5), &present(&tree))
            .via
            .is_some());
        assert!(decide(NCCL_HISTORY, Version(2, 22, 3), &present(&tree))
            .via
            .is_none());
    }

    #[test]
    fn ucx_1_17_does_not_see_the_module_by_its_name() {
        for f in [SYS_MODULE, NV_PEER_MEM] {
            let d = decide(UCX_HISTORY, Version(1, 17, 0), &present(&[f]));
            assert_eq!((d.via, d.later), (None, Some((Version(1, 18, 0), f))));
            assert_eq!(
                decide(UCX_HISTORY, Version(1, 18, 0), &present(&[f])).via,
                Some(f)
            );
        }
    }

    #[test]
    fn since_names_the_first_releases() {
        assert_eq!(since(SYS_MODULE), "NCCL >= 2.23.4, UCX >= 1.18.0");
        assert_eq!(since(NV_MEM), "");
        assert_eq!(since(NV_MEM_NC), "NCCL >= 2.22.3, not UCX");
        assert_eq!(since(NV_PEER_MEM), "not NCCL, UCX >= 1.18.0");
        assert_eq!(
            since(NVIDIA_PEERMEM_TREE),
            "NCCL 2.9.8 to before 2.22.3, not UCX"
        );
    }

    #[test]
    fn finds_nccl_where_it_is_installed() {
        let (_t, r) = root(&[
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", ""),
            (
                "/usr/local/lib/python3.11/dist-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA",
                "",
            ),
            (
                "/var/lib/dpkg/status",
                "Package: libnccl2\nStatus: install ok installed\nVersion: 2.21.5-1+cuda12.4\n\n\
                 Package: libucx0\nStatus: deinstall ok config-files\nVersion: 1.16.0+ds-5\n",
            ),
            ("/opt/conda/conda-meta/nccl-2.19.3-h1234_0.json", "{}"),
        ]);
        let found = find_nccl(&r);
        let versions: Vec<String> = found
            .iter()
            .map(|i| i.version.unwrap().to_string())
            .collect();
        assert_eq!(versions, ["2.21.5", "2.23.4", "2.19.3"], "{found:?}");
        assert_eq!(
            found[0].source,
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"
        );
        assert!(found[1].source.contains("nvidia_nccl_cu12"));
        // UCX removed (config files only) is not installed.
        assert!(find_ucx(&r).is_empty());
    }

    #[test]
    fn finds_the_nccl_wheel_of_a_virtual_environment() {
        // As on a GPU node: the system's NCCL, and PyTorch's own in a uv
        // environment under /opt.
        let (_t, r) = root(&[
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3", ""),
            (
                "/opt/torch/.venv/lib/python3.12/site-packages/nvidia_nccl_cu13-2.28.9.dist-info/METADATA",
                "",
            ),
            (
                "/home/ana/train/.venv/lib/python3.11/site-packages/nvidia_nccl_cu12-2.21.5.dist-info/METADATA",
                "",
            ),
            (
                "/opt/conda/envs/jax/lib/python3.12/site-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA",
                "",
            ),
        ]);
        let found = find_nccl(&r);
        let versions: Vec<String> = found
            .iter()
            .map(|i| i.version.unwrap().to_string())
            .collect();
        assert_eq!(
            versions,
            ["2.28.3", "2.23.4", "2.28.9", "2.21.5"],
            "{found:?}"
        );
        assert!(found[2].source.contains("/opt/torch/.venv/"), "{found:?}");
    }

    #[test]
    fn finds_ucx_by_ucx_info_and_pkgconfig() {
        let (_t, r) = root(&[
            (
                "/ucx_info.txt",
                "# Library version: 1.17.0\n# Library path: /opt/hpcx/ucx/lib/libucs.so.0\n",
            ),
            ("/opt/hpcx/ucx/lib/libucs.so.0", ""),
            ("/usr/lib/pkgconfig/ucx.pc", "Name: ucx\nVersion: 1.18.1\n"),
        ]);
        let found = find_ucx(&r);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].version, Some(Version(1, 17, 0)));
        assert!(found[0].source.starts_with("ucx_info -v"));
        assert_eq!(found[1].version, Some(Version(1, 18, 1)));
        // A library alone: found, version unknown.
        let (_t, r) = root(&[("/usr/lib64/libucs.so.0.0.0", "")]);
        assert_eq!(
            find_ucx(&r),
            [Install {
                version: None,
                source: "/usr/lib64/libucs.so.0.0.0".into()
            }]
        );
    }

    #[test]
    fn doctor_says_per_library_and_from_which_version() {
        // The default install on a core without memory_peers.
        let (_t, r) = root(&[
            (SYS_MODULE, "1\n"),
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3", ""),
            ("/ucx_info.txt", "# Library version: 1.18.0\n"),
        ]);
        let c = checks(&r);
        assert_eq!(c[0].verdict, Verdict::Fail, "{}", c[0].detail);
        assert!(
            c[0].detail.starts_with(
                "NCCL 2.22.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3): no: it tests only /sys/kernel/mm/memory_peers/nv_mem/version, /sys/kernel/mm/memory_peers/nv_mem_nc/version, none here; NCCL >= 2.23.4 would (via /sys/module/nvidia_peermem/version)"
            ),
            "{}",
            c[0].detail
        );
        assert_eq!(c[0].fix.as_deref(), Some("install NCCL 2.23.4 or later"));
        assert_eq!(c[1].verdict, Verdict::Pass, "{}", c[1].detail);
        assert!(c[1]
            .detail
            .ends_with("yes (via /sys/module/nvidia_peermem/version)"));
        // NCCL 2.29.7 with the named build on a core with the tree: NCCL
        // yes, its GDAKI no.
        let (_t, r) = root(&[(NV_MEM, "1\n"), ("/usr/lib/libnccl.so.2.29.7", "")]);
        let c = checks(&r);
        assert_eq!(c[0].verdict, Verdict::Warn, "{}", c[0].detail);
        assert!(c[0].detail.contains(
            "GIN/GDAKI path (from 2.29.7) tests only /sys/module/nvidia_peermem/version"
        ));
        assert_eq!(c[1].verdict, Verdict::Skip);
        // With the module by its name as well: no warning.
        let (_t, r) = root(&[
            (NV_MEM, "1\n"),
            (SYS_MODULE, "1\n"),
            ("/usr/lib/libnccl.so.2.29.7", ""),
        ]);
        assert_eq!(checks(&r)[0].verdict, Verdict::Pass);
        // Nothing present that any release tests.
        let (_t, r) = root(&[("/usr/lib/libnccl.so.2.23.4", "")]);
        let c = &checks(&r)[0];
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.detail.contains("nor does any release"), "{}", c.detail);
    }

    #[test]
    fn glob() {
        assert!(glob_match("python3*", "python3.11"));
        assert!(glob_match("cuda-*", "cuda-12.4"));
        assert!(!glob_match("cuda-*", "cuda"));
        assert!(glob_match("hpcx*", "hpcx"));
        assert!(glob_match("*", "x"));
        assert!(!glob_match("a*b", "ac"));
    }
}
