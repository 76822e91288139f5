// SPDX-License-Identifier: GPL-2.0
//! Every installed kernel, not only the running one. apt installs a new
//! kernel while the node runs the old one, and the kernel the next boot
//! starts is the one that needs the module then: one line per kernel says
//! whether it is ready, gets the module from DKMS at the next boot or apt
//! run, or lacks packages, and names them.
//!
//! A kernel is installed where depmod indexed it
//! (`/lib/modules/<release>/modules.dep`) or its image is in `/boot`
//! (`/boot/vmlinuz-<release>`). Each is judged on the facts the running
//! kernel's checks read, for its own release: its build tree and Rust
//! crates ([`buildenv::build_env`]), this project's module as DKMS
//! installed it ([`install::installed_module`]), and the NVIDIA module and
//! PeerDirect exporter depmod picked for it ([`node::modules_dep`],
//! [`node::peerdirect_exporter`]). Where depmod has not indexed them yet,
//! the places dkms.conf also accepts count (the overrides in build.conf,
//! the NVIDIA and OFED source trees), so that "builds at next boot/apt
//! run" is what DKMS will do; what is missing is named in the words of
//! dkms.conf's skip line.
//!
//! The newest kernel is the one the next boot most likely starts: GRUB's
//! default entry on Debian and Ubuntu is the highest version. A kernel not
//! ready fails there; on the others (fallbacks, the running one, which
//! its own checks judge) it is a warning.

use serde_json::json;

use super::buildenv::{build_env, BuildEnv};
use super::install::{installed_module, kernel_release, registered};
use super::node::{modules_dep, peerdirect_exporter, symbol_owner, PEERDIRECT_SYMBOL};
use super::SysRoot;
use crate::report::Check;

const ID: &str = "installed_kernel";
const T: &str = "Installed kernel";

/// The NVIDIA driver's P2P function, the symbol its module is found by
/// (the one dkms.conf looks for in `modules.symbols`).
const NVIDIA_P2P_SYMBOL: &str = "nvidia_p2p_get_pages";

/// The build's overrides (make syntax), which the DKMS build also reads.
const BUILD_CONF: &str = "/etc/nvidia-peermem-rs/build.conf";

/// The NVIDIA driver's modules, in the words of dkms.conf's skip line.
fn nvidia_words(kver: &str) -> String {
    format!(
        "the NVIDIA driver's modules for {kver} (linux-modules-nvidia-<ver>-{kver} or nvidia-dkms-<ver>)"
    )
}

/// The PeerDirect core, in the words of dkms.conf's skip line.
fn doca_words(kver: &str) -> String {
    format!("DOCA-OFED's modules for {kver} (doca-ofed / mlnx-ofed-kernel-modules or DOCA-Host)")
}

/// This project's packages, for a node where none is registered with DKMS.
const OUR_PACKAGE: &str =
    "this project's DKMS package (nvidia-peermem-rs-dropin-dkms or nvidia-peermem-rs-dkms)";

/// One piece of a kernel release, for ordering: digit runs compare as
/// numbers, so 6.17.0 is newer than 6.8.0, as in GRUB's menu.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Num(u64),
    Text(String),
}

/// A kernel release as a sort key (see [`Part`]).
fn release_key(kver: &str) -> Vec<Part> {
    let part = |run: &str, digits: bool| {
        if digits {
            Part::Num(run.parse().unwrap_or(u64::MAX))
        } else {
            Part::Text(run.to_string())
        }
    };
    let mut parts = Vec::new();
    let mut run = String::new();
    let mut digits = false;
    for c in kver.chars() {
        if c.is_ascii_digit() != digits && !run.is_empty() {
            parts.push(part(&run, digits));
            run.clear();
        }
        digits = c.is_ascii_digit();
        run.push(c);
    }
    if !run.is_empty() {
        parts.push(part(&run, digits));
    }
    parts
}

