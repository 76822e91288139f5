// SPDX-License-Identifier: GPL-2.0
//! From raw samples to figures: medians and spreads, the Rust client against
//! the reference client, and the issue's targets (reported, never asserted).

use serde_json::{json, Value};

use crate::results::{baseline_of, Results, PHASES};
use crate::stats::{loglog_slope, Summary};

/// Client overhead target: at most this share of the client's time, for
/// registrations of at least `OVERHEAD_MIN_SIZE`.
pub const OVERHEAD_TARGET: f64 = 0.10;
pub const OVERHEAD_MIN_SIZE: u64 = 2 << 20;
/// Memory target per live registration: 32 bytes per 64 KiB page + 256.
pub fn memory_target(gpu_pages: u64) -> u64 {
    32 * gpu_pages + 256
}
/// "Linear in GPU pages": from `LINEAR_MIN_SIZE` up, the least-squares line
/// client time = fixed + per_page * pages misses no size's median by more
/// than `LINEAR_TOLERANCE` of it. A fixed cost per registration does not
/// count against linearity. (Below 64 MiB the simulated provider's own
/// cost is not linear: it maps min(pages, 256) backing chunks.)
pub const LINEAR_TOLERANCE: f64 = 0.10;
pub const LINEAR_MIN_SIZE: u64 = 64 << 20;

/// Parity with the reference client (issue 15): the Rust client's cycle,
/// invalidation callback and memory at most the reference's, its throughput
/// at least the reference's. The ratios are ours / reference, so "met" is
/// `ratio <= PARITY` (throughput: `ratio >= PARITY`).
pub const PARITY: f64 = 1.00;

/// What a parity target compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ParityKind {
    /// Client time of the register + deregister cycle, per size.
    Cycle,
    /// Cycles per second of concurrent 64 KiB cycles, per thread count.
    Throughput,
    /// Free callback entry to return, per size.
    Invalidation,
    /// Client memory per live registration, per size.
    Memory,
}

impl ParityKind {
    pub fn name(self) -> &'static str {
        match self {
            ParityKind::Cycle => "cycle",
            ParityKind::Throughput => "throughput",
            ParityKind::Invalidation => "invalidation",
            ParityKind::Memory => "memory",
        }
    }

    /// Whether more is better (throughput) rather than less.
    pub fn higher_is_better(self) -> bool {
        self == ParityKind::Throughput
    }
}

/// One parity figure: `label` against `baseline` at `at` (a size, or a
/// thread count for throughput).
pub struct Parity {
    pub kind: ParityKind,
    pub label: String,
    pub baseline: String,
    pub at: u64,
    pub ratio: f64,
    pub met: bool,
}

impl Parity {
    fn new(kind: ParityKind, label: &str, baseline: &str, at: u64, ratio: f64) -> Self {
        let met = if kind.higher_is_better() {
            ratio >= PARITY
        } else {
            ratio <= PARITY
        };
        Parity {
            kind,
            label: label.to_string(),
            baseline: baseline.to_string(),
            at,
            ratio,
            met,
        }
    }
}

