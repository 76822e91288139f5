// SPDX-License-Identifier: GPL-2.0
//! `simtest bench`: the measurements of `make bench` (tests/bench, issue 8).
//!
//! Owned by the bench engineer (see `docs/lab-notes/simtest-bench.md`).
//! Every subcommand prints exactly one line
//! `BENCH-RESULT {json}` with the raw samples; the host
//! (`tests/bench/report`) computes medians and spreads. Nothing here
//! asserts a time limit: a failed ioctl is an error (exit 1), a slow one is
//! a figure.
//!
//! - `cycle SIZE`: register + deregister the same allocation; per iteration
//!   the userspace-timed reg and dereg, and the core's in-kernel ktime of
//!   each call into the client (`PSIM_IOC_PHASE_TIMES`, reset every time).
//! - `invalidate SIZE`: register, then cudaFree; the provider's ktime from
//!   free-callback entry to return, and the userspace-timed gpu_free.
//! - `throughput SIZE`: T threads each registering and deregistering its
//!   own allocation for D ms; registrations per second.
//! - `memory SIZE`: N live registrations, memory attributed to its owner
//!   module from kmem trace events (see `bench_mem.rs`).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use peermem_sim::parse;
use peermem_sim::uapi::{PSIM_PHASE_COUNT, PSIM_PHASE_INVALIDATE, PSIM_PHASE_NAMES};
use peermem_sim::{ProviderConfig, SimDevice, SimError};

use crate::args::{Args, Usage};
use crate::bench_mem;
use crate::cmds::ACCESS_ALL;
use crate::{Failure, Outcome};

/// GPU page size of the P2P API.
pub const GPU_PAGE: u64 = 64 << 10;

pub const USAGE: &str = "\
  bench cycle SIZE [--iters N] [--warmup W] [--scale P] [--label L]
  bench invalidate SIZE [--iters N] [--scale P] [--label L]
  bench throughput SIZE --threads T [--ms D] [--reps R] [--label L]
  bench memory SIZE [--live N] [--scale P] [--label L] [--client-module M]
                                      one line BENCH-RESULT {json} of raw samples";

/// A JSON object written field by field (values are numbers, strings
/// without quotes or backslashes, arrays of numbers, or nested objects).
#[derive(Default)]
pub struct Json(String);

impl Json {
    fn sep(&mut self) {
        if !self.0.is_empty() {
            self.0.push(',');
        }
    }

    pub fn num(&mut self, k: &str, v: impl std::fmt::Display) -> &mut Self {
        self.sep();
        self.0.push_str(&format!("\"{k}\":{v}"));
        self
    }

    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        self.sep();
        let clean: String = v
            .chars()
            .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
            .collect();
        self.0.push_str(&format!("\"{k}\":\"{clean}\""));
        self
    }

    pub fn arr(&mut self, k: &str, v: &[u64]) -> &mut Self {
        self.sep();
        let items: Vec<String> = v.iter().map(u64::to_string).collect();
        self.0.push_str(&format!("\"{k}\":[{}]", items.join(",")));
        self
    }

    pub fn farr(&mut self, k: &str, v: &[f64]) -> &mut Self {
        self.sep();
        let items: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
        self.0.push_str(&format!("\"{k}\":[{}]", items.join(",")));
        self
    }

    pub fn obj(&mut self, k: &str, v: &Json) -> &mut Self {
        self.sep();
        self.0.push_str(&format!("\"{k}\":{{{}}}", v.0));
        self
    }

    pub fn render(&self) -> String {
        format!("{{{}}}", self.0)
    }
}

/// Prints the result line.
pub fn emit(j: &Json) -> Result<Outcome, Failure> {
    outln!("BENCH-RESULT {}", j.render());
    Ok(Outcome::Ok)
}