/// The installed kernels' releases, oldest first; an error that says where
/// doctor looked when there is none.
pub fn installed_kernels(r: &SysRoot) -> Result<Vec<String>, String> {
    let mut kernels: Vec<String> = r
        .list("/lib/modules")
        .into_iter()
        .filter(|k| r.exists(&format!("/lib/modules/{k}/modules.dep")))
        .collect();
    for f in r.list("/boot") {
        // Fedora's rescue image is a copy of another kernel, not one of
        // its own.
        if let Some(k) = f.strip_prefix("vmlinuz-") {
            if !k.is_empty() && !k.contains("rescue") && !kernels.iter().any(|x| x == k) {
                kernels.push(k.to_string());
            }
        }
    }
    if kernels.is_empty() {
        return Err(
            "no installed kernel found: no /lib/modules/<release>/modules.dep and no /boot/vmlinuz-<release> (a container that does not see the host's /lib/modules and /boot?)"
                .to_string(),
        );
    }
    kernels.sort_by_cached_key(|k| release_key(k));
    Ok(kernels)
}

/// The override of `names` in build.conf, as dkms.conf matches it
/// (`NAME =`, `NAME :=`, `NAME ?=` at the start of a line).
fn build_conf_override(r: &SysRoot, names: &[&str]) -> Option<String> {
    let text = r.read(BUILD_CONF)?;
    text.lines().find_map(|l| {
        let l = l.trim_start_matches(' ');
        names
            .iter()
            .find(|n| {
                l.strip_prefix(**n).is_some_and(|rest| {
                    rest.trim_start_matches(' ')
                        .trim_start_matches([':', '?'])
                        .starts_with('=')
                })
            })
            .map(|n| format!("{n} in {BUILD_CONF}"))
    })
}

/// Whether a `Module.symvers` exports `symbol`.
fn symvers_exports(r: &SysRoot, path: &str, symbol: &str) -> bool {
    r.read(path)
        .is_some_and(|t| t.lines().any(|l| l.split_whitespace().any(|w| w == symbol)))
}

/// An NVIDIA driver source tree the build can link against (its
/// `Module.symvers`), as dkms.conf accepts one.
fn nvidia_source_tree(r: &SysRoot) -> Option<String> {
    r.list("/usr/src")
        .into_iter()
        .filter(|d| d.starts_with("nvidia-"))
        .map(|d| format!("/usr/src/{d}/Module.symvers"))
        .find(|p| r.exists(p))
}

/// An OFED kernel tree whose `Module.symvers` exports the PeerDirect API
/// (`/usr/src/ofa_kernel*/<arch>[/<release>]/Module.symvers`), as dkms.conf
/// accepts one.
fn ofed_source_tree(r: &SysRoot) -> Option<String> {
    for d in r
        .list("/usr/src")
        .into_iter()
        .filter(|d| d.starts_with("ofa_kernel"))
    {
        for sub in r.list(&format!("/usr/src/{d}")) {
            let base = format!("/usr/src/{d}/{sub}");
            let mut paths = vec![format!("{base}/Module.symvers")];
            paths.extend(
                r.list(&base)
                    .into_iter()
                    .map(|s| format!("{base}/{s}/Module.symvers")),
            );
            if let Some(p) = paths
                .into_iter()
                .find(|p| symvers_exports(r, p, PEERDIRECT_SYMBOL))
            {
                return Some(p);
            }
        }
    }
    None
}

/// What one kernel has of what the module needs.
struct Kernel {
    kver: String,
    running: bool,
    newest: bool,
    env: BuildEnv,
    /// `/boot/vmlinuz-<kver>`.
    image: bool,
    /// `/lib/modules/<kver>`, which the kernel's modules package installs.
    modules_dir: bool,
    /// `modules.dep`: depmod indexed the kernel.
    indexed: bool,
    /// This project's module installed for it.
    module: Option<String>,
    /// The NVIDIA module depmod picked, or what the build uses instead.
    nvidia: Option<String>,
    /// The module that exports PeerDirect, with its file or what the build
    /// uses instead.
    peerdirect: Option<(String, String)>,
}

