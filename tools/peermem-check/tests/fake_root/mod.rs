// SPDX-License-Identifier: GPL-2.0
//! A fake root for `--root`, shared by the integration tests.

/// An empty fake root (`--root`) for doctor, filled file by file and
/// removed when dropped.
pub struct FakeRoot(pub tempfile::TempDir);

impl FakeRoot {
    pub fn new() -> Self {
        FakeRoot(tempfile::tempdir().unwrap())
    }

    /// Writes `text` at the absolute path `p` inside the fake root.
    pub fn write(&self, p: &str, text: &str) {
        let f = self.0.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }

    /// The fake root's path, as `--root` takes it.
    pub fn path(&self) -> String {
        self.0.path().to_str().unwrap().to_string()
    }
}

/// Check `id` of `peermem-check doctor --json --no-cuda --root ROOT`.
pub fn doctor_check(root: &str, id: &str) -> serde_json::Value {
    doctor_check_env(root, id, &[])
}

/// The same, doctor run with the environment variables `env` added.
pub fn doctor_check_env(root: &str, id: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_peermem-check"))
        .args(["doctor", "--json", "--no-cuda", "--root", root])
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor's output is not JSON ({e}): {o:?}"));
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}: {v}"))
        .clone()
}
