// SPDX-License-Identifier: GPL-2.0
//! CLI tests: doctor against the fixture trees (one per verdict), the JSON
//! shape of every command, argument errors, and clean failures without
//! a simulated stack, a GPU or an RDMA NIC.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

// One copy for the workspace: the test bed's crate keeps it.
#[path = "../../../tests/sim-client/tests/common/mod.rs"]
mod common;
mod fake_root;
use fake_root::{doctor_check as check_of, FakeRoot};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_peermem-check"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run peermem-check")
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn doctor(tree: &str) -> (Output, Value) {
    let o = run(&["doctor", "--json", "--root", &fixture(tree)]);
    let v = json_of(&o);
    (o, v)
}

fn verdict_of<'a>(v: &'a Value, id: &str) -> &'a str {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))["verdict"]
        .as_str()
        .unwrap()
}

fn check_of_tree<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))
}

#[test]
fn doctor_pass_tree() {
    let (o, v) = doctor("pass");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(v["verdict"], "pass");
    assert_eq!(v["summary"]["fail"], 0);
    assert_eq!(v["summary"]["warn"], 0);
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["verdict"], "pass", "{c}");
    }
    assert_eq!(verdict_of(&v, "pcie_topology"), "pass");
    // Open modules, the kernel's import, rdma-core 50, ConnectX: dma-buf.
    let nccl = check_of_tree(&v, "nccl_path");
    assert!(
        nccl["detail"]
            .as_str()
            .unwrap()
            .ends_with("dma-buf; this module is not needed for NCCL (peer memory via /sys/kernel/mm/memory_peers/nv_mem/version stays its fallback)"),
        "{nccl}"
    );
    let pairs = &v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "pcie_topology")
        .unwrap()["data"]["pairs"];
    assert_eq!(pairs[0]["link"], "PIX");
}

#[test]
fn doctor_warn_tree() {
    let (o, v) = doctor("warn");
    assert_eq!(o.status.code(), Some(0), "warnings do not fail doctor");
    assert_eq!(v["verdict"], "warn");
    assert_eq!(v["summary"]["fail"], 0);
    for id in [
        "peerdirect_support",
        "rdma_devices",
        "iommu",
        "pcie_topology",
        "bar1",
        "kernel_log",
        "systemd_unit",
        "modprobe_target",
        // NCCL 2.29.7 sees nv_mem, its GDAKI path does not
        "nccl_version",
    ] {
        assert_eq!(verdict_of(&v, id), "warn", "{id}");
    }
    assert_eq!(verdict_of(&v, "ucx_version"), "pass");
    // Every warning carries a fix.
    for c in v["checks"].as_array().unwrap() {
        if c["verdict"] == "warn" {
            assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c}");
        }
    }
}

#[test]
fn doctor_fail_tree() {
    let (o, v) = doctor("fail");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(v["verdict"], "fail");
    for id in [
        "peer_memory_client",
        "peerdirect_core",
        "peerdirect_support",
        "gpu_attributes",
        "kernel_log",
        "dkms_state",
        // the running kernel is the newest, and its build tree is missing
        "installed_kernel",
        "systemd_unit",
        // older than the releases that test /sys/module/nvidia_peermem
        "nccl_version",
        "ucx_version",
    ] {
        assert_eq!(verdict_of(&v, id), "fail", "{id}");
    }
    // GPU and NIC on different sockets work, slowly: a warning.
    assert_eq!(verdict_of(&v, "pcie_topology"), "warn");
    // Proprietary modules leave peer memory, which this NCCL does not see.
    assert_eq!(verdict_of(&v, "nccl_path"), "fail");
    let text = String::from_utf8(run(&["doctor", "--root", &fixture("fail")]).stdout).unwrap();
    assert!(
        text.contains("[FAIL] Peer-memory client: nvidia_peermem, nv_peer_mem are all loaded"),
        "{text}"
    );
    assert!(text.contains("fix: keep one: rmmod"), "{text}");
    assert!(
        text.contains("[FAIL] Installed kernel 6.12.0-node (running; newest: the next boot's default): missing: the kernel's build tree (/lib/modules/6.12.0-node/build) ("),
        "{text}"
    );
    assert!(text.contains("SYS"), "{text}");
    assert!(
        text.contains("NCCL 2.21.5 (Python wheel nvidia_nccl_cu12 2.21.5 (/usr/local/lib/python3.11/dist-packages)): no: it tests only /sys/kernel/mm/memory_peers/nv_mem/version, /sys/kernel/mm/memory_peers/nvidia-peermem/version, none here; NCCL >= 2.23.4 would (via /sys/module/nvidia_peermem/version)"),
        "{text}"
    );
    assert!(
        text.contains("UCX 1.17.0 (Debian package libucx0 1.17.0+ds-1): no: it tests only /sys/kernel/mm/memory_peers/nv_mem/version, none here; UCX >= 1.18.0 would"),
        "{text}"
    );
}

