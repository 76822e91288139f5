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