impl Kernel {
    fn read(r: &SysRoot, kver: &str, running: bool, newest: bool) -> Self {
        let dep = modules_dep(r, kver);
        let nvidia = dep
            .as_ref()
            .and_then(|d| {
                d.get("nvidia").cloned().or_else(|| {
                    symbol_owner(r, kver, NVIDIA_P2P_SYMBOL).and_then(|m| d.get(&m).cloned())
                })
            })
            .or_else(|| build_conf_override(r, &["NVIDIA_SRC", "NVIDIA_KO"]))
            .or_else(|| nvidia_source_tree(r));
        let peerdirect = peerdirect_exporter(r, kver).or_else(|| {
            build_conf_override(r, &["OFED_DIR", "PEERDIRECT_KO", "IB_CORE_KO"])
                .or_else(|| ofed_source_tree(r))
                .map(|p| ("an OFED tree".to_string(), p))
        });
        Kernel {
            kver: kver.to_string(),
            running,
            newest,
            env: build_env(r, kver, running),
            image: r.exists(&format!("/boot/vmlinuz-{kver}")),
            modules_dir: r.exists(&format!("/lib/modules/{kver}")),
            indexed: dep.is_some(),
            module: installed_module(r, kver),
            nvidia,
            peerdirect,
        }
    }

    /// A path under the kernel's module directory, shortened to what
    /// follows it.
    fn short<'a>(&self, path: &'a str) -> &'a str {
        path.strip_prefix(&format!("/lib/modules/{}/", self.kver))
            .unwrap_or(path)
    }

    /// What was found, after the verdict.
    fn facts(&self) -> String {
        let rust = match (self.env.rust, &self.env.rust_crates) {
            (Some(false), _) => "off (no CONFIG_RUST)",
            (_, Some(_)) => "crates installed",
            (Some(true), None) => "no crates",
            (None, None) => "no config, no crates",
        };
        let yes = |b: bool| if b { "yes" } else { "no" };
        format!(
            "build tree: {}; Rust: {rust}; nvidia-peermem-rs: {}; nvidia: {}; PeerDirect: {}",
            yes(self.env.build_tree),
            self.module
                .as_deref()
                .map_or("not installed", |m| self.short(m)),
            self.nvidia.as_deref().map_or("none", |m| self.short(m)),
            self.peerdirect.as_ref().map_or("none", |(m, _)| m.as_str()),
        )
    }

    /// The kernel's modules package, named where the distribution is known.
    fn modules_package(&self) -> (String, bool) {
        let kver = &self.kver;
        if self.env.ubuntu && !self.env.foreign {
            (format!("linux-modules-{kver}"), true)
        } else if self.env.os.id == "debian" {
            (format!("linux-image-{kver}"), true)
        } else {
            (format!("the kernel's modules (/lib/modules/{kver})"), false)
        }
    }
}

/// What a kernel lacks: each item in the words the line shows, and whether
/// it is a package name apt installs.
#[derive(Default)]
struct Needs {
    items: Vec<(String, bool)>,
    /// depmod has not indexed the kernel: which NVIDIA and PeerDirect
    /// modules it would load cannot be told.
    not_indexed: bool,
}

impl Needs {
    fn push(&mut self, what: impl Into<String>, apt: bool) {
        self.items.push((what.into(), apt));
    }