pub fn run(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let Some((sub, rest)) = argv.split_first() else {
        return Err(Usage(format!("bench needs a subcommand:\n{USAGE}")).into());
    };
    match sub.as_str() {
        "cycle" => cycle(dev, rest),
        "invalidate" => invalidate(dev, rest),
        "throughput" => throughput(dev, rest),
        "memory" => bench_mem::memory(dev, rest),
        s => Err(Usage(format!("unknown bench {s:?}:\n{USAGE}")).into()),
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn count(s: &str) -> Result<u64, String> {
    parse::number(s)
}

/// Sets the provider's scale mode (`alias` backing pages; 0 = off) and
/// restores the default configuration when dropped.
pub struct ScaleMode<'a> {
    dev: &'a SimDevice,
    set: bool,
}

impl<'a> ScaleMode<'a> {
    pub fn new(dev: &'a SimDevice, alias: u32) -> Result<Self, SimError> {
        if alias > 0 {
            dev.provider_config(&ProviderConfig {
                scale_alias_pages: alias,
                ..Default::default()
            })?;
        }
        Ok(Self {
            dev,
            set: alias > 0,
        })
    }
}

impl Drop for ScaleMode<'_> {
    fn drop(&mut self) {
        if self.set {
            if let Err(e) = self.dev.provider_config(&ProviderConfig::default()) {
                errln!("simtest bench: restoring the provider config: {e}");
            }
        }
    }
}

/// One GPU allocation, freed when dropped (unless already freed).
pub struct GpuBuf<'a> {
    dev: &'a SimDevice,
    pub va: u64,
    live: bool,
}

impl<'a> GpuBuf<'a> {
    pub fn new(dev: &'a SimDevice, size: u64) -> Result<Self, SimError> {
        Ok(Self {
            dev,
            va: dev.gpu_alloc(size)?,
            live: true,
        })
    }

    /// cudaFree now.
    pub fn free(&mut self) -> Result<(), SimError> {
        self.live = false;
        self.dev.gpu_free(self.va)
    }
}

impl Drop for GpuBuf<'_> {
    fn drop(&mut self) {
        if self.live {
            let _ = self.dev.gpu_free(self.va);
        }
    }
}

/// The common header of every result.
pub fn header(kind: &str, label: &str, size: u64, scale: u32) -> Json {
    let mut j = Json::default();
    j.str("kind", kind)
        .str("label", label)
        .num("size", size)
        .num("gpu_pages", size.div_ceil(GPU_PAGE))
        .num("scale", scale);
    j
}

fn cycle(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["iters", "warmup", "scale", "label"], &[])?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    let iters = a.get("iters", 20, count)?.max(1);
    let warmup = a.get("warmup", 2, count)?;
    let scale = a.get("scale", 0, parse::number32)?;
    let label = a.value("label").unwrap_or("unlabelled").to_string();

    let _mode = ScaleMode::new(dev, scale)?;
    let buf = GpuBuf::new(dev, size)?;
    let mut sg = 0;
    for _ in 0..warmup {
        let mr = dev.mr_reg(buf.va, size, ACCESS_ALL)?;
        sg = mr.sg_entries;
        dev.mr_dereg(mr.id)?;
    }
    let mut reg_ns = Vec::new();
    let mut dereg_ns = Vec::new();
    let mut phases: Vec<Vec<u64>> = vec![Vec::new(); PSIM_PHASE_COUNT];
    let mut client_ns = Vec::new();
    let mut client = String::new();
    for _ in 0..iters {
        dev.phase_times(true)?;
        let t0 = Instant::now();
        let mr = dev.mr_reg(buf.va, size, ACCESS_ALL)?;
        let t1 = Instant::now();
        dev.mr_dereg(mr.id)?;
        let t2 = Instant::now();
        let pt = dev.phase_times(true)?;
        reg_ns.push(ns(t1 - t0));
        dereg_ns.push(ns(t2 - t1));
        let mut sum = 0;
        for (i, v) in phases.iter_mut().enumerate() {
            v.push(pt.total_ns[i]);
            if i != PSIM_PHASE_INVALIDATE {
                sum += pt.total_ns[i];
            }
        }
        client_ns.push(sum);
        sg = mr.sg_entries;
        client = mr.client;
    }
    drop(buf);

    let mut ph = Json::default();
    for (i, name) in PSIM_PHASE_NAMES.iter().enumerate() {
        if i != PSIM_PHASE_INVALIDATE {
            ph.arr(name, &phases[i]);
        }
    }
    let mut j = header("cycle", &label, size, scale);
    j.str("client", &client)
        .num("sg_entries", sg)
        .num("iters", iters)
        .arr("reg_ns", &reg_ns)
        .arr("dereg_ns", &dereg_ns)
        .arr("client_ns", &client_ns)
        .obj("phases", &ph);
    emit(&j)
}

