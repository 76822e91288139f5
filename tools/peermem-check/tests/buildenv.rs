// SPDX-License-Identifier: GPL-2.0
//! doctor's "Kernel can build the module" on Ubuntu-shaped trees: the
//! 26.04 generic kernel with and without its packages, the 24.04 HWE
//! kernel with its dangling `rust` link, DGX OS's linux-nvidia kernel
//! (Rust off), an azure kernel (no linux-lib-rust) and a kernel on Ubuntu
//! that is not Ubuntu's (a cloud machine's, its config in /proc/config.gz).

use std::os::unix::fs::symlink;

use serde_json::Value;

mod fake_root;
use fake_root::FakeRoot as Tree;

/// Ubuntu 26.04's generic kernel records this rustc (Ubuntu's rustc-1.93
/// package, built from the source tarball).
const RUSTC_2604: &str = "rustc 1.93.1 (01f6ddf75 2026-02-11) (built from a source tarball)";
/// Ubuntu 24.04's HWE 6.17 kernel: rustc-1.82.
const RUSTC_HWE: &str = "rustc 1.82.0 (f6e511eec 2024-10-15) (built from a source tarball)";

impl Tree {
    /// An Ubuntu node running `kver`, its config from the kernel package.
    fn ubuntu(version_id: &str, kver: &str, config: &str) -> Self {
        let t = Tree::new();
        t.write(
            "/etc/os-release",
            &format!("NAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID=\"{version_id}\"\n"),
        );
        t.write("/proc/sys/kernel/osrelease", &format!("{kver}\n"));
        t.write(&format!("/boot/config-{kver}"), config);
        t
    }

    /// What `apt install linux-headers-<v> linux-lib-rust-<v> rustc-1.NN
    /// bindgen libclang-dev dkms` puts where doctor looks.
    fn install_all(&self, kver: &str, rustc: &str) {
        self.write(&format!("/usr/src/linux-headers-{kver}/Makefile"), "");
        self.write(
            &format!("/usr/src/linux-lib-rust-{kver}/rust/libkernel.rmeta"),
            "",
        );
        self.write(&format!("/usr/bin/{rustc}"), "");
        self.write("/usr/bin/bindgen", "");
        self.write("/usr/lib/llvm-21/lib/libclang.so.1", "");
        self.write("/usr/sbin/dkms", "");
    }

    /// doctor's check `id` on this tree.
    fn doctor_check(&self, id: &str) -> Value {
        fake_root::doctor_check(&self.path(), id)
    }

    fn check(&self) -> Value {
        self.doctor_check("kernel_build_env")
    }
}