    /// The one fix: the apt line first, then what apt does not name, then
    /// depmod.
    fn fix(&self, kver: &str) -> String {
        let apt: Vec<&str> = self
            .items
            .iter()
            .filter(|i| i.1)
            .map(|i| i.0.as_str())
            .collect();
        let other: Vec<&str> = self
            .items
            .iter()
            .filter(|i| !i.1)
            .map(|i| i.0.as_str())
            .collect();
        let mut steps = Vec::new();
        if !apt.is_empty() {
            steps.push(format!("sudo apt install {}", apt.join(" ")));
        }
        if !other.is_empty() {
            steps.push(format!("install {}", other.join(" and ")));
        }
        if self.not_indexed {
            steps.push(format!("sudo depmod {kver}"));
        }
        steps.join("; ")
    }
}

/// What kernel `k` lacks for the module to load at its boot.
fn needs(k: &Kernel, registered: bool) -> Needs {
    let kver = &k.kver;
    let mut n = Needs::default();
    if !k.modules_dir {
        let (p, apt) = k.modules_package();
        n.push(p, apt);
    }
    // Once the module is installed, the build's needs no longer matter for
    // this kernel (a rebuild's are said on the ready line).
    if k.module.is_none() {
        let env = &k.env;
        if env.ubuntu && !env.foreign {
            for p in &env.missing {
                n.push(p.clone(), true);
            }
        } else if !env.build_tree {
            n.push(
                format!("the kernel's build tree (/lib/modules/{kver}/build)"),
                false,
            );
        } else {
            if env.rust_crates.is_none() {
                n.push(
                    format!(
                        "the kernel's Rust crates (/lib/modules/{kver}/build/rust/libkernel.rmeta)"
                    ),
                    false,
                );
            }
            if env.pahole_missing {
                n.push("pahole (dwarves)", false);
            }
        }
        if !registered {
            n.push(OUR_PACKAGE, false);
        }
    }
    // Without the kernel's modules nothing can be loaded; without depmod's
    // index what it would load is unknown.
    if k.modules_dir {
        if k.nvidia.is_none() {
            if k.indexed {
                n.push(nvidia_words(kver), false);
            } else {
                n.not_indexed = true;
            }
        }
        if k.peerdirect.is_none() {
            if k.indexed {
                n.push(doca_words(kver), false);
            } else {
                n.not_indexed = true;
            }
        }
    }
    n
}

