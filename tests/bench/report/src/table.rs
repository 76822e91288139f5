// SPDX-License-Identifier: GPL-2.0
//! The terminal table.

use std::fmt::Write;

use crate::analysis::{
    Analysis, ParityKind, LINEAR_MIN_SIZE, LINEAR_TOLERANCE, OVERHEAD_MIN_SIZE, OVERHEAD_TARGET,
};
use crate::results::baseline_of;
use crate::stats::Summary;

/// `64K`, `2M`, `16G`.
pub fn size_name(b: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (u, n) in UNITS {
        if b >= u && b.is_multiple_of(u) {
            return format!("{}{n}", b / u);
        }
    }
    format!("{b}")
}

/// Nanoseconds in a readable unit.
pub fn time(ns: f64) -> String {
    if ns.is_nan() {
        "-".into()
    } else if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Median and interquartile range in percent of the median.
fn med(s: &Summary) -> String {
    format!("{} ±{:.0}%", time(s.median), s.iqr_pct() / 2.0)
}

fn bytes(b: u64) -> String {
    if b >= 10 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else if b >= 10 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// What the kernel the figures were measured on is, from meta.json's
/// `kernel_debug` (the debug options it has; none on the production one).
pub fn kernel_kind(kernel_debug: Option<&str>) -> String {
    match kernel_debug {
        None => "a kernel of unknown configuration".into(),
        Some("") => "a production-config kernel (no KASAN, lockdep, kmemleak, DMA-API \
                     debugging, failslab)"
            .into(),
        Some(d) => format!("a debug kernel ({d})"),
    }
}

/// The table; `clock` is how the guest kept time (`icount` or `wall`),
/// `kernel` what [`kernel_kind`] says of the kernel.
pub fn render(a: &Analysis, clock: &str, kernel: &str) -> String {
    let mut o = String::new();
    let w = &mut o;
    let clock_note = match clock {
        "icount" => {
            "Clock: QEMU -icount shift=0 (guest time = 1 ns per emulated instruction): \
             times count the instructions executed, whatever the host's load."
        }
        "wall" => "Clock: the host's wall clock (plain TCG): times include the host's load.",
        _ => "Clock: unknown.",
    };
    let _ = writeln!(
        w,
        "All times measured in a TCG-emulated VM on {kernel}: compare ratios, not absolute \
         values.\n{clock_note}\n\
         Figures are medians; ±N% is half the interquartile range relative to the median."
    );

    if !a.vs_nvidia.is_empty() {
        let _ = writeln!(
            w,
            "\n== Headline: against NVIDIA's own nvidia-peermem (label nvidia/...) in the same \
             mode. whole = register + deregister timed from userspace (core, client, provider); \
             client = its share inside the client (provider calls it makes included); \
             invalidation = the free callback; memory = client bytes per live registration. \
             Ratio of medians, below 1.00 less than NVIDIA's; n = samples (ours/NVIDIA's)"
        );
        let _ = writeln!(
            w,
            "{:<13} {:<34} {:>6} {:>14} {:>14} {:>9} {:>9}",
            "figure", "client/mode", "at", "ours", "NVIDIA", "vs NVIDIA", "n"
        );
        for v in &a.vs_nvidia {
            let (ours, theirs) = if v.kind == "memory" {
                (format!("{} B", v.value), format!("{} B", v.base))
            } else {
                (time(v.value), time(v.base))
            };
            let _ = writeln!(
                w,
                "{:<13} {:<34} {:>6} {:>14} {:>14} {:>9} {:>9}",
                v.kind,
                v.label,
                size_name(v.at),
                ours,
                theirs,
                format!("x{:.4}", v.ratio),
                format!("{}/{}", v.n.0, v.n.1)
            );
        }
    }

    if !a.cycles.is_empty() {
        let _ = writeln!(
            w,
            "\n== Register + deregister cycle: time inside the client (sum of the core's in-kernel \
             ktime around each call), and the whole cycle timed from userspace"
        );
        let _ = writeln!(
            w,
            "{:<34} {:>5} {:>7} {:>6} {:>16} {:>16} {:>12} {:>8} {:>8}",
            "client/mode",
            "size",
            "pages",
            "sg",
            "client time",
            "whole cycle",
            "per page",
            "vs ref",
            "Δ/client"
        );
        for c in &a.cycles {
            let cmp = a
                .comparisons
                .iter()
                .find(|x| x.label == c.label && x.size == c.size);
            let (ratio, ovh) = match cmp {
                Some(x) => (format!("x{:.2}", x.ratio), pct(x.overhead)),
                None => ("".into(), "".into()),
            };
            let scale = if c.scale > 0 && c.pages > c.scale {
                "*"
            } else {
                ""
            };
            let _ = writeln!(
                w,
                "{:<34} {:>5} {:>7} {:>6} {:>16} {:>16} {:>12} {:>8} {:>8}",
                c.label,
                format!("{}{scale}", size_name(c.size)),
                c.pages,
                c.sg,
                med(&c.client),
                med(&c.cycle),
                time(c.client.median / c.pages.max(1) as f64),
                ratio,
                ovh
            );
        }
        let _ = writeln!(
            w,
            "(* the provider's scale mode: these GPU pages alias its 256 backing chunks of 64 KiB)"
        );

        let _ = writeln!(w, "\n== Per phase (medians)");
        let _ = write!(w, "{:<34} {:>5}", "client/mode", "size");
        for (p, _) in a.cycles[0].phases.iter() {
            let _ = write!(w, " {:>13}", p);
        }
        let _ = writeln!(w);
        for c in &a.cycles {
            let _ = write!(w, "{:<34} {:>5}", c.label, size_name(c.size));
            for (_, s) in &c.phases {
                let _ = write!(w, " {:>13}", time(s.median));
            }
            let _ = writeln!(w);
        }
    }

    if !a.invalidations.is_empty() {
        let _ = writeln!(
            w,
            "\n== Invalidation: cudaFree of a registered buffer, free callback entry to return \
             (provider's ktime), and the whole gpu_free ioctl"
        );
        let _ = writeln!(
            w,
            "{:<34} {:>5} {:>10} {:>16} {:>16} {:>8}",
            "client/mode", "size", "callbacks", "callback", "cudaFree", "vs ref"
        );
        for i in &a.invalidations {
            let vs = baseline_of(&i.label)
                .and_then(|b| {
                    a.invalidations
                        .iter()
                        .find(|x| x.label == b && x.size == i.size)
                })
                .and_then(|b| Some(i.callback?.median / b.callback?.median))
                .map_or(String::new(), |r| format!("x{r:.2}"));
            let _ = writeln!(
                w,
                "{:<34} {:>5} {:>10} {:>16} {:>16} {:>8}",
                i.label,
                size_name(i.size),
                format!("{}/{}", i.callbacks, i.iters),
                i.callback.map_or("none".into(), |s| med(&s)),
                med(&i.free),
                vs
            );
        }
    }

    if !a.throughputs.is_empty() {
        let _ = writeln!(
            w,
            "\n== Throughput: concurrent 64 KiB register + deregister cycles (the VM has 2 vCPUs)"
        );
        let _ = writeln!(
            w,
            "{:<34} {:>8} {:>18} {:>8}",
            "client/mode", "threads", "cycles/s", "vs ref"
        );
        for t in &a.throughputs {
            let vs = baseline_of(&t.label)
                .and_then(|b| {
                    a.throughputs
                        .iter()
                        .find(|x| x.label == b && x.threads == t.threads)
                })
                .map_or(String::new(), |b| {
                    format!("x{:.2}", t.rate.median / b.rate.median)
                });
            let _ = writeln!(
                w,
                "{:<34} {:>8} {:>18} {:>8}",
                t.label,
                t.threads,
                format!("{:.0} ±{:.0}%", t.rate.median, t.rate.iqr_pct() / 2.0),
                vs
            );
        }
    }

    if !a.memory.is_empty() {
        let _ = writeln!(
            w,
            "\n== Kernel memory per live registration, by owner (kmem trace attribution, \
             production slab sizes; KASAN metadata excluded)"
        );
        let _ = writeln!(
            w,
            "{:<34} {:>5} {:>5} {:>12} {:>12} {:>12} {:>12} {:>8} {:>7}",
            "client/mode", "size", "live", "client", "target", "provider", "core", "vs ref", "met"
        );
        for m in &a.memory {
            let vs = baseline_of(&m.label)
                .and_then(|b| a.mem(&b, m.size))
                .map_or(String::new(), |b| {
                    format!("x{:.2}", m.client as f64 / b.client.max(1) as f64)
                });
            let _ = writeln!(
                w,
                "{:<34} {:>5} {:>5} {:>12} {:>12} {:>12} {:>12} {:>8} {:>7}",
                m.label,
                size_name(m.size),
                m.live,
                bytes(m.client),
                bytes(m.target),
                bytes(m.provider),
                bytes(m.core),
                vs,
                if m.met { "yes" } else { "NO" }
            );
            if m.trace_lost > 0 || m.left_after_dereg > 0 {
                let _ = writeln!(
                    w,
                    "    note: {} trace events lost, {} client objects not freed by dereg",
                    m.trace_lost, m.left_after_dereg
                );
            }
        }
    }

    let _ = writeln!(w, "\n== Targets (reported, not asserted)");
    render_parity(w, a);
    for c in a.comparisons.iter().filter(|c| c.target_applies) {
        let _ = writeln!(
            w,
            "overhead <= {:.0}% at >= {}: {:<34} {:>5}: {:>7} of the client time ({} of the whole cycle) {}",
            100.0 * OVERHEAD_TARGET,
            size_name(OVERHEAD_MIN_SIZE),
            c.label,
            size_name(c.size),
            pct(c.overhead),
            pct(c.cycle_overhead),
            if c.met { "met" } else { "MISSED" }
        );
    }
    for l in &a.linearity {
        let per_page: Vec<String> = l
            .ns_per_page
            .iter()
            .map(|(s, n)| format!("{}:{}", size_name(*s), time(*n)))
            .collect();
        let _ = writeln!(
            w,
            "linear in pages (line fit from {}, every median within {:.0}%): {:<34} {} {}; marginal per page {}",
            size_name(LINEAR_MIN_SIZE),
            100.0 * LINEAR_TOLERANCE,
            l.label,
            l.fit.map_or("-".into(), |(a, b, w)| format!(
                "{} + {}/page, worst {:.1}%",
                time(a),
                time(b),
                100.0 * w
            )),
            match l.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "n/a",
            },
            per_page.join(" ")
        );
    }
    let mem_missed: Vec<String> = a
        .memory
        .iter()
        .filter(|m| !m.met && baseline_of(&m.label).is_some())
        .map(|m| format!("{} {}", m.label, size_name(m.size)))
        .collect();
    let mem_total = a
        .memory
        .iter()
        .filter(|m| baseline_of(&m.label).is_some())
        .count();
    if mem_total > 0 {
        let _ = writeln!(
            w,
            "memory <= 32 B/page + 256 B: {} of {} measured sizes met{}",
            mem_total - mem_missed.len(),
            mem_total,
            if mem_missed.is_empty() {
                String::new()
            } else {
                format!("; MISSED: {}", mem_missed.join(", "))
            }
        );
    }
    if a.skipped > 0 {
        let _ = writeln!(
            w,
            "warning: {} result lines were unreadable (console interleaving?)",
            a.skipped
        );
    }
    o
}

/// The parity targets (issue 15), one line per kind: every ratio, and
/// which miss.
fn render_parity(w: &mut String, a: &Analysis) {
    for kind in [
        ParityKind::Cycle,
        ParityKind::Throughput,
        ParityKind::Invalidation,
        ParityKind::Memory,
    ] {
        let rows: Vec<_> = a.parity.iter().filter(|p| p.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        let (cmp, unit) = if kind.higher_is_better() {
            (">=", "threads")
        } else {
            ("<=", "size")
        };
        let mut labels: Vec<&str> = rows.iter().map(|p| p.label.as_str()).collect();
        labels.dedup();
        for label in labels {
            let figures: Vec<String> = rows
                .iter()
                .filter(|p| p.label == label)
                .map(|p| {
                    let at = if kind == ParityKind::Throughput {
                        format!("{}T", p.at)
                    } else {
                        size_name(p.at)
                    };
                    format!("{at} x{:.2}{}", p.ratio, if p.met { "" } else { "!" })
                })
                .collect();
            let missed = rows.iter().filter(|p| p.label == label && !p.met).count();
            let _ = writeln!(
                w,
                "parity {:<12} ours/ref {cmp} 1.00 per {unit}: {:<22} {} {}",
                kind.name(),
                label,
                figures.join("  "),
                if missed == 0 {
                    "met".to_string()
                } else {
                    format!("MISSED ({missed})")
                }
            );
        }
    }
    if let Some(all) = a.parity_met() {
        let _ = writeln!(
            w,
            "parity with the reference client (every figure above): {}",
            if all {
                "met"
            } else {
                "MISSED (figures marked !)"
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(size_name(65536), "64K");
        assert_eq!(size_name(16 << 30), "16G");
        assert_eq!(size_name(1000), "1000");
        assert_eq!(time(1500.0), "1.5 us");
        assert_eq!(time(2.5e9), "2.50 s");
        assert_eq!(bytes(300), "300 B");
    }
}