fn rust_config(rustc: &str) -> String {
    format!("CONFIG_RUST=y\nCONFIG_MODVERSIONS=y\nCONFIG_RUSTC_VERSION_TEXT=\"{rustc}\"\n")
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[test]
fn ubuntu_2604_names_every_missing_package() {
    let k = "7.0.0-14-generic";
    let t = Tree::ubuntu("26.04", k, &rust_config(RUSTC_2604));
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert_eq!(
        s(&c["fix"]),
        format!("sudo apt install linux-headers-{k} linux-lib-rust-{k} rustc-1.93 bindgen libclang-dev dkms"),
        "{c}"
    );
    assert!(
        s(&c["detail"]).starts_with("Ubuntu 26.04, kernel 7.0.0-14-generic: missing"),
        "{c}"
    );
    assert!(s(&c["detail"]).contains(RUSTC_2604), "{c}");
    // This project's module loaded (built before): only a rebuild needs them.
    t.write("/sys/module/nvidia_peermem_rs/version", "0.1.0\n");
    let c = t.check();
    assert_eq!(c["verdict"], "warn", "{c}");
    assert!(
        s(&c["fix"]).starts_with("sudo apt install linux-headers-"),
        "{c}"
    );
    std::fs::remove_dir_all(t.0.path().join("sys/module/nvidia_peermem_rs")).unwrap();
    // A rustup `rustc` on PATH is not the kernel's: still missing.
    t.write("/usr/bin/rustc", "");
    t.write(&format!("/usr/src/linux-headers-{k}/Makefile"), "");
    t.write(
        &format!("/usr/src/linux-lib-rust-{k}/rust/libkernel.rmeta"),
        "",
    );
    let c = t.check();
    assert_eq!(
        s(&c["fix"]),
        "sudo apt install rustc-1.93 bindgen libclang-dev dkms",
        "{c}"
    );
    t.install_all(k, "rustc-1.93");
    let c = t.check();
    assert_eq!(c["verdict"], "pass", "{c}");
    assert!(s(&c["detail"]).contains("rustc-1.93"), "{c}");
    assert_eq!(c["data"]["os"]["version_id"], "26.04", "{c}");
    assert_eq!(c["data"]["flavour"], "generic", "{c}");
}

#[test]
fn ubuntu_hwe_dangling_rust_link_gets_the_ln_command() {
    let k = "6.17.0-14-generic";
    let t = Tree::ubuntu("24.04", k, &rust_config(RUSTC_HWE));
    t.install_all(k, "rustc-1.82");
    symlink(
        format!("../linux-hwe-6.17-lib-rust-{k}/rust"),
        t.0.path().join(format!("usr/src/linux-headers-{k}/rust")),
    )
    .unwrap();
    let c = t.check();
    assert_eq!(c["verdict"], "warn", "{c}");
    assert!(
        s(&c["detail"]).contains(&format!(
            "missing /usr/src/linux-hwe-6.17-lib-rust-{k}/rust"
        )),
        "{c}"
    );
    assert_eq!(
        s(&c["fix"]),
        format!("for other out-of-tree Rust builds: sudo ln -s linux-lib-rust-{k} /usr/src/linux-hwe-6.17-lib-rust-{k}"),
        "{c}"
    );
    // After the ln -s the link resolves: nothing left to say.
    symlink(
        format!("linux-lib-rust-{k}"),
        t.0.path()
            .join(format!("usr/src/linux-hwe-6.17-lib-rust-{k}")),
    )
    .unwrap();
    assert_eq!(t.check()["verdict"], "pass");
    // Without rustc-1.82 the fix names it, from the kernel's own text.
    std::fs::remove_file(t.0.path().join("usr/bin/rustc-1.82")).unwrap();
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert_eq!(s(&c["fix"]), "sudo apt install rustc-1.82", "{c}");
}

#[test]
fn linux_nvidia_without_rust_says_boot_the_generic_kernel() {
    let k = "6.8.0-1020-nvidia";
    let t = Tree::ubuntu(
        "24.04",
        k,
        "# CONFIG_RUST is not set\nCONFIG_MODVERSIONS=y\n",
    );
    t.write(&format!("/usr/src/linux-headers-{k}/Makefile"), "");
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(
        s(&c["detail"]).contains("built without CONFIG_RUST=y"),
        "{c}"
    );
    assert!(s(&c["detail"]).contains("linux-nvidia"), "{c}");
    assert!(
        s(&c["detail"]).contains("cannot build or load Rust modules"),
        "{c}"
    );
    assert_eq!(
        s(&c["fix"]),
        "boot the generic kernel: sudo apt install linux-generic-hwe-24.04, reboot into it, then install the module again",
        "{c}"
    );
}

#[test]
fn azure_without_lib_rust_says_boot_the_generic_kernel() {
    let k = "7.0.0-1004-azure";
    let t = Tree::ubuntu("26.04", k, &rust_config(RUSTC_2604));
    t.install_all(k, "rustc-1.93");
    std::fs::remove_dir_all(t.0.path().join(format!("usr/src/linux-lib-rust-{k}"))).unwrap();
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(
        s(&c["detail"])
            .contains("Ubuntu builds its -azure kernels without the linux-lib-rust package"),
        "{c}"
    );
    assert_eq!(
        s(&c["fix"]),
        "boot the generic kernel: sudo apt install linux-generic, reboot into it, then install the module again",
        "{c}"
    );
}

#[test]
fn not_ubuntu_without_rust_fails_and_with_rust_passes() {
    let t = Tree::new();
    t.write("/etc/os-release", "ID=debian\nVERSION_ID=\"12\"\n");
    t.write("/proc/sys/kernel/osrelease", "6.1.0-56-amd64\n");
    t.write("/boot/config-6.1.0-56-amd64", "# CONFIG_RUST is not set\n");
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(s(&c["fix"]).contains("CONFIG_RUST=y"), "{c}");
    t.write("/boot/config-6.1.0-56-amd64", "CONFIG_RUST=y\n");
    assert_eq!(t.check()["verdict"], "pass");
}

/// A cloud machine's kernel on Ubuntu 24.04, as seen on a GPU node: not
/// one of Ubuntu's (no `<abi>-<flavour>`), no `/boot`, no `/lib/modules`,
/// its config only in `/proc/config.gz`, with no Rust in it.
fn foreign_kernel_on_ubuntu(config: &str) -> Tree {
    use std::io::Write;
    let t = Tree::new();
    t.write(
        "/etc/os-release",
        "NAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID=\"24.04\"\n",
    );
    t.write("/proc/sys/kernel/osrelease", "6.18.44-fc-v657-gpu\n");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(config.as_bytes()).unwrap();
    let f = t.0.path().join("proc/config.gz");
    std::fs::write(f, gz.finish().unwrap()).unwrap();
    t
}

#[test]
fn a_kernel_not_from_ubuntu_gets_no_ubuntu_package_names() {
    // Rust off (CONFIG_RUST absent: its toolchain was missing at build).
    let t = foreign_kernel_on_ubuntu("CONFIG_RUSTC_VERSION=0\nCONFIG_MODULES=y\n");
    let c = t.check();
    assert_eq!(c["verdict"], "fail", "{c}");
    assert_eq!(c["data"]["config_source"], "/proc/config.gz", "{c}");
    assert_eq!(
        s(&c["detail"]),
        "Ubuntu 24.04, kernel 6.18.44-fc-v657-gpu (not one of Ubuntu's kernels): built without CONFIG_RUST=y: it cannot build or load Rust modules",
        "{c}"
    );
    assert!(!s(&c["fix"]).contains("linux-headers-6.18"), "{c}");
    assert!(
        s(&c["fix"]).starts_with("boot a kernel built with CONFIG_RUST=y, such as Ubuntu's generic kernel (sudo apt install linux-generic-hwe-24.04"),
        "{c}"
    );
    // With Rust: what it needs comes from whoever built it.
    let t = foreign_kernel_on_ubuntu("CONFIG_RUST=y\nCONFIG_MODULES=y\n");
    let c = t.check();
    assert_eq!(c["verdict"], "pass", "{c}");
    assert!(!c.to_string().contains("apt install"), "{c}");
    // No config at all: nothing to say, and no package to name.
    std::fs::remove_file(t.0.path().join("proc/config.gz")).unwrap();
    let c = t.check();
    assert_eq!(c["verdict"], "skip", "{c}");
    assert!(!c.to_string().contains("apt install"), "{c}");
    // A corrupt config.gz reads as no config.
    t.write("/proc/config.gz", "not gzip");
    assert_eq!(t.check()["verdict"], "skip");
}

#[test]
fn the_drop_in_installed_as_nvidia_peermem_ko_counts_as_installed() {
    let k = "7.0.0-14-generic";
    let t = Tree::ubuntu("26.04", k, &rust_config(RUSTC_2604));
    t.write("/proc/sys/kernel/arch", "x86_64\n");
    t.write(
        "/var/lib/dkms/nvidia-peermem-rs-dropin/0.1.0/source/dkms.conf",
        "\n",
    );
    // The NVIDIA driver's DKMS copy alone is not the drop-in.
    t.write(
        &format!("/lib/modules/{k}/updates/dkms/nvidia-peermem.ko.zst"),
        "",
    );
    let dkms = t.doctor_check("dkms_state");
    assert_eq!(dkms["verdict"], "fail", "{dkms}");
    t.write(
        &format!("/lib/modules/{k}/updates/dkms/nvidia_peermem.ko.zst"),
        "",
    );
    let dkms = t.doctor_check("dkms_state");
    assert_eq!(dkms["verdict"], "pass", "{dkms}");
}