fn invalidate(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["iters", "scale", "label"], &[])?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    let iters = a.get("iters", 20, count)?.max(1);
    let scale = a.get("scale", 0, parse::number32)?;
    let label = a.value("label").unwrap_or("unlabelled").to_string();

    let _mode = ScaleMode::new(dev, scale)?;
    let mut callback_ns = Vec::new();
    let mut free_ns = Vec::new();
    let mut callbacks = 0;
    let mut invalidated = 0;
    let mut client = String::new();
    for _ in 0..iters {
        let mut buf = GpuBuf::new(dev, size)?;
        let mr = dev.mr_reg(buf.va, size, ACCESS_ALL)?;
        client = mr.client.clone();
        dev.phase_times(true)?;
        let t0 = Instant::now();
        let freed = buf.free();
        let t1 = Instant::now();
        let pt = dev.phase_times(true);
        let state = dev.mr_query(mr.id);
        let dereg = dev.mr_dereg(mr.id);
        freed?;
        let pt = pt?;
        free_ns.push(ns(t1 - t0));
        let inv = PSIM_PHASE_INVALIDATE;
        callbacks += pt.calls[inv];
        if pt.calls[inv] > 0 {
            callback_ns.push(pt.total_ns[inv]);
        }
        if state.is_ok_and(|s| s.state_name() == "invalidated") {
            invalidated += 1;
        }
        dereg?;
    }
    let mut j = header("invalidate", &label, size, scale);
    j.str("client", &client)
        .num("iters", iters)
        .num("callbacks", callbacks)
        .num("mrs_invalidated", invalidated)
        .arr("callback_ns", &callback_ns)
        .arr("free_ns", &free_ns);
    emit(&j)
}

fn throughput(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["threads", "ms", "reps", "label", "scale"], &[])?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    let threads = a.get("threads", 1, count)?.clamp(1, 64) as usize;
    let ms = a.get("ms", 1000, count)?.max(1);
    let reps = a.get("reps", 3, count)?.max(1);
    let scale = a.get("scale", 0, parse::number32)?;
    let label = a.value("label").unwrap_or("unlabelled").to_string();

    let _mode = ScaleMode::new(dev, scale)?;
    let bufs = (0..threads)
        .map(|_| GpuBuf::new(dev, size))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rates = Vec::new();
    let mut totals = Vec::new();
    for _ in 0..reps {
        // Each worker times its own loop; the window runs from the first
        // start to the last end (the main thread may not run in between).
        let start = Barrier::new(threads);
        let outcome = std::thread::scope(|s| {
            let handles: Vec<_> = bufs
                .iter()
                .map(|b| {
                    let start = &start;
                    let va = b.va;
                    s.spawn(move || -> Result<(u64, Instant, Instant), SimError> {
                        start.wait();
                        let t0 = Instant::now();
                        let deadline = t0 + Duration::from_millis(ms);
                        let mut n = 0;
                        while Instant::now() < deadline {
                            let mr = dev.mr_reg(va, size, ACCESS_ALL)?;
                            dev.mr_dereg(mr.id)?;
                            n += 1;
                        }
                        Ok((n, t0, Instant::now()))
                    })
                })
                .collect();
            let mut total = 0;
            let mut window: Option<(Instant, Instant)> = None;
            let mut err = None;
            for h in handles {
                match h.join() {
                    Ok(Ok((n, t0, t1))) => {
                        total += n;
                        window = Some(match window {
                            None => (t0, t1),
                            Some((a, b)) => (a.min(t0), b.max(t1)),
                        });
                    }
                    Ok(Err(e)) => err = Some(e),
                    Err(_) => {
                        err = Some(SimError {
                            op: "bench thread",
                            errno: libc::EIO,
                            detail: "panicked".into(),
                        })
                    }
                }
            }
            match (err, window) {
                (Some(e), _) => Err(e),
                (None, Some((a, b))) => Ok((total, b - a)),
                (None, None) => Ok((total, Duration::ZERO)),
            }
        });
        let (total, elapsed) = outcome?;
        totals.push(total);
        rates.push(total as f64 / elapsed.as_secs_f64().max(1e-9));
    }
    drop(bufs);
    let mut j = header("throughput", &label, size, scale);
    j.num("threads", threads)
        .num("ms", ms)
        .arr("cycles", &totals)
        .farr("cycles_per_s", &rates);
    emit(&j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shapes() {
        let mut inner = Json::default();
        inner.arr("a", &[1, 2]);
        let mut j = Json::default();
        j.str("kind", "cy\"cle")
            .num("n", 3)
            .obj("o", &inner)
            .farr("f", &[1.25]);
        assert_eq!(
            j.render(),
            r#"{"kind":"cycle","n":3,"o":{"a":[1,2]},"f":[1.2]}"#
        );
    }
}
