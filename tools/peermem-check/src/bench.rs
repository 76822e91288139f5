// SPDX-License-Identifier: GPL-2.0
//! Bench results (shared by the real and simulated backends): statistics,
//! the JSON document, the terminal table, progress bars.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Summary of repeated timings, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stats {
    /// Statistics of `samples`; `None` when empty.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| {
            let pos = p * (v.len() - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
        };
        Some(Self {
            n: v.len(),
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
            min: v[0],
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        })
    }

    /// Statistics of durations, in nanoseconds.
    pub fn of_durations(d: &[Duration]) -> Option<Self> {
        let ns: Vec<f64> = d.iter().map(|x| x.as_nanos() as f64).collect();
        Self::of(&ns)
    }
}

/// Figures of one size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SizeResult {
    pub size: u64,
    pub iterations: u64,
    /// Registration (ibv_reg_mr / mr_reg) latency.
    pub reg_ns: Option<Stats>,
    /// Deregistration latency.
    pub dereg_ns: Option<Stats>,
    /// Mean in-kernel time per phase (sim backend), ns.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases_ns: BTreeMap<String, f64>,
    /// Host to GPU write bandwidth straight into GPU memory (RDMA WRITE into
    /// the GPU MR), MiB/s (median over iterations).
    pub direct_mib_s: Option<f64>,
    /// The same bytes through a host bounce buffer (RDMA WRITE into host
    /// memory, then a copy to the GPU), MiB/s.
    pub bounce_mib_s: Option<f64>,
    /// The host to GPU copy leg alone (cuMemcpyHtoD / gpu_write), MiB/s.
    pub copy_mib_s: Option<f64>,
}

/// A whole bench run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchResult {
    pub backend: String,
    /// What ran it (GPU, NIC, or "simulated stack").
    pub platform: String,
    pub results: Vec<SizeResult>,
    /// How direct and bounce are measured on this backend.
    pub method: String,
}

/// Loads a bench JSON (the document `bench --json` prints, or bench.json).
pub fn load(path: &Path) -> Result<BenchResult, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let inner = v.get("bench").cloned().unwrap_or(v);
    let b = serde_json::from_value(inner)
        .map_err(|e| format!("{}: not a bench result: {e}", path.display()))?;
    Ok(b)
}

/// Writes the result as pretty JSON.
pub fn save(b: &BenchResult, path: &Path) -> Result<(), Error> {
    let s = serde_json::to_string_pretty(b).map_err(|e| e.to_string())?;
    std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// MiB/s of `bytes` moved in `d`.
pub fn mib_s(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return 0.0;
    }
    bytes as f64 / (1024.0 * 1024.0) / s
}

/// Human size: 64K, 2M, 1G.
pub fn size_label(n: u64) -> String {
    for (shift, suf) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{suf}", n >> shift);
        }
    }
    n.to_string()
}

fn opt(v: Option<f64>, div: f64) -> String {
    v.map_or("-".to_string(), |x| format!("{:.1}", x / div))
}

/// The terminal table.
pub fn table(b: &BenchResult) -> Vec<String> {
    let mut out = vec![
        format!("bench ({}): {}", b.backend, b.platform),
        format!("method: {}", b.method),
        format!(
            "{:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            "size",
            "iters",
            "reg us",
            "reg p90",
            "dereg us",
            "dereg p90",
            "direct MiB/s",
            "bounce MiB/s",
            "copy MiB/s"
        ),
    ];
    for r in &b.results {
        out.push(format!(
            "{:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            size_label(r.size),
            r.iterations,
            opt(r.reg_ns.map(|s| s.median), 1000.0),
            opt(r.reg_ns.map(|s| s.p90), 1000.0),
            opt(r.dereg_ns.map(|s| s.median), 1000.0),
            opt(r.dereg_ns.map(|s| s.p90), 1000.0),
            opt(r.direct_mib_s, 1.0),
            opt(r.bounce_mib_s, 1.0),
            opt(r.copy_mib_s, 1.0),
        ));
        if !r.phases_ns.is_empty() {
            let p: Vec<String> = r
                .phases_ns
                .iter()
                .map(|(k, v)| format!("{k}={:.1}us", v / 1000.0))
                .collect();
            out.push(format!(
                "{:>6} phases (mean, in kernel): {}",
                "",
                p.join(" ")
            ));
        }
        if let (Some(d), Some(b)) = (r.direct_mib_s, r.bounce_mib_s) {
            if b > 0.0 {
                out.push(format!("{:>6} direct/bounce = {:.2}x", "", d / b));
            }
        }
    }
    if b.backend == "real" && b.results.iter().any(|r| r.direct_mib_s.is_some()) {
        out.push(DIRECT_NOTE.to_string());
    }
    out
}

/// What the "direct" column is, printed under every table: it is not a
/// link-bandwidth figure.
pub const DIRECT_NOTE: &str = "direct: one RDMA WRITE at a time, each completion waited for, over a loopback QP on one port: a per-transfer figure for comparing direct with bounce on this node, NOT comparable with ib_write_bw (many writes in flight between two ports)";

/// A progress bar on stderr; hidden in JSON mode, when stderr is not a
/// terminal (indicatif's own check), and when TERM is unset or `dumb` (a
/// serial console such as the test VM's, where redraws only flood the log).
pub fn progress(total: u64, json: bool) -> ProgressBar {
    let term = std::env::var("TERM").unwrap_or_default();
    if json
        || term.is_empty()
        || term == "dumb"
        || std::env::var_os("PEERMEM_CHECK_NO_PROGRESS").is_some()
    {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats() {
        let s = Stats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert_eq!(s.mean, 3.0);
        assert!((s.p10 - 1.4).abs() < 1e-9);
        assert!(Stats::of(&[]).is_none());
        assert_eq!(Stats::of(&[7.0]).unwrap().p90, 7.0);
    }

    #[test]
    fn labels_and_rates() {
        assert_eq!(size_label(64 << 10), "64K");
        assert_eq!(size_label(2 << 20), "2M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
        assert!((mib_s(1 << 20, Duration::from_millis(500)) - 2.0).abs() < 1e-9);
        assert_eq!(mib_s(1, Duration::ZERO), 0.0);
    }

    #[test]
    fn json_round_trip() {
        let b = BenchResult {
            backend: "sim".into(),
            platform: "test".into(),
            method: "m".into(),
            results: vec![SizeResult {
                size: 65536,
                iterations: 3,
                reg_ns: Stats::of(&[1.0, 2.0, 3.0]),
                direct_mib_s: Some(10.0),
                ..Default::default()
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.json");
        save(&b, &p).unwrap();
        let back = load(&p).unwrap();
        assert_eq!(back.results[0].size, 65536);
        assert_eq!(back.results[0].reg_ns.unwrap().median, 2.0);
        // The full `bench --json` document (result under "bench") loads too.
        let doc = serde_json::json!({"command": "bench", "bench": b});
        std::fs::write(&p, doc.to_string()).unwrap();
        assert_eq!(load(&p).unwrap().platform, "test");
        std::fs::write(&p, "{").unwrap();
        assert!(load(&p).is_err());
        assert!(table(&back).len() >= 4);
        // The real backend's direct figure says what it is not.
        assert!(!table(&back).iter().any(|l| l.contains("ib_write_bw")));
        let real = BenchResult {
            backend: "real".into(),
            ..back.clone()
        };
        assert_eq!(table(&real).last().map(String::as_str), Some(DIRECT_NOTE));
    }
}