#[test]
fn doctor_acs_tree() {
    let (o, v) = doctor("acs");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(verdict_of(&v, "acs"), "fail");
    assert_eq!(v["summary"]["fail"], 1, "only ACS fails: {v}");
    let acs = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "acs")
        .unwrap();
    assert!(acs["fix"]
        .as_str()
        .unwrap()
        .contains("setpci -s 0000:02:00.0"));
}

#[test]
fn doctor_on_an_empty_tree_explains_everything() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["doctor", "--json", "--root", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_of(&o);
    assert_eq!(v["checks"].as_array().unwrap().len(), 25);
    for c in v["checks"].as_array().unwrap() {
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        if c["verdict"] == "fail" {
            assert!(c["fix"].is_string(), "{c}");
        }
    }
    assert_eq!(verdict_of(&v, "nvidia_driver"), "fail");
    assert_eq!(verdict_of(&v, "rdma_devices"), "fail");
    assert_eq!(verdict_of(&v, "gpu_attributes"), "skip");
    // No kernel installed under the root: one line that says so.
    assert_eq!(verdict_of(&v, "installed_kernel"), "skip");
    // No GPU: which path, and the driver's topology gate, are unknown.
    for id in ["grdma_topology", "nccl_path", "ucx_path"] {
        assert_eq!(verdict_of(&v, id), "skip", "{id}");
    }
}

#[test]
fn doctor_json_shape() {
    let (_, v) = doctor("pass");
    assert_eq!(v["tool"], "peermem-check");
    assert_eq!(v["command"], "doctor");
    assert!(v["version"].is_string());
    for c in v["checks"].as_array().unwrap() {
        for k in ["id", "title", "verdict", "detail"] {
            assert!(c[k].is_string(), "{k} missing in {c}");
        }
        assert!(["pass", "warn", "fail", "skip"].contains(&c["verdict"].as_str().unwrap()));
    }
    let s = &v["summary"];
    let total: u64 = ["pass", "warn", "fail", "skip"]
        .iter()
        .map(|k| s[k].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, v["checks"].as_array().unwrap().len());
}

#[test]
fn argument_errors_exit_2() {
    for args in [
        &["frobnicate"][..],
        &["validate", "--size", "12Q"],
        &["validate", "--backend", "quantum"],
        &["validate", "--iterations", "0"],
        &["validate", "--memory", "disk"],
        &["validate", "--fault", "gremlin"],
        &["bench", "--sizes", "1M,x"],
        &["doctor", "--nope"],
        &["plot"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!o.stderr.is_empty());
    }
}

/// `validate --backend real --memory host --json EXTRA...`, which must
/// fail here (no RDMA device on a build host); its JSON.
#[cfg(feature = "real")]
fn validate_host_memory(extra: &[&str]) -> Value {
    let mut args = vec![
        "validate",
        "--backend",
        "real",
        "--memory",
        "host",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(1), "{args:?}");
    let v = json_of(&o);
    assert_eq!(v["verdict"], "fail");
    assert_eq!(v["checks"][0]["id"], "memory");
    assert_eq!(v["checks"][0]["verdict"], "pass");
    v
}