pub struct CycleRow {
    pub label: String,
    pub size: u64,
    pub pages: u64,
    pub scale: u64,
    pub sg: u64,
    pub client: Summary,
    pub cycle: Summary,
    pub reg: Summary,
    pub dereg: Summary,
    pub phases: Vec<(&'static str, Summary)>,
}

pub struct Comparison {
    pub label: String,
    pub baseline: String,
    pub size: u64,
    /// Medians of the in-kernel client time: ours / reference.
    pub ratio: f64,
    /// (ours - reference) / ours, of the in-kernel client time.
    pub overhead: f64,
    /// The same over the userspace-timed whole cycle (core + syscalls too).
    pub cycle_overhead: f64,
    /// The target applies at this size; and whether it is met.
    pub target_applies: bool,
    pub met: bool,
}

pub struct Linearity {
    pub label: String,
    /// Log-log slope over the sizes from `LINEAR_MIN_SIZE` (for reference:
    /// it is below 1 while the fixed cost still weighs).
    pub slope: Option<f64>,
    /// The fit from `LINEAR_MIN_SIZE`: (fixed ns, ns per page, largest
    /// relative residual).
    pub fit: Option<(f64, f64, f64)>,
    /// (size, extra client ns per extra GPU page from the previous size).
    pub ns_per_page: Vec<(u64, f64)>,
    pub met: Option<bool>,
}

pub struct InvRow {
    pub label: String,
    pub size: u64,
    pub iters: u64,
    pub callbacks: u64,
    pub invalidated: u64,
    pub callback: Option<Summary>,
    pub free: Summary,
}

pub struct TpRow {
    pub label: String,
    pub threads: u64,
    pub rate: Summary,
}

pub struct MemRow {
    pub label: String,
    pub size: u64,
    pub pages: u64,
    pub scale: u64,
    pub live: u64,
    pub sg: u64,
    pub client: u64,
    pub provider: u64,
    pub core: u64,
    pub target: u64,
    pub met: bool,
    pub left_after_dereg: u64,
    pub trace_lost: u64,
    pub without_stack: u64,
}

pub struct Analysis {
    pub labels: Vec<String>,
    /// The headline (issue 33): each client against NVIDIA's own
    /// nvidia-peermem (label `nvidia/<mode>`) in the same mode.
    pub vs_nvidia: Vec<VsNvidia>,
    pub cycles: Vec<CycleRow>,
    pub comparisons: Vec<Comparison>,
    pub linearity: Vec<Linearity>,
    pub invalidations: Vec<InvRow>,
    pub throughputs: Vec<TpRow>,
    pub memory: Vec<MemRow>,
    pub parity: Vec<Parity>,
    pub skipped: usize,
}

/// One ratio against NVIDIA's module: `label`'s median over
/// `nvidia/<mode>`'s, for one figure at one size (or thread count).
#[derive(Debug, Clone, PartialEq)]
pub struct VsNvidia {
    /// `whole` (a register + deregister cycle timed from userspace: the
    /// core, the client and the provider), `client` (the client's share of
    /// it: the core's in-kernel time around each call into the client,
    /// the provider calls the client makes included), `invalidation` (the
    /// free callback), `memory` (client bytes per live registration).
    /// Throughput is not among them: under icount the vCPUs take turns on
    /// one emulation thread, so it measures no parallelism.
    pub kind: &'static str,
    pub label: String,
    pub baseline: String,
    /// Size in bytes.
    pub at: u64,
    /// The two medians (ns, or bytes for memory) and their ratio.
    pub value: f64,
    pub base: f64,
    pub ratio: f64,
    /// Samples behind each median (ours, NVIDIA's).
    pub n: (usize, usize),
}

/// NVIDIA's module in the mode of `label` (`rust/invalidating+x=1` ->
/// `nvidia/invalidating`), if it ran; None for NVIDIA's own rows.
pub fn nvidia_baseline(label: &str, labels: &[String]) -> Option<String> {
    let (client, rest) = label.split_once('/')?;
    if client == "nvidia" {
        return None;
    }
    let base = format!("nvidia/{}", rest.split('+').next().unwrap_or(rest));
    labels.contains(&base).then_some(base)
}

fn vs_nvidia(
    labels: &[String],
    cycles: &[CycleRow],
    invalidations: &[InvRow],
    memory: &[MemRow],
) -> Vec<VsNvidia> {
    let mut out = ratios(
        "whole",
        cycles,
        labels,
        |c| &c.label,
        |c| c.size,
        |c| Some((c.cycle.median, c.cycle.n)),
    );
    out.extend(ratios(
        "client",
        cycles,
        labels,
        |c| &c.label,
        |c| c.size,
        |c| Some((c.client.median, c.client.n)),
    ));
    out.extend(ratios(
        "invalidation",
        invalidations,
        labels,
        |i| &i.label,
        |i| i.size,
        |i| {
            let c = i.callback?;
            Some((c.median, c.n))
        },
    ));
    out.extend(ratios(
        "memory",
        memory,
        labels,
        |m| &m.label,
        |m| m.size,
        |m| Some((m.client.max(1) as f64, 1)),
    ));
    out
}

/// Each row of `rows` over NVIDIA's row in its mode at the same size,
/// where both have a `value` (median, samples).
fn ratios<R>(
    kind: &'static str,
    rows: &[R],
    labels: &[String],
    label: impl Fn(&R) -> &String,
    at: impl Fn(&R) -> u64,
    value: impl Fn(&R) -> Option<(f64, usize)>,
) -> Vec<VsNvidia> {
    rows.iter()
        .filter_map(|r| {
            let baseline = nvidia_baseline(label(r), labels)?;
            let b = rows
                .iter()
                .find(|b| *label(b) == baseline && at(b) == at(r))?;
            let (v, n) = value(r)?;
            let (bv, bn) = value(b)?;
            Some(VsNvidia {
                kind,
                label: label(r).clone(),
                baseline,
                at: at(r),
                value: v,
                base: bv,
                ratio: v / bv,
                n: (n, bn),
            })
        })
        .collect()
}

/// The parity figures of the Rust rows that have a reference row. Rows
/// with extra module parameters (`rust/persistent+coalesce_sg=1`) are
/// options, not the default client: they are left out.
fn parity(
    comparisons: &[Comparison],
    invalidations: &[InvRow],
    throughputs: &[TpRow],
    memory: &[MemRow],
) -> Vec<Parity> {
    // (NVIDIA's own rows, nvidia/..., have the reference as baseline too:
    // the targets are the Rust module's)
    let default_client = |l: &str| !l.contains('+') && !l.starts_with("nvidia/");
    let mut out: Vec<Parity> = comparisons
        .iter()
        .filter(|c| default_client(&c.label))
        .map(|c| Parity::new(ParityKind::Cycle, &c.label, &c.baseline, c.size, c.ratio))
        .collect();
    for t in throughputs.iter().filter(|t| default_client(&t.label)) {
        let Some(base) = baseline_of(&t.label) else {
            continue;
        };
        if let Some(b) = throughputs
            .iter()
            .find(|b| b.label == base && b.threads == t.threads)
        {
            let r = t.rate.median / b.rate.median;
            out.push(Parity::new(
                ParityKind::Throughput,
                &t.label,
                &base,
                t.threads,
                r,
            ));
        }
    }
    for i in invalidations.iter().filter(|i| default_client(&i.label)) {
        let Some(base) = baseline_of(&i.label) else {
            continue;
        };
        let Some(b) = invalidations
            .iter()
            .find(|b| b.label == base && b.size == i.size)
        else {
            continue;
        };
        if let (Some(ours), Some(theirs)) = (i.callback, b.callback) {
            let r = ours.median / theirs.median;
            out.push(Parity::new(
                ParityKind::Invalidation,
                &i.label,
                &base,
                i.size,
                r,
            ));
        }
    }
    for m in memory.iter().filter(|m| default_client(&m.label)) {
        let Some(base) = baseline_of(&m.label) else {
            continue;
        };
        if let Some(b) = memory.iter().find(|b| b.label == base && b.size == m.size) {
            let r = m.client as f64 / b.client.max(1) as f64;
            out.push(Parity::new(ParityKind::Memory, &m.label, &base, m.size, r));
        }
    }
    out
}

/// Least-squares line y = a + b x through at least 3 points; returns
/// (a, b, largest |residual| / y).
pub fn linear_fit(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = sxy / sxx;
    let a = my - b * mx;
    let worst = points
        .iter()
        .map(|(x, y)| ((a + b * x) - y).abs() / y.abs().max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max);
    Some((a, b, worst))
}

fn sum(v: &[f64]) -> Summary {
    Summary::of(v).unwrap_or(Summary {
        n: 0,
        median: f64::NAN,
        p25: f64::NAN,
        p75: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    })
}

impl Analysis {
    pub fn new(r: &Results) -> Analysis {
        let cycles: Vec<CycleRow> = r
            .cycles
            .iter()
            .map(|c| CycleRow {
                label: c.head.label.clone(),
                size: c.head.size,
                pages: c.head.gpu_pages,
                scale: c.head.scale,
                sg: c.sg_entries,
                client: sum(&c.client_ns),
                cycle: sum(&c.cycle_ns()),
                reg: sum(&c.reg_ns),
                dereg: sum(&c.dereg_ns),
                phases: PHASES
                    .iter()
                    .filter_map(|p| c.phases.get(*p).map(|s| (*p, sum(s))))
                    .collect(),
            })
            .collect();

        let mut comparisons = Vec::new();
        for c in &cycles {
            let Some(base) = baseline_of(&c.label) else {
                continue;
            };
            let Some(b) = cycles.iter().find(|b| b.label == base && b.size == c.size) else {
                continue;
            };
            let overhead = (c.client.median - b.client.median) / c.client.median;
            let applies = c.size >= OVERHEAD_MIN_SIZE;
            comparisons.push(Comparison {
                label: c.label.clone(),
                baseline: base,
                size: c.size,
                ratio: c.client.median / b.client.median,
                overhead,
                cycle_overhead: (c.cycle.median - b.cycle.median) / c.cycle.median,
                target_applies: applies,
                met: overhead <= OVERHEAD_TARGET,
            });
        }

        let labels = r.labels();
        let linearity = labels
            .iter()
            .filter_map(|l| {
                let rows: Vec<&CycleRow> = cycles.iter().filter(|c| &c.label == l).collect();
                if rows.is_empty() {
                    return None;
                }
                let pts: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|c| c.size >= LINEAR_MIN_SIZE)
                    .map(|c| (c.pages as f64, c.client.median))
                    .collect();
                let slope = loglog_slope(&pts);
                let mut sorted = rows.clone();
                sorted.sort_by_key(|c| c.size);
                let ns_per_page: Vec<(u64, f64)> = sorted
                    .windows(2)
                    .filter(|w| w[1].pages > w[0].pages)
                    .map(|w| {
                        let dt = w[1].client.median - w[0].client.median;
                        (w[1].size, dt / (w[1].pages - w[0].pages) as f64)
                    })
                    .collect();
                let fit = linear_fit(&pts);
                Some(Linearity {
                    label: l.clone(),
                    slope,
                    fit,
                    ns_per_page,
                    met: fit.map(|f| f.2 <= LINEAR_TOLERANCE),
                })
            })
            .collect();