/// The line of one kernel.
fn judge(k: &Kernel, registered: bool, newest: Option<&str>) -> Check {
    let kver = &k.kver;
    let title = match (k.running, k.newest) {
        (true, true) => format!("{T} {kver} (running; newest: the next boot's default)"),
        (true, false) => format!("{T} {kver} (running)"),
        (false, true) => format!("{T} {kver} (newest: the next boot's default)"),
        (false, false) => format!("{T} {kver}"),
    };
    let mut data = json!({
        "kernel": kver,
        "running": k.running,
        "newest": k.newest,
        "image": k.image,
        "modules_dep": k.indexed,
        "build_tree": k.env.build_tree,
        "config_rust": k.env.rust,
        "rust_crates": k.env.rust_crates,
        "module": k.module,
        "nvidia": k.nvidia,
        "peerdirect_module": k.peerdirect.as_ref().map(|p| &p.0),
        "peerdirect_file": k.peerdirect.as_ref().map(|p| &p.1),
        "registered_with_dkms": registered,
    });
    let facts = k.facts();
    // Not ready where the next boot goes fails; elsewhere it warns.
    let not_ready = |detail: String| {
        if k.newest {
            Check::fail(ID, title.clone(), detail)
        } else {
            Check::warn(ID, title.clone(), detail)
        }
    };

    // The running kernel's packages removed under it: only a reboot into
    // an installed kernel loads modules again.
    if k.running && !k.modules_dir && !k.image {
        let (p, _) = k.modules_package();
        data["state"] = json!("missing");
        data["missing"] = json!([p]);
        let fix = match newest {
            Some(n) => format!(
                "reboot into {n}, the next boot's default (its own line says whether it is ready)"
            ),
            None => format!("sudo apt install {p}"),
        };
        return Check::warn(
            ID,
            title,
            format!("missing: {p}: the running kernel's packages were removed, so modprobe finds no module for it until a reboot"),
        )
        .fix(fix)
        .data(data);
    }
    if k.module.is_none() {
        if let Some(why) = k.env.cannot_build() {
            data["state"] = json!("cannot_build");
            return not_ready(format!("cannot build: {why} ({facts})"))
                .fix(k.env.no_rust_fix())
                .data(data);
        }
    }
    let n = needs(k, registered);
    let words: Vec<&str> = n.items.iter().map(|i| i.0.as_str()).collect();
    data["missing"] = json!(words);
    data["not_indexed"] = json!(n.not_indexed);
    let unindexed = format!("no modules.dep: depmod has not indexed {kver}, so which NVIDIA and PeerDirect modules it would load is unknown");
    if !words.is_empty() {
        data["state"] = json!("missing");
        let also = if n.not_indexed {
            format!("; {unindexed}")
        } else {
            String::new()
        };
        return not_ready(format!("missing: {}{also} ({facts})", words.join(", ")))
            .fix(n.fix(kver))
            .data(data);
    }
    if n.not_indexed {
        data["state"] = json!("not_indexed");
        return not_ready(format!("{unindexed} ({facts})"))
            .fix(n.fix(kver))
            .data(data);
    }
    if k.module.is_none() {
        data["state"] = json!("builds");
        return Check::warn(
            ID,
            title,
            format!("builds at next boot/apt run: all it needs is installed, DKMS has not built the module for it yet ({facts})"),
        )
        .fix(format!("to build it now: sudo dkms autoinstall -k {kver}"))
        .data(data);
    }
    data["state"] = json!("ready");
    let rebuild = if k.env.missing.is_empty() {
        String::new()
    } else {
        format!(
            "; a rebuild (a new NVIDIA or OFED driver) needs {}",
            k.env.missing.join(", ")
        )
    };
    Check::pass(ID, title, format!("ready ({facts}){rebuild}")).data(data)
}