#[cfg(feature = "real")]
#[test]
fn validate_host_memory_refuses_the_dmabuf_path_before_any_device() {
    let v = validate_host_memory(&["--path", "dmabuf"]);
    let c = &v["checks"][1];
    assert_eq!(c["id"], "dmabuf_path");
    assert!(
        c["detail"].as_str().unwrap().contains("needs GPU memory"),
        "{c}"
    );
}

#[cfg(feature = "real")]
#[test]
fn validate_host_memory_never_touches_cuda() {
    // No GPU here: with --memory host the first failure is the verbs side
    // (no device on a host without rdma), never CUDA.
    let v = validate_host_memory(&[]);
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"cuda"), "{ids:?}");
}

/// With --memory host every line names host memory, the closing one
/// included, and none claims GPU memory was written.
#[cfg(feature = "real")]
#[test]
fn validate_host_memory_says_host_memory() {
    let o = run(&[
        "validate",
        "--backend",
        "real",
        "--memory",
        "host",
        "--path",
        "peermem",
        "--size",
        "64K",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    let last = text.lines().last().unwrap_or_default();
    if o.status.code() == Some(0) {
        // A host with an RDMA device (soft-RoCE) passes.
        assert_eq!(
            last,
            "validate PASSED: every byte written by RDMA landed in host memory and read back intact",
            "{text}"
        );
    } else {
        assert_eq!(o.status.code(), Some(1), "{text}");
        assert!(last.starts_with("validate FAILED: "), "{text}");
        assert!(last.contains("into host memory"), "{text}");
    }
    assert!(!text.contains("GPU memory"), "{text}");
    let v = validate_host_memory(&["--path", "peermem"]);
    assert_eq!(v["target"], "host memory");
}

/// `validate --backend sim` against a control device that does not exist.
fn validate_sim_without_device(extra: &[&str]) -> Output {
    let mut args = vec![
        "validate",
        "--backend",
        "sim",
        "--sim-dev",
        "/nonexistent/peermem_sim",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn validate_sim_names_simulated_gpu_memory() {
    let o = validate_sim_without_device(&[]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains("into simulated GPU memory could not be set up"),
        "{text}"
    );
}

#[test]
fn validate_sim_without_device_is_a_clean_failure() {
    let o = validate_sim_without_device(&["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_of(&o);
    assert_eq!(v["command"], "validate");
    assert_eq!(v["backend"], "sim");
    assert_eq!(v["verdict"], "fail");
    let c = &v["checks"][0];
    assert_eq!(c["id"], "open");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("simulated stack is not loaded"),
        "{c}"
    );
    assert_eq!(c["data"]["errno_name"], "ENOENT");
}

#[test]
fn validate_sim_against_a_wrong_device_maps_the_error() {
    // /dev/null answers every ioctl with ENOTTY: the flow must stop at the
    // first step with a cause, not crash.
    let o = run(&[
        "validate",
        "--backend",
        "sim",
        "--sim-dev",
        "/dev/null",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_of(&o);
    let failed: Vec<&Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .collect();
    assert!(!failed.is_empty());
    assert!(
        failed[0]["detail"].as_str().unwrap().contains("ENOTTY"),
        "{}",
        failed[0]
    );
}

#[test]
fn bench_sim_without_device_is_a_clean_failure() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "bench",
        "--backend",
        "sim",
        "--sim-dev",
        "/nonexistent",
        "--out",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_of(&o)["command"], "bench");
}

/// The real backend's verbs types come from rdma-sys, whose build script
/// asks the linker for libibverbs; the tool resolves the functions itself
/// at run time, so the binary must not list the library as NEEDED: `doctor`
/// has to start on a node without rdma-core.
#[cfg(feature = "real")]
#[test]
fn binary_starts_without_libibverbs() {
    let exe = env!("CARGO_BIN_EXE_peermem-check");
    let o = match Command::new("readelf").args(["-d", exe]).output() {
        Ok(o) if o.status.success() => o,
        _ => {
            common::skip("binary_starts_without_libibverbs", "no readelf (binutils)");
            return;
        }
    };
    let dynamic = String::from_utf8_lossy(&o.stdout);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(!needed.is_empty(), "no dynamic section read:\n{dynamic}");
    for lib in ["libibverbs", "librdmacm", "libcuda"] {
        assert!(
            !needed.iter().any(|l| l.contains(lib)),
            "the binary needs {lib} at load time:\n{}",
            needed.join("\n")
        );
    }
}

#[test]
fn validate_real_without_gpu_or_nic_explains_why() {
    // On a build host: no libcuda (or, on a GPU node without a NIC, no RDMA
    // device). Either way a failed check with a cause, never a panic.
    let o = run(&["validate", "--json", "--size", "64K"]);
    let v = json_of(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if v["verdict"] == "fail" {
        assert_eq!(o.status.code(), Some(1));
        let f = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["verdict"] == "fail")
            .unwrap();
        assert!(f["fix"].is_string(), "{f}");
    }
}

#[test]
fn plot_renders_from_bench_json() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("b.json");
    std::fs::write(
        &j,
        r#"{"backend":"sim","platform":"t","method":"m","results":[
          {"size":65536,"iterations":3,"reg_ns":{"n":3,"median":5000,"p10":4000,"p90":6000,"min":4000,"max":6000,"mean":5000},
           "dereg_ns":null,"direct_mib_s":900.0,"bounce_mib_s":450.0,"copy_mib_s":null},
          {"size":1048576,"iterations":3,"reg_ns":{"n":3,"median":9000,"p10":8000,"p90":9500,"min":8000,"max":9500,"mean":9000},
           "dereg_ns":null,"direct_mib_s":1900.0,"bounce_mib_s":950.0,"copy_mib_s":null}]}"#,
    )
    .unwrap();
    let png = dir.path().join("b.png");
    let o = run(&["plot", j.to_str().unwrap(), "-o", png.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let o = run(&["plot", dir.path().join("missing.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn doctor_reports_the_p2p_page_table_version() {
    let tree = FakeRoot::new();
    let w = |p: &str, text: &str| tree.write(p, text);
    let root = tree.path();
    let check = |v: &serde_json::Value| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "p2p_page_table")
            .unwrap()
            .clone()
    };
    // No module loaded: the version follows from the driver's.
    w("/sys/module/nvidia/version", "580.159.04\n");
    let v = json_of(&run(&["doctor", "--json", "--root", &root]));
    let c = check(&v);
    assert_eq!(c["verdict"], "pass", "{c}");
    assert_eq!(c["data"]["page_table_version"], "0x00020000", "{c}");
    // Our module loaded, and what it saw in debugfs wins.
    w("/sys/module/nvidia_peermem_rs/version", "0.1.0\n");
    w(
        "/sys/kernel/debug/nvidia_peermem_rs/stats",
        "acquired 1\npage_table_version 0x00030000\n",
    );
    let v = json_of(&run(&["doctor", "--json", "--root", &root]));
    let c = check(&v);
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(c["detail"].as_str().unwrap().contains("0x00030000"), "{c}");
    assert!(c["fix"].is_string(), "{c}");
}

#[test]
fn doctor_tells_the_drop_in_from_nvidias_module() {
    let tree = FakeRoot::new();
    let w = |p: &str, text: &str| tree.write(p, text);
    let root = tree.path();
    let detail = || {
        let v = json_of(&run(&["doctor", "--json", "--root", &root]));
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "peer_memory_client")
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    w("/sys/module/nvidia_peermem/version", "580.82.07\n");
    w(
        "/sys/module/nvidia_peermem/parameters/peerdirect_support",
        "0\n",
    );
    assert!(detail().contains("NVIDIA's nvidia-peermem"), "{}", detail());
    w("/sys/module/nvidia_peermem/parameters/coalesce_sg", "0\n");
    assert!(
        detail().contains("nvidia-peermem-rs drop-in"),
        "{}",
        detail()
    );
}

#[test]
fn doctor_fails_a_driver_older_than_515() {
    let tree = FakeRoot::new();
    let root = tree.path();
    tree.write("/sys/module/nvidia/version", "470.256.02\n");
    let c = check_of(&root, "nvidia_driver");
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("older than 515"),
        "{c}"
    );
    tree.write("/sys/module/nvidia/version", "515.43.04\n");
    assert_eq!(check_of(&root, "nvidia_driver")["verdict"], "pass");
}

#[test]
fn doctor_dkms_states() {
    let tree = FakeRoot::new();
    let root = tree.path();
    let w = |p: &str, t: &str| tree.write(p, t);
    // Nothing registered, nothing loaded: not installed from the package.
    w("/proc/sys/kernel/osrelease", "6.12.9-rust\n");
    w("/proc/sys/kernel/arch", "x86_64\n");
    assert_eq!(check_of(&root, "dkms_state")["verdict"], "skip");
    // Loaded by hand, not registered: the next kernel gets nothing.
    w("/sys/module/nvidia_peermem_rs/version", "0.1.0\n");
    assert_eq!(check_of(&root, "dkms_state")["verdict"], "warn");
    // Registered, kernel without Rust: DKMS skips it.
    w(
        "/var/lib/dkms/nvidia-peermem-rs/0.1.0/source/dkms.conf",
        "\n",
    );
    w("/boot/config-6.12.9-rust", "CONFIG_RUST is not set\n");
    let c = check_of(&root, "dkms_state");
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(c["detail"].as_str().unwrap().contains("CONFIG_RUST"), "{c}");
    // A Rust kernel, built but not installed.
    w("/boot/config-6.12.9-rust", "CONFIG_RUST=y\n");
    w(
        "/var/lib/dkms/nvidia-peermem-rs/0.1.0/6.12.9-rust/x86_64/module/nvidia_peermem_rs.ko.xz",
        "",
    );
    let c = check_of(&root, "dkms_state");
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("dkms install nvidia-peermem-rs/0.1.0 -k 6.12.9-rust"),
        "{c}"
    );
    // Installed.
    w(
        "/lib/modules/6.12.9-rust/updates/dkms/nvidia_peermem_rs.ko.xz",
        "",
    );
    assert_eq!(check_of(&root, "dkms_state")["verdict"], "pass");
}

#[test]
fn doctor_systemd_unit_states() {
    let tree = FakeRoot::new();
    let root = tree.path();
    let w = |p: &str, t: &str| tree.write(p, t);
    assert_eq!(check_of(&root, "systemd_unit")["verdict"], "skip");
    w(
        "/usr/lib/systemd/system/nvidia-peermem-rs.service",
        "[Unit]\n",
    );
    w(
        "/systemctl_show.txt",
        "ActiveState=inactive\nConditionResult=yes\n",
    );
    assert_eq!(check_of(&root, "systemd_unit")["verdict"], "warn");
    w(
        "/etc/systemd/system/multi-user.target.wants/nvidia-peermem-rs.service",
        "",
    );
    w(
        "/systemctl_show.txt",
        "ActiveState=inactive\nConditionResult=no\n",
    );
    let c = check_of(&root, "systemd_unit");
    assert_eq!(c["verdict"], "warn", "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("skipped at boot"),
        "{c}"
    );
    w(
        "/systemctl_show.txt",
        "ActiveState=failed\nResult=exit-code\n",
    );
    let c = check_of(&root, "systemd_unit");
    assert_eq!(c["verdict"], "fail", "{c}");
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("journalctl -b -u nvidia-peermem-rs.service"),
        "{c}"
    );
    w(
        "/systemctl_show.txt",
        "ActiveState=active\nConditionResult=yes\n",
    );
    assert_eq!(check_of(&root, "systemd_unit")["verdict"], "pass");
}

#[test]
fn doctor_names_the_module_modprobe_nvidia_peermem_loads() {
    let tree = FakeRoot::new();
    let root = tree.path();
    let w = |p: &str, t: &str| tree.write(p, t);
    let k = "/lib/modules/6.12.9-rust";
    w("/proc/sys/kernel/osrelease", "6.12.9-rust\n");
    w(
        &format!("{k}/modules.dep"),
        "kernel/drivers/video/nvidia-peermem.ko:\n",
    );
    w(
        &format!("{k}/kernel/drivers/video/nvidia-peermem.ko"),
        "\0version=580.65.06\0parmtype=peerdirect_support:int\0",
    );
    let c = check_of(&root, "modprobe_target");
    assert_eq!(c["verdict"], "pass", "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("NVIDIA's module"),
        "{c}"
    );
    // depmod chose the drop-in in updates/dkms.
    w(
        &format!("{k}/modules.dep"),
        "updates/dkms/nvidia-peermem.ko.zst:\nkernel/drivers/video/nvidia.ko:\n",
    );
    w(
        &format!("{k}/updates/dkms/nvidia-peermem.ko.zst"),
        "\0version=0.1.0\0parmtype=coalesce_sg:bool\0",
    );
    let c = check_of(&root, "modprobe_target");
    assert_eq!(c["verdict"], "pass", "{c}");
    assert!(c["detail"].as_str().unwrap().contains("drop-in"), "{c}");
    assert_eq!(c["data"]["ours"], true, "{c}");
}

#[test]
fn doctor_bundle_collects_the_facts_and_no_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bundle.txt");
    let o = bin()
        .args([
            "doctor",
            "--no-cuda",
            "--root",
            &fixture("fail"),
            "--bundle",
        ])
        .arg(&file)
        .env("PEERMEM_TEST_SECRET", "hunter2-not-for-bundles")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "doctor's own exit status");
    let b = std::fs::read_to_string(&file).unwrap();
    for want in [
        "diagnostics bundle",
        "===== doctor\n[PASS] NVIDIA driver",
        "\"command\": \"doctor\"",
        "===== file /proc/driver/nvidia/version\nNVRM version",
        "===== parameters /sys/module/nvidia_peermem/parameters\n",
        "nvidia-peermem-rs: error: no MLNX_OFED/DOCA-OFED kernel tree found",
        "Unknown symbol ib_register_peer_memory_client",
        "===== command journalctl -b --no-pager -o cat -n 200 -u nvidia-peermem-rs.service\n(no journal.txt",
    ] {
        assert!(b.contains(want), "bundle lacks {want:?}:\n{b}");
    }
    assert!(
        !b.contains("hunter2"),
        "the environment leaked into the bundle"
    );
    // "-": the bundle on stdout, nothing else there.
    let o = run(&[
        "doctor",
        "--no-cuda",
        "--root",
        &fixture("pass"),
        "--bundle",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("peermem-check "), "{out}");
    assert!(
        !out.contains("doctor: "),
        "the human summary line went to stdout too"
    );
}

#[test]
fn doctor_finds_nccl_in_the_active_virtual_environment() {
    // An environment outside every usual place, active in doctor's shell.
    let t = FakeRoot::new();
    t.write(
        "/srv/envs/train/lib/python3.12/site-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA",
        "",
    );
    let root = t.path();
    let versions = |c: serde_json::Value| -> Vec<String> {
        c["data"]
            .as_array()
            .map(|a| a.iter().map(|i| i["version"].to_string()).collect())
            .unwrap_or_default()
    };
    let c = fake_root::doctor_check_env(&root, "nccl_version", &[]);
    assert!(versions(c.clone()).is_empty(), "{c}");
    let c = fake_root::doctor_check_env(
        &root,
        "nccl_version",
        &[("VIRTUAL_ENV", "/srv/envs/train/")],
    );
    assert_eq!(versions(c.clone()), ["\"2.23.4\""], "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("nvidia_nccl_cu12"),
        "{c}"
    );
}
