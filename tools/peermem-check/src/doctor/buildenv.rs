// SPDX-License-Identifier: GPL-2.0
//! Can the running kernel build this module (DKMS does, at every kernel
//! update)? The same facts, read for any release ([`build_env`]), judge
//! every installed kernel too (`kernels.rs`). A Rust module needs a kernel
//! built with `CONFIG_RUST=y`, the kernel's headers, its compiled Rust
//! crates (`libkernel.rmeta`, ...) and the very rustc release that
//! compiled them.
//!
//! Ubuntu ships all of it as packages, and doctor names them:
//! `linux-headers-<release>`, `linux-lib-rust-<release>` (the crates, under
//! `/usr/src/linux-lib-rust-<release>/rust`), `rustc-1.NN` (the release in
//! the kernel's `CONFIG_RUSTC_VERSION_TEXT`; installed as `rustc-1.NN`,
//! not as `rustc`), `bindgen`, `libclang-dev`, `dkms`, and `dwarves`
//! (pahole) where the kernel makes BTF for modules, as Ubuntu's do. Ubuntu builds
//! some kernels without Rust or without the lib-rust package (DGX OS's
//! `linux-nvidia`, the cloud flavours); on those the module cannot be built
//! and doctor says to boot the generic kernel.
//!
//! A kernel on Ubuntu that is not one of Ubuntu's own (a cloud provider's
//! or a self-built one, whose release is not `<version>-<abi>-<flavour>`)
//! has no such packages: doctor names none for it.
//!
//! Everything is read under the [`SysRoot`]: `/etc/os-release`, the kernel
//! release from procfs, the kernel's config (`/boot/config-<release>`, the
//! headers' `.config`, or the running kernel's `/proc/config.gz`), the
//! package directories under `/usr/src`, and the programs under `/usr/bin`
//! and `/usr/sbin`.

use serde_json::json;

use super::install::kernel_release;
use super::SysRoot;
use crate::report::Check;

const ID: &str = "kernel_build_env";
const T: &str = "Kernel can build the module";

/// Kernel flavours Ubuntu builds without the `linux-lib-rust` package
/// (`do_lib_rust = false` in their `debian.<flavour>/rules.d/amd64.mk`):
/// no Rust crates to build an out-of-tree Rust module against.
const NO_LIB_RUST_FLAVOURS: &[&str] = &["azure", "gcp", "gke", "aws", "oracle", "nvidia"];

/// What `/etc/os-release` says, as far as the checks need it.
#[derive(Debug, Default, PartialEq)]
pub struct OsRelease {
    pub id: String,
    pub version_id: String,
}

/// Parses `/etc/os-release` (`KEY=value`, values optionally quoted).
pub fn os_release(r: &SysRoot) -> Option<OsRelease> {
    let text = r
        .read("/etc/os-release")
        .or_else(|| r.read("/usr/lib/os-release"))?;
    let mut o = OsRelease::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"').trim_matches('\'').to_string();
        match k.trim() {
            "ID" => o.id = v,
            "VERSION_ID" => o.version_id = v,
            _ => {}
        }
    }
    Some(o)
}

/// The flavour of an Ubuntu kernel release: `7.0.0-14-generic` ->
/// `generic`, `6.8.0-1020-nvidia-64k` -> `nvidia-64k`. `None` when the
/// release is not `<version>-<abi>-<flavour>`.
pub fn ubuntu_flavour(release: &str) -> Option<&str> {
    let mut parts = release.splitn(3, '-');
    let version = parts.next()?;
    let abi = parts.next()?;
    let flavour = parts.next()?;
    (version.contains('.') && !abi.is_empty() && abi.chars().all(|c| c.is_ascii_digit()))
        .then_some(flavour)
        .filter(|f| !f.is_empty())
}

/// `rustc-1.NN`, Ubuntu's package (and program) of the rustc release named
/// in `CONFIG_RUSTC_VERSION_TEXT` ("rustc 1.93.1 (01f6ddf75 2026-02-11)
/// (built from a source tarball)" -> `rustc-1.93`).
pub fn rustc_package(version_text: &str) -> Option<String> {
    let v = version_text
        .strip_prefix("rustc ")?
        .split_whitespace()
        .next()?;
    let mut n = v.split('.');
    let major = n.next()?.parse::<u32>().ok()?;
    let minor = n.next()?.parse::<u32>().ok()?;
    Some(format!("rustc-{major}.{minor}"))
}

/// The value of `CONFIG_<name>` in a kernel config ("" when unset), quotes
/// removed.
pub(super) fn config_value<'a>(config: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("CONFIG_{name}=");
    config
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map(|v| v.trim().trim_matches('"'))
}