        let invalidations: Vec<InvRow> = r
            .invalidations
            .iter()
            .map(|i| InvRow {
                label: i.head.label.clone(),
                size: i.head.size,
                iters: i.iters,
                callbacks: i.callbacks,
                invalidated: i.mrs_invalidated,
                callback: Summary::of(&i.callback_ns),
                free: sum(&i.free_ns),
            })
            .collect();

        let throughputs: Vec<TpRow> = r
            .throughputs
            .iter()
            .map(|t| TpRow {
                label: t.head.label.clone(),
                threads: t.threads,
                rate: sum(&t.cycles_per_s),
            })
            .collect();

        let memory: Vec<MemRow> = r
            .memory
            .iter()
            .map(|m| {
                let owner = |o: &str| m.owners.get(o).map_or(0, |x| x.bytes_per_reg);
                let target = memory_target(m.head.gpu_pages);
                MemRow {
                    label: m.head.label.clone(),
                    size: m.head.size,
                    pages: m.head.gpu_pages,
                    scale: m.head.scale,
                    live: m.live,
                    sg: m.sg_entries,
                    client: m.client_bytes_per_reg,
                    provider: owner("provider"),
                    core: owner("core"),
                    target,
                    met: m.client_bytes_per_reg <= target,
                    left_after_dereg: m.owners.get("client").map_or(0, |x| x.left_after_dereg),
                    trace_lost: m.trace_lost,
                    without_stack: m.allocs_without_stack,
                }
            })
            .collect();

