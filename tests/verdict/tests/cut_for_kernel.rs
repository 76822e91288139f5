//! tests/vm/cut-for-kernel.sh on staged kernel trees: what a kernel's
//! `.config` says decides the cut, and every line cut is a `cut` line the
//! verdict counts, never a line that vanishes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch folder of this test's own.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cut-for-kernel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the script on a kernel tree whose .config is `config` (None: no
/// .config), as kernel `id`: (exit status, stdout, stderr, out dir).
fn cut(name: &str, config: Option<&str>, id: &str) -> (bool, String, String, PathBuf) {
    let d = scratch(name);
    let kdir = d.join("kernel");
    std::fs::create_dir_all(&kdir).unwrap();
    if let Some(c) = config {
        std::fs::write(kdir.join(".config"), c).unwrap();
    }
    let out = d.join("out");
    let r = Command::new("bash")
        .arg(repo().join("tests/vm/cut-for-kernel.sh"))
        .arg(&kdir)
        .arg(&out)
        .arg(repo().join("tests/vm/suites/field-teeth.suite"))
        .arg(repo().join("tests/vm/suites/module.suite"))
        .arg(repo().join("tests/vm/suites/field-teeth-nvidia.suite"))
        .env("PEERMEM_VM_VERDICT", env!("CARGO_BIN_EXE_vm-verdict"))
        .env("PEERMEM_KERNEL", id)
        .output()
        .unwrap();
    (
        r.status.success(),
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
        out,
    )
}

fn primary() -> String {
    std::fs::read_to_string(repo().join("tests/kernel/kernels"))
        .unwrap()
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string()
}

fn lines_starting(text: &str, word: &str) -> usize {
    text.lines()
        .filter(|l| l.split_whitespace().next() == Some(word))
        .count()
}

#[test]
fn the_primary_kernel_with_kasan_runs_every_line() {
    let (ok, stdout, stderr, out) = cut("primary", Some("CONFIG_KASAN=y\n"), &primary());
    assert!(ok, "{stderr}");
    assert_eq!(stdout.lines().count(), 3);
    let orig = std::fs::read_to_string(repo().join("tests/vm/suites/field-teeth.suite")).unwrap();
    let got = std::fs::read_to_string(out.join("field-teeth.suite")).unwrap();
    assert_eq!(got, orig);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_kernel_without_kasan_turns_its_kasan_only_lines_into_skips() {
    // Any kernel other than the primary one, whatever its name: the
    // .config decides KASAN.
    let (ok, _, stderr, out) = cut(
        "nokasan",
        Some("# CONFIG_KASAN is not set\nCONFIG_KFENCE=y\n"),
        "some-other-kernel",
    );
    assert!(ok, "{stderr}");
    let orig = std::fs::read_to_string(repo().join("tests/vm/suites/field-teeth.suite")).unwrap();
    let got = std::fs::read_to_string(out.join("field-teeth.suite")).unwrap();
    // Every scenario line is still there, run or cut.
    assert_eq!(
        lines_starting(&orig, "scenario"),
        lines_starting(&got, "scenario") + lines_starting(&got, "cut")
    );
    assert!(got.contains("cut scenario \"this kernel has no KASAN"));
    assert!(got.contains("cut teeth \"this kernel has no KASAN"));
    let nv = std::fs::read_to_string(out.join("field-teeth-nvidia.suite")).unwrap();
    assert!(nv.contains("cut teeth \"NVIDIA's module is built for the primary kernel only\""));
    assert!(!got.contains("KASAN: slab"));
    assert!(
        stderr.contains("field-teeth: 4 lines whose only detector is KASAN skipped"),
        "{stderr}"
    );
    assert!(
        stderr.contains("field-teeth-nvidia: 3 runs of NVIDIA's module skipped"),
        "{stderr}"
    );
    // The verdict reads what the cut wrote.
    let r = Command::new(env!("CARGO_BIN_EXE_vm-verdict"))
        .args(["suite-field", "--suite"])
        .arg(out.join("field-teeth.suite"))
        .arg("timeout")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn a_tree_without_a_config_is_an_error() {
    let (ok, _, stderr, _) = cut("noconfig", None, &primary());
    assert!(!ok);
    assert!(stderr.contains("has no .config"), "{stderr}");
}