/// The running kernel's config as `CONFIG_IKCONFIG_PROC` exposes it
/// (gzip), decompressed; `None` where there is none or it does not
/// decompress.
pub(super) fn proc_config(r: &SysRoot) -> Option<String> {
    use std::io::Read;
    let gz = r.read_bytes("/proc/config.gz", 4 << 20)?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .take(16 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The kernel's config and where it was read: the kernel package's copy in
/// `/boot`, the build tree's or the headers' `.config`, else, for the
/// running kernel only, its own `/proc/config.gz` (another kernel's config
/// is not that one).
fn kernel_config(
    r: &SysRoot,
    kver: &str,
    headers: &str,
    running: bool,
) -> Option<(String, String)> {
    [
        format!("/boot/config-{kver}"),
        format!("/lib/modules/{kver}/build/.config"),
        format!("{headers}/.config"),
    ]
    .into_iter()
    .find_map(|p| r.read(&p).map(|c| (c, p)))
    .or_else(|| {
        running
            .then(|| proc_config(r))
            .flatten()
            .map(|c| (c, "/proc/config.gz".to_string()))
    })
}

/// The dangling `rust` link of an Ubuntu HWE headers package: the link's
/// target directory that no package installs (`/usr/src/linux-hwe-6.17-
/// lib-rust-<release>`), when the link points into a missing directory.
fn dangling_rust_link(r: &SysRoot, headers: &str) -> Option<String> {
    let link = r.path(&format!("{headers}/rust"));
    let meta = std::fs::symlink_metadata(&link).ok()?;
    if !meta.file_type().is_symlink() || link.exists() {
        return None;
    }
    let target = std::fs::read_link(&link).ok()?;
    let target = target.to_string_lossy();
    // ../linux-hwe-6.17-lib-rust-<release>/rust: the directory is the
    // target without its last component, resolved from /usr/src.
    let dir = target.strip_suffix("/rust").unwrap_or(&target);
    let name = dir.strip_prefix("../")?;
    (!name.contains('/')).then(|| format!("/usr/src/{name}"))
}

/// A program under the usual directories (`/usr/bin`, `/bin`, `/usr/sbin`,
/// `/sbin`, `/usr/local/bin`).
fn has_program(r: &SysRoot, name: &str) -> bool {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
        .iter()
        .any(|d| r.exists(&format!("{d}/{name}")))
}

/// libclang, which bindgen loads: LLVM's own directories or the multiarch
/// library directory.
fn has_libclang(r: &SysRoot) -> bool {
    r.list("/usr/lib")
        .iter()
        .filter(|d| d.starts_with("llvm-"))
        .any(|d| {
            r.list(&format!("/usr/lib/{d}/lib"))
                .iter()
                .any(|f| f.starts_with("libclang") && f.contains(".so"))
        })
        || ["x86_64-linux-gnu", "aarch64-linux-gnu"].iter().any(|a| {
            r.list(&format!("/usr/lib/{a}"))
                .iter()
                .any(|f| f.starts_with("libclang-") && f.contains(".so"))
        })
}

/// What building the module for one kernel needs and what of it is
/// installed, read under the root. The running kernel's check and the
/// installed kernels' lines judge these same facts.
#[derive(Debug)]
pub struct BuildEnv {
    pub kver: String,
    pub os: OsRelease,
    pub ubuntu: bool,
    /// Ubuntu's flavour of the release (`generic`, `nvidia-64k`); `None`
    /// off Ubuntu and for a kernel that is not one of Ubuntu's.
    pub flavour: Option<String>,
    /// On Ubuntu, a kernel whose release is not Ubuntu's shape: it came
    /// from elsewhere, and Ubuntu's archive has no headers or lib-rust for it.
    pub foreign: bool,
    /// Where Ubuntu's headers package installs the build tree.
    pub headers: String,
    /// Where Ubuntu's lib-rust package installs the kernel's crates.
    pub lib_rust: String,
    pub config_source: Option<String>,
    /// `CONFIG_RUST=y`; `None` when no config is found.
    pub rust: Option<bool>,
    pub rustc_text: Option<String>,
    /// `rustc-1.NN`, the package of the rustc that built the kernel.
    pub rustc_pkg: Option<String>,
    /// A build tree (Ubuntu's headers or `/lib/modules/<kver>/build`).
    pub build_tree: bool,
    /// Where the kernel's compiled Rust crates are: Ubuntu's lib-rust
    /// package or the build tree's own `rust/`, the places the DKMS build
    /// looks.
    pub rust_crates: Option<String>,
    /// The build runs pahole (the kernel makes BTF for modules) and it is
    /// not installed.
    pub pahole_missing: bool,
    /// Why this Ubuntu flavour has no crates to build against, when it is
    /// one Ubuntu builds without the lib-rust package and none are there.
    pub no_lib_rust: Option<String>,
    /// Ubuntu's packages the build needs that are not installed, in `apt
    /// install` order; empty off Ubuntu and for kernels not Ubuntu's.
    pub missing: Vec<String>,
}

/// Reads what building the module for kernel `kver` needs. `running`: the
/// kernel is the one running, so its `/proc/config.gz` and
/// `/sys/kernel/btf/vmlinux` speak for it.
pub fn build_env(r: &SysRoot, kver: &str, running: bool) -> BuildEnv {
    let os = os_release(r).unwrap_or_default();
    let ubuntu = os.id == "ubuntu";
    let flavour = if ubuntu { ubuntu_flavour(kver) } else { None };
    let headers = format!("/usr/src/linux-headers-{kver}");
    let lib_rust = format!("/usr/src/linux-lib-rust-{kver}/rust");
    let (config, config_source) = kernel_config(r, kver, &headers, running).unzip();
    let rust = config
        .as_deref()
        .map(|c| config_value(c, "RUST") == Some("y"));
    let rustc_text = config
        .as_deref()
        .and_then(|c| config_value(c, "RUSTC_VERSION_TEXT"))
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let rustc_pkg = rustc_text.as_deref().and_then(rustc_package);
    let build_tree = r.exists(&format!("{headers}/Makefile"))
        || r.exists(&format!("/lib/modules/{kver}/build/Makefile"));
    let rust_crates = [
        format!("{lib_rust}/libkernel.rmeta"),
        format!("/lib/modules/{kver}/build/rust/libkernel.rmeta"),
    ]
    .into_iter()
    .find(|p| r.exists(p));
    let pahole_missing = rust == Some(true)
        && needs_pahole(r, config.as_deref(), kver, &headers, running)
        && !has_program(r, "pahole");
    let has_lib_rust = r.exists(&format!("{lib_rust}/libkernel.rmeta"));
    let no_lib_rust = flavour.and_then(|f| {
        let base = f.strip_suffix("-64k").unwrap_or(f);
        (NO_LIB_RUST_FLAVOURS.contains(&base) && !has_lib_rust).then(|| {
            if base == "nvidia" {
                "DGX OS's linux-nvidia kernels are built without Rust".to_string()
            } else {
                format!("Ubuntu builds its -{base} kernels without the linux-lib-rust package")
            }
        })
    });
    let foreign = ubuntu && flavour.is_none();
    // What the build needs, each with the package that brings it.
    let mut missing: Vec<String> = Vec::new();
    if ubuntu && !foreign {
        if !build_tree {
            missing.push(format!("linux-headers-{kver}"));
        }
        if !has_lib_rust {
            missing.push(format!("linux-lib-rust-{kver}"));
        }
        match &rustc_pkg {
            Some(p) if !has_program(r, p) => missing.push(p.clone()),
            _ => {}
        }
        if !has_program(r, "bindgen") {
            missing.push("bindgen".into());
        }
        if !has_libclang(r) {
            missing.push("libclang-dev".into());
        }
        if !has_program(r, "dkms") {
            missing.push("dkms".into());
        }
        if pahole_missing {
            missing.push("dwarves".into());
        }
    }
    BuildEnv {
        kver: kver.to_string(),
        flavour: flavour.map(str::to_string),
        os,
        ubuntu,
        foreign,
        headers,
        lib_rust,
        config_source,
        rust,
        rustc_text,
        rustc_pkg,
        build_tree,
        rust_crates,
        pahole_missing,
        no_lib_rust,
        missing,
    }
}

impl BuildEnv {
    /// The kernel as the lines about it name it: the distribution, and
    /// whether the kernel is one of Ubuntu's.
    pub fn where_(&self) -> String {
        let kver = &self.kver;
        if self.foreign {
            format!(
                "Ubuntu {}, kernel {kver} (not one of Ubuntu's kernels)",
                self.os.version_id
            )
        } else if self.ubuntu {
            format!("Ubuntu {}, kernel {kver}", self.os.version_id)
        } else {
            format!("kernel {kver}")
        }
    }

    /// The one fix for a kernel that cannot build Rust modules at all.
    pub fn no_rust_fix(&self) -> String {
        if self.foreign {
            format!(
                "boot a kernel built with CONFIG_RUST=y, such as Ubuntu's generic kernel (sudo apt install {}, reboot into it, then install the module again)",
                ubuntu_generic_package(&self.os.version_id)
            )
        } else if self.ubuntu {
            ubuntu_generic_fix(&self.os.version_id)
        } else {
            "boot a kernel built with CONFIG_RUST=y (README: 'Does it run on my node?')".to_string()
        }
    }

    /// Why the kernel cannot build the module whatever is installed: built
    /// without Rust, or an Ubuntu flavour without the lib-rust package.
    pub fn cannot_build(&self) -> Option<String> {
        if self.rust == Some(false) {
            let why = match self.flavour.as_deref() {
                Some(f) if f.starts_with("nvidia") => {
                    " (DGX OS's linux-nvidia kernels are built without Rust)"
                }
                _ => "",
            };
            return Some(format!("built without CONFIG_RUST=y{why}"));
        }
        if self.ubuntu && !self.foreign {
            return self.no_lib_rust.clone();
        }
        None
    }
}

/// The check: whether the running kernel can build (and load) a Rust
/// module, and on Ubuntu exactly which packages are missing.
pub fn kernel_build_env(r: &SysRoot) -> Check {
    let Some(kver) = kernel_release(r) else {
        return Check::skip(ID, T, "cannot read the running kernel's release");
    };
    let env = build_env(r, &kver, true);
    let mut data = json!({
        "kernel": kver,
        "os": {"id": env.os.id, "version_id": env.os.version_id},
        "flavour": env.flavour,
        "config_rust": env.rust,
        "config_source": env.config_source,
        "rustc_version_text": env.rustc_text,
    });
    let where_ = env.where_();
    let headers = &env.headers;
    let lib_rust = &env.lib_rust;

    // A kernel without Rust cannot build nor load a Rust module at all.
    if env.rust == Some(false) {
        let why = env.cannot_build().unwrap_or_default();
        return Check::fail(
            ID,
            T,
            format!("{where_}: {why}: it cannot build or load Rust modules"),
        )
        .fix(env.no_rust_fix())
        .data(data);
    }
    if !env.ubuntu || env.foreign {
        if env.pahole_missing {
            return Check::fail(
                ID,
                T,
                format!("{where_}: pahole: not found, and the kernel has BTF for modules (CONFIG_DEBUG_INFO_BTF_MODULES=y): the build runs it on the module"),
            )
            .fix("install pahole (Debian/Ubuntu: apt install dwarves; Fedora/RHEL: dnf install dwarves)")
            .data(data);
        }
        return match env.rust {
            Some(true) => Check::pass(
                ID,
                T,
                format!("{where_}: CONFIG_RUST=y (`make print-build-env` checks the rest of its build tree)"),
            )
            .data(data),
            _ => Check::skip(
                ID,
                T,
                format!("{where_}: no kernel config found (/boot/config-{kver}, /proc/config.gz)"),
            )
            .data(data),
        };
    }

    // Ubuntu: the flavours built without linux-lib-rust have nothing to
    // build against, whatever is installed.
    if let Some(what) = &env.no_lib_rust {
        return Check::fail(
            ID,
            T,
            format!("{where_}: {what}: no Rust crates to build the module against"),
        )
        .fix(env.no_rust_fix())
        .data(data);
    }

    let rustc_pkg = env.rustc_pkg.clone();
    let missing = &env.missing;
    data["missing_packages"] = json!(missing);
    data["rustc_package"] = json!(rustc_pkg);

    // HWE headers link their `rust` to a directory no package installs.
    let link_fix = dangling_rust_link(r, headers).map(|dir| {
        let name = dir.trim_start_matches("/usr/src/");
        (
            format!("{headers}/rust points to the missing {dir}/rust (Ubuntu HWE packaging); this module's build looks in {lib_rust} itself"),
            format!("for other out-of-tree Rust builds: sudo ln -s linux-lib-rust-{kver} /usr/src/{name}"),
        )
    });
    data["dangling_rust_link"] = json!(link_fix.is_some());

    if !missing.is_empty() {
        let rustc_note = match (&rustc_pkg, &env.rustc_text) {
            (Some(p), Some(t)) if missing.contains(p) => {
                format!("; the kernel was built by '{t}': install {p} (a rustup rustc of the same number fails with E0514)")
            }
            _ => String::new(),
        };
        // With this project's module already loaded, only a rebuild (a
        // new kernel, a new driver) needs them: a warning.
        let loaded = super::loaded_clients(r)
            .iter()
            .any(|m| super::implementation(r, m).starts_with("nvidia-peermem-rs"));
        let pahole_note = if missing.iter().any(|p| p == "dwarves") {
            "; pahole: not found (the kernel has BTF for modules, the build runs it)"
        } else {
            ""
        };
        let detail = format!(
            "{where_}: missing {}{rustc_note}{pahole_note}",
            missing.join(", ")
        );
        let c = if loaded {
            Check::warn(
                ID,
                T,
                format!("{detail}; the loaded module was built before"),
            )
        } else {
            Check::fail(ID, T, detail)
        };
        return c
            .fix(format!("sudo apt install {}", missing.join(" ")))
            .data(data);
    }
    if rustc_pkg.is_none() {
        return Check::warn(
            ID,
            T,
            format!("{where_}: the kernel's config names no rustc (CONFIG_RUSTC_VERSION_TEXT)"),
        )
        .fix(format!("sudo apt install linux-headers-{kver}"))
        .data(data);
    }
    if let Some((what, fix)) = link_fix {
        return Check::warn(ID, T, format!("{where_}: {what}"))
            .fix(fix)
            .data(data);
    }
    Check::pass(
        ID,
        T,
        format!(
            "{where_}: headers, linux-lib-rust, {} (the kernel's rustc), bindgen, libclang and dkms installed",
            rustc_pkg.unwrap_or_default()
        ),
    )
    .data(data)
}

/// Whether building a module for this kernel runs pahole: Kbuild makes
/// module BTF with CONFIG_DEBUG_INFO_BTF_MODULES=y when the build tree has
/// a vmlinux (Ubuntu's headers ship a BTF-only one); for the running kernel
/// /sys/kernel/btf/vmlinux says the same.
fn needs_pahole(
    r: &SysRoot,
    config: Option<&str>,
    kver: &str,
    headers: &str,
    running: bool,
) -> bool {
    config.and_then(|c| config_value(c, "DEBUG_INFO_BTF_MODULES")) == Some("y")
        && (r.exists(&format!("{headers}/vmlinux"))
            || r.exists(&format!("/lib/modules/{kver}/build/vmlinux"))
            || (running && r.exists("/sys/kernel/btf/vmlinux")))
}

/// The fix for a kernel Ubuntu builds without Rust: the generic kernel of
/// the release (24.04 gets the HWE one: its GA 6.8 is too old).
fn ubuntu_generic_fix(version_id: &str) -> String {
    format!(
        "boot the generic kernel: sudo apt install {}, reboot into it, then install the module again",
        ubuntu_generic_package(version_id)
    )
}

/// The metapackage of the release's generic kernel with Rust.
fn ubuntu_generic_package(version_id: &str) -> &'static str {
    match version_id {
        "24.04" => "linux-generic-hwe-24.04",
        _ => "linux-generic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    #[test]
    fn flavours() {
        assert_eq!(ubuntu_flavour("7.0.0-14-generic"), Some("generic"));
        assert_eq!(ubuntu_flavour("6.8.0-1020-nvidia-64k"), Some("nvidia-64k"));
        assert_eq!(ubuntu_flavour("6.17.0-1008-azure"), Some("azure"));
        assert_eq!(ubuntu_flavour("6.12.9-rust"), None);
        assert_eq!(ubuntu_flavour("7.2.0"), None);
    }

    #[test]
    fn rustc_packages() {
        assert_eq!(
            rustc_package("rustc 1.93.1 (01f6ddf75 2026-02-11) (built from a source tarball)")
                .as_deref(),
            Some("rustc-1.93")
        );
        assert_eq!(
            rustc_package("rustc 1.82.0 (f6e511eec 2024-10-15) (built from a source tarball)")
                .as_deref(),
            Some("rustc-1.82")
        );
        assert_eq!(rustc_package("clang 19"), None);
        assert_eq!(rustc_package("rustc x.y"), None);
    }

    /// `/proc/config.gz` is the running kernel's: another kernel's config
    /// is read from its own files only.
    #[test]
    fn proc_config_speaks_for_the_running_kernel_only() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"CONFIG_RUST=y\n").unwrap();
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("proc")).unwrap();
        std::fs::write(d.path().join("proc/config.gz"), gz.finish().unwrap()).unwrap();
        let r = SysRoot::new(d.path());
        let running = build_env(&r, "7.0.0-14-generic", true);
        assert_eq!(running.rust, Some(true));
        assert_eq!(running.config_source.as_deref(), Some("/proc/config.gz"));
        let other = build_env(&r, "7.0.0-15-generic", false);
        assert_eq!(other.rust, None);
        assert_eq!(other.config_source, None);
    }

    #[test]
    fn empty_root_skips() {
        let d = tempfile::tempdir().unwrap();
        let c = kernel_build_env(&SysRoot::new(d.path()));
        assert_eq!(c.verdict, Verdict::Skip);
    }
}