        let parity = parity(&comparisons, &invalidations, &throughputs, &memory);
        let vs_nvidia = vs_nvidia(&labels, &cycles, &invalidations, &memory);
        Analysis {
            labels,
            vs_nvidia,
            cycles,
            comparisons,
            linearity,
            invalidations,
            throughputs,
            memory,
            parity,
            skipped: r.skipped.len(),
        }
    }

    /// Whether every parity target measured is met (None: none measured).
    pub fn parity_met(&self) -> Option<bool> {
        (!self.parity.is_empty()).then(|| self.parity.iter().all(|p| p.met))
    }

    /// The memory row of `label` at `size`.
    pub fn mem(&self, label: &str, size: u64) -> Option<&MemRow> {
        self.memory
            .iter()
            .find(|m| m.label == label && m.size == size)
    }

    pub fn to_json(&self, meta: Value) -> Value {
        let cycles: Vec<Value> = self
            .cycles
            .iter()
            .map(|c| {
                let phases: serde_json::Map<String, Value> = c
                    .phases
                    .iter()
                    .map(|(p, s)| (p.to_string(), s.to_json()))
                    .collect();
                json!({
                    "label": c.label, "size": c.size, "gpu_pages": c.pages,
                    "scale": c.scale, "sg_entries": c.sg,
                    "client_ns": c.client.to_json(), "cycle_ns": c.cycle.to_json(),
                    "reg_ns": c.reg.to_json(), "dereg_ns": c.dereg.to_json(),
                    "phases_ns": phases,
                })
            })
            .collect();
        let comparisons: Vec<Value> = self
            .comparisons
            .iter()
            .map(|c| {
                json!({
                    "label": c.label, "baseline": c.baseline, "size": c.size,
                    "client_time_ratio": c.ratio, "overhead_share": c.overhead,
                    "cycle_overhead_share": c.cycle_overhead,
                    "target": OVERHEAD_TARGET, "target_applies": c.target_applies,
                    "target_met": c.met,
                })
            })
            .collect();
        let linearity: Vec<Value> = self
            .linearity
            .iter()
            .map(|l| {
                json!({
                    "label": l.label, "loglog_slope": l.slope, "from_size": LINEAR_MIN_SIZE,
                    "fit_fixed_ns": l.fit.map(|f| f.0),
                    "fit_ns_per_gpu_page": l.fit.map(|f| f.1),
                    "fit_max_relative_residual": l.fit.map(|f| f.2),
                    "tolerance": LINEAR_TOLERANCE, "target_met": l.met,
                    "marginal_client_ns_per_gpu_page": l.ns_per_page.iter()
                        .map(|(s, n)| json!({"size": s, "ns": n})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let inv: Vec<Value> = self
            .invalidations
            .iter()
            .map(|i| {
                json!({
                    "label": i.label, "size": i.size, "iters": i.iters,
                    "callbacks": i.callbacks, "mrs_invalidated": i.invalidated,
                    "callback_ns": i.callback.map(|s| s.to_json()),
                    "gpu_free_ns": i.free.to_json(),
                })
            })
            .collect();
        let tp: Vec<Value> = self
            .throughputs
            .iter()
            .map(|t| {
                json!({
                    "label": t.label, "threads": t.threads,
                    "cycles_per_s": t.rate.to_json(),
                })
            })
            .collect();
        let mem: Vec<Value> = self
            .memory
            .iter()
            .map(|m| {
                json!({
                    "label": m.label, "size": m.size, "gpu_pages": m.pages,
                    "scale": m.scale, "live": m.live, "sg_entries": m.sg,
                    "client_bytes_per_reg": m.client, "provider_bytes_per_reg": m.provider,
                    "core_bytes_per_reg": m.core, "target_bytes": m.target,
                    "target_met": m.met, "client_objects_left_after_dereg": m.left_after_dereg,
                    "trace_lost_events": m.trace_lost, "allocs_without_stack": m.without_stack,
                })
            })
            .collect();
        let parity: Vec<Value> = self
            .parity
            .iter()
            .map(|p| {
                json!({
                    "kind": p.kind.name(), "label": p.label, "baseline": p.baseline,
                    (if p.kind == ParityKind::Throughput { "threads" } else { "size" }): p.at,
                    "ratio": p.ratio,
                    "target": if p.kind.higher_is_better() { ">= 1.00" } else { "<= 1.00" },
                    "target_met": p.met,
                })
            })
            .collect();
        let vs_nvidia: Vec<Value> = self
            .vs_nvidia
            .iter()
            .map(|v| {
                json!({
                    "kind": v.kind, "label": v.label, "baseline": v.baseline,
                    "size": v.at, "median": v.value, "baseline_median": v.base,
                    "ratio": v.ratio, "n": v.n.0, "baseline_n": v.n.1,
                })
            })
            .collect();
        json!({
            "meta": meta,
            "labels": self.labels,
            "vs_nvidia": vs_nvidia,
            "parity": parity,
            "parity_met": self.parity_met(),
            "cycle": cycles,
            "comparisons": comparisons,
            "linearity": linearity,
            "invalidate": inv,
            "throughput": tp,
            "memory": mem,
            "skipped_lines": self.skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nvidia_is_the_baseline_of_every_other_client_in_its_mode() {
        let labels: Vec<String> = [
            "rust/invalidating",
            "ref/invalidating",
            "nvidia/invalidating",
            "rust/persistent",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let b = |l: &str| super::nvidia_baseline(l, &labels);
        assert_eq!(
            b("rust/invalidating").as_deref(),
            Some("nvidia/invalidating")
        );
        assert_eq!(
            b("rust/invalidating+coalesce_sg=1").as_deref(),
            Some("nvidia/invalidating")
        );
        assert_eq!(
            b("ref/invalidating").as_deref(),
            Some("nvidia/invalidating")
        );
        assert_eq!(b("nvidia/invalidating"), None);
        // no NVIDIA row in that mode: no headline
        assert_eq!(b("rust/persistent"), None);
    }

    use super::*;

    fn cycle(label: &str, size: u64, ns: f64) -> String {
        let pages = size / 65536;
        format!(
            r#"BENCH-RESULT {{"kind":"cycle","label":"{label}","size":{size},"gpu_pages":{pages},"scale":0,"sg_entries":{pages},"iters":3,"reg_ns":[{ns},{ns},{ns}],"dereg_ns":[1,1,1],"client_ns":[{ns},{ns},{ns}],"phases":{{"acquire":[1,1,1]}}}}"#
        )
    }

    #[test]
    fn compares_against_the_reference() {
        let text = [
            cycle("rust/persistent", 2 << 20, 110.0),
            cycle("ref/persistent", 2 << 20, 100.0),
            cycle("rust/persistent", 64 << 20, 3200.0),
            cycle("ref/persistent", 64 << 20, 3200.0),
        ]
        .join("\n");
        let a = Analysis::new(&Results::parse(&text));
        assert_eq!(a.comparisons.len(), 2);
        let c = &a.comparisons[0];
        assert!((c.ratio - 1.1).abs() < 1e-9);
        assert!((c.overhead - 10.0 / 110.0).abs() < 1e-9);
        assert!(c.met && c.target_applies);
        let lin = a
            .linearity
            .iter()
            .find(|l| l.label == "rust/persistent")
            .unwrap();
        // one size from 64 MiB: no slope; marginal cost (3200-110)/(1024-32)
        assert_eq!(lin.slope, None);
        assert!((lin.ns_per_page[0].1 - 3090.0 / 992.0).abs() < 1e-9);
        let j = a.to_json(json!({}));
        assert_eq!(j["comparisons"][1]["overhead_share"], 0.0);
    }

    #[test]
    fn fits_lines() {
        let pts = [(1.0, 12.0), (10.0, 30.0), (100.0, 210.0)];
        let (a, b, worst) = linear_fit(&pts).unwrap();
        assert!((a - 10.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9 && worst < 1e-9);
        assert!(linear_fit(&pts[..2]).is_none());
        let bent = [(1.0, 10.0), (10.0, 100.0), (100.0, 110.0)];
        assert!(linear_fit(&bent).unwrap().2 > 0.2);
    }

    fn memory(label: &str, size: u64, per_reg: u64) -> String {
        let pages = size / 65536;
        format!(
            r#"BENCH-RESULT {{"kind":"memory","label":"{label}","size":{size},"gpu_pages":{pages},"scale":0,"live":4,"sg_entries":1,"client_bytes_per_reg":{per_reg},"client_objects_per_reg_x100":200,"trace_events":8,"trace_lost":0,"allocs_without_stack":0,"owners":{{}}}}"#
        )
    }

    #[test]
    fn memory_is_compared_with_nvidia_in_the_same_mode() {
        let text = [
            memory("rust/invalidating", 65536, 160),
            memory("nvidia/invalidating", 65536, 128),
            memory("rust/persistent", 65536, 160),
        ]
        .join("\n");
        let a = Analysis::new(&Results::parse(&text));
        let m: Vec<_> = a.vs_nvidia.iter().filter(|v| v.kind == "memory").collect();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].label, "rust/invalidating");
        assert!((m[0].ratio - 1.25).abs() < 1e-9);
    }

    #[test]
    fn whole_cycle_and_client_share_against_nvidia() {
        let text = [
            cycle("rust/persistent", 65536, 99.0),
            cycle("nvidia/persistent", 65536, 199.0),
            cycle("ref/invalidating", 65536, 99.0),
        ]
        .join("\n");
        let a = Analysis::new(&Results::parse(&text));
        let get = |kind: &str| {
            let v: Vec<_> = a.vs_nvidia.iter().filter(|v| v.kind == kind).collect();
            assert_eq!(v.len(), 1, "{kind}");
            v[0].clone()
        };
        // whole = reg + dereg (the helper's dereg is 1 ns)
        let w = get("whole");
        assert_eq!(w.label, "rust/persistent");
        assert!((w.ratio - 0.5).abs() < 1e-9);
        assert_eq!((w.value, w.base, w.n), (100.0, 200.0, (3, 3)));
        let c = get("client");
        assert!((c.ratio - 99.0 / 199.0).abs() < 1e-9);
        assert!(a.vs_nvidia.iter().all(|v| v.kind != "throughput"));
    }

    #[test]
    fn memory_targets() {
        assert_eq!(memory_target(1), 288);
        assert_eq!(memory_target(32), 1280);
    }
}