/// One line per installed kernel, oldest first, and one for the running
/// kernel where it is no longer installed.
pub fn checks(r: &SysRoot) -> Vec<Check> {
    let installed = match installed_kernels(r) {
        Ok(k) => k,
        Err(e) => return vec![Check::skip(ID, format!("{T}s"), e)],
    };
    let running = kernel_release(r);
    let newest = installed.last().cloned();
    let mut kvers = installed;
    if let Some(run) = &running {
        if !kvers.contains(run) {
            kvers.push(run.clone());
            kvers.sort_by_cached_key(|k| release_key(k));
        }
    }
    let registered = !registered(r).is_empty();
    kvers
        .iter()
        .map(|kver| {
            let k = Kernel::read(
                r,
                kver,
                running.as_deref() == Some(kver),
                newest.as_deref() == Some(kver),
            );
            judge(&k, registered, newest.as_deref())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    use crate::doctor::sysroot::test_root;

    /// The rustc Ubuntu 26.04's kernels record (package rustc-1.93).
    const RUSTC: &str = "rustc 1.93.1 (01f6ddf75 2026-02-11) (built from a source tarball)";
    const OLD: &str = "7.0.0-14-generic";
    const NEW: &str = "7.0.0-15-generic";

    /// What a kernel of an Ubuntu 26.04 node has installed.
    #[derive(Clone, Copy)]
    struct Has {
        image: bool,
        modules_dir: bool,
        modules_dep: bool,
        headers: bool,
        lib_rust: bool,
        module: bool,
    }

    /// Everything: the kernel, its headers and lib-rust, the NVIDIA and
    /// DOCA-OFED modules in depmod's index, and this project's module.
    const ALL: Has = Has {
        image: true,
        modules_dir: true,
        modules_dep: true,
        headers: true,
        lib_rust: true,
        module: true,
    };

    /// An Ubuntu 26.04 node running `running` with the build tools and
    /// the drop-in registered with DKMS, and the kernels `kernels`.
    fn node(running: &str, kernels: &[(&str, Has)]) -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = vec![
            (
                "/etc/os-release".into(),
                "NAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID=\"26.04\"\n".into(),
            ),
            ("/proc/sys/kernel/osrelease".into(), format!("{running}\n")),
            ("/proc/sys/kernel/arch".into(), "x86_64\n".into()),
            ("/usr/bin/rustc-1.93".into(), String::new()),
            ("/usr/bin/bindgen".into(), String::new()),
            ("/usr/lib/llvm-21/lib/libclang.so.1".into(), String::new()),
            ("/usr/sbin/dkms".into(), String::new()),
            (
                "/var/lib/dkms/nvidia-peermem-rs-dropin/0.1.0/source/dkms.conf".into(),
                String::new(),
            ),
        ];
        for (k, has) in kernels {
            let m = format!("/lib/modules/{k}");
            if has.image {
                f.push((format!("/boot/vmlinuz-{k}"), String::new()));
                f.push((
                    format!("/boot/config-{k}"),
                    format!("CONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT=\"{RUSTC}\"\n"),
                ));
            }
            if has.modules_dir {
                f.push((format!("{m}/modules.order"), String::new()));
            }
            if has.modules_dep {
                f.push((
                    format!("{m}/modules.dep"),
                    "kernel/nvidia-580-open/nvidia.ko.zst:\n\
                     kernel/doca-ofed-3.4/ib_core.ko.zst:\n\
                     kernel/doca-ofed-3.4/ib_uverbs.ko.zst: kernel/doca-ofed-3.4/ib_core.ko.zst\n"
                        .into(),
                ));
                f.push((
                    format!("{m}/modules.symbols"),
                    format!("alias symbol:{PEERDIRECT_SYMBOL} ib_uverbs\n"),
                ));
            }
            if has.headers {
                f.push((
                    format!("/usr/src/linux-headers-{k}/Makefile"),
                    String::new(),
                ));
            }
            if has.lib_rust {
                f.push((
                    format!("/usr/src/linux-lib-rust-{k}/rust/libkernel.rmeta"),
                    String::new(),
                ));
            }
            if has.module {
                f.push((
                    format!("{m}/updates/dkms/nvidia_peermem.ko.zst"),
                    String::new(),
                ));
            }
        }
        f
    }

    fn root(files: &[(String, String)]) -> (tempfile::TempDir, SysRoot) {
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        test_root(&refs)
    }

    /// The line of kernel `kver`.
    fn line(checks: &[Check], kver: &str) -> Check {
        let found = checks.iter().find(|c| c.data["kernel"] == kver).cloned();
        found.unwrap_or_else(|| panic!("no line for {kver}: {checks:#?}"))
    }

    #[test]
    fn releases_in_boot_order() {
        let mut k = vec![
            "6.17.0-14-generic",
            "6.8.0-1020-nvidia-64k",
            "7.0.0-9-generic",
            "6.8.0-100-generic",
        ];
        k.sort_by_cached_key(|k| release_key(k));
        assert_eq!(
            k,
            [
                "6.8.0-100-generic",
                "6.8.0-1020-nvidia-64k",
                "6.17.0-14-generic",
                "7.0.0-9-generic"
            ]
        );
    }

    #[test]
    fn two_kernels_one_without_lib_rust() {
        let no_lib_rust = Has {
            lib_rust: false,
            module: false,
            ..ALL
        };
        let (_t, r) = root(&node(OLD, &[(OLD, ALL), (NEW, no_lib_rust)]));
        let c = checks(&r);
        assert_eq!(c.len(), 2, "{c:#?}");
        let old = line(&c, OLD);
        assert_eq!(old.verdict, Verdict::Pass, "{}", old.detail);
        assert!(old.detail.starts_with("ready ("), "{}", old.detail);
        assert_eq!(old.title, format!("Installed kernel {OLD} (running)"));
        let new = line(&c, NEW);
        assert_eq!(new.verdict, Verdict::Fail, "{}", new.detail);
        assert_eq!(
            new.title,
            format!("Installed kernel {NEW} (newest: the next boot's default)")
        );
        assert!(
            new.detail
                .starts_with(&format!("missing: linux-lib-rust-{NEW} (")),
            "{}",
            new.detail
        );
        assert_eq!(
            new.fix.as_deref(),
            Some(format!("sudo apt install linux-lib-rust-{NEW}").as_str())
        );
        assert_eq!(new.data["state"], "missing");
        assert_eq!(new.data["newest"], true);

        // lib-rust installed: DKMS builds it at the next boot or apt run.
        std::fs::create_dir_all(r.path(&format!("/usr/src/linux-lib-rust-{NEW}/rust"))).unwrap();
        std::fs::write(
            r.path(&format!(
                "/usr/src/linux-lib-rust-{NEW}/rust/libkernel.rmeta"
            )),
            "",
        )
        .unwrap();
        let new = line(&checks(&r), NEW);
        assert_eq!(new.verdict, Verdict::Warn, "{}", new.detail);
        assert!(
            new.detail.starts_with("builds at next boot/apt run"),
            "{}",
            new.detail
        );
        assert_eq!(
            new.fix.as_deref(),
            Some(format!("to build it now: sudo dkms autoinstall -k {NEW}").as_str())
        );
    }

    #[test]
    fn kernel_without_headers() {
        let no_headers = Has {
            headers: false,
            module: false,
            ..ALL
        };
        let (_t, r) = root(&node(NEW, &[(NEW, no_headers)]));
        let c = line(&checks(&r), NEW);
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert_eq!(
            c.title,
            format!("Installed kernel {NEW} (running; newest: the next boot's default)")
        );
        assert!(
            c.detail
                .starts_with(&format!("missing: linux-headers-{NEW} (build tree: no;")),
            "{}",
            c.detail
        );
        assert_eq!(
            c.fix.as_deref(),
            Some(format!("sudo apt install linux-headers-{NEW}").as_str())
        );
    }

    #[test]
    fn kernel_without_modules_dep() {
        // Its image and module directory, but depmod never ran: what it
        // would load cannot be told.
        let unindexed = Has {
            modules_dep: false,
            module: false,
            ..ALL
        };
        // Its image only: the modules package is not there at all.
        let image_only = Has {
            modules_dir: false,
            modules_dep: false,
            module: false,
            ..ALL
        };
        let newer = "7.0.0-16-generic";
        let (_t, r) = root(&node(
            OLD,
            &[(OLD, ALL), (NEW, unindexed), (newer, image_only)],
        ));
        let c = checks(&r);
        assert_eq!(c.len(), 3, "{c:#?}");
        let new = line(&c, NEW);
        assert_eq!(new.verdict, Verdict::Warn, "{}", new.detail);
        assert!(
            new.detail
                .starts_with(&format!("no modules.dep: depmod has not indexed {NEW}")),
            "{}",
            new.detail
        );
        assert_eq!(
            new.fix.as_deref(),
            Some(format!("sudo depmod {NEW}").as_str())
        );
        assert_eq!(new.data["state"], "not_indexed");
        let newest = line(&c, newer);
        assert_eq!(newest.verdict, Verdict::Fail, "{}", newest.detail);
        assert!(
            newest
                .detail
                .starts_with(&format!("missing: linux-modules-{newer} (")),
            "{}",
            newest.detail
        );
        assert_eq!(
            newest.fix.as_deref(),
            Some(format!("sudo apt install linux-modules-{newer}").as_str())
        );
    }

    #[test]
    fn running_kernel_removed() {
        let (_t, r) = root(&node(OLD, &[(NEW, ALL)]));
        let c = checks(&r);
        assert_eq!(c.len(), 2, "{c:#?}");
        assert_eq!(line(&c, NEW).verdict, Verdict::Pass);
        let old = line(&c, OLD);
        assert_eq!(old.verdict, Verdict::Warn, "{}", old.detail);
        assert_eq!(old.title, format!("Installed kernel {OLD} (running)"));
        assert!(
            old.detail.starts_with(&format!(
                "missing: linux-modules-{OLD}: the running kernel's packages were removed"
            )),
            "{}",
            old.detail
        );
        assert!(
            old.fix
                .as_deref()
                .is_some_and(|f| f.starts_with(&format!("reboot into {NEW}"))),
            "{:?}",
            old.fix
        );
    }

    #[test]
    fn no_kernels_at_all() {
        let want = "no installed kernel found: no /lib/modules/<release>/modules.dep and no /boot/vmlinuz-<release>";
        // Nothing at all, then a running kernel but nothing installed (a
        // container): one line that says where doctor looked.
        let (_t, r) = test_root(&[]);
        let (_t2, r2) = test_root(&[("/proc/sys/kernel/osrelease", "7.0.0-14-generic\n")]);
        for r in [r, r2] {
            let c = checks(&r);
            assert_eq!(c.len(), 1, "{c:#?}");
            assert_eq!(c[0].verdict, Verdict::Skip);
            assert_eq!(c[0].title, "Installed kernels");
            assert!(c[0].detail.starts_with(want), "{}", c[0].detail);
            assert_eq!(installed_kernels(&r), Err(c[0].detail.clone()));
        }
    }

    #[test]
    fn kernel_without_rust_cannot_build() {
        let (_t, r) = root(&node(OLD, &[(OLD, ALL)]));
        let nv = "6.8.0-1020-nvidia";
        std::fs::write(r.path(&format!("/boot/vmlinuz-{nv}")), "").unwrap();
        std::fs::write(
            r.path(&format!("/boot/config-{nv}")),
            "# CONFIG_RUST is not set\n",
        )
        .unwrap();
        let c = line(&checks(&r), nv);
        // 6.8 is older than 7.0: a fallback, a warning.
        assert_eq!(c.verdict, Verdict::Warn, "{}", c.detail);
        assert!(
            c.detail
                .starts_with("cannot build: built without CONFIG_RUST=y (DGX OS's"),
            "{}",
            c.detail
        );
        assert!(
            c.fix
                .as_deref()
                .is_some_and(|f| f.starts_with("boot the generic kernel")),
            "{:?}",
            c.fix
        );
    }

    #[test]
    fn not_registered_with_dkms() {
        let none = Has {
            module: false,
            ..ALL
        };
        let files: Vec<(String, String)> = node(OLD, &[(OLD, none)])
            .into_iter()
            .filter(|(p, _)| !p.starts_with("/var/lib/dkms"))
            .collect();
        let (_t, r) = root(&files);
        let c = line(&checks(&r), OLD);
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        assert!(
            c.detail.starts_with(&format!("missing: {OUR_PACKAGE} (")),
            "{}",
            c.detail
        );
    }

    #[test]
    fn build_conf_overrides_as_dkms_conf_reads_them() {
        let (_t, r) = test_root(&[(
            BUILD_CONF,
            "#OFED_DIR = /x\nNVIDIA_SRC := /usr/src/nvidia-580\n  IB_CORE_KO?=/y\nOFED_DIRX = z\n",
        )]);
        assert_eq!(
            build_conf_override(&r, &["NVIDIA_SRC", "NVIDIA_KO"]),
            Some(format!("NVIDIA_SRC in {BUILD_CONF}"))
        );
        assert_eq!(
            build_conf_override(&r, &["OFED_DIR", "PEERDIRECT_KO", "IB_CORE_KO"]),
            Some(format!("IB_CORE_KO in {BUILD_CONF}"))
        );
        assert_eq!(build_conf_override(&r, &["RUST_LIB"]), None);
    }
}
