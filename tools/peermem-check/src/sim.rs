// SPDX-License-Identifier: GPL-2.0
//! `--backend sim`: validate and bench against the simulated stack of the
//! test VM (/dev/peermem_sim). The flow mirrors the real one: allocate GPU
//! memory, fill a sentinel, register it through the PeerDirect core (our
//! client takes it), let the HCA DMA a pattern into it, read it back by DMA,
//! copy the GPU memory to the host and compare. Touches neither libcuda nor
//! libibverbs.

use std::time::{Duration, Instant};

use serde_json::json;

use peermem_sim::counters::phase_rows;
use peermem_sim::pattern::{compare, Pattern};
use peermem_sim::uapi::{
    PSIM_ACCESS_LOCAL_WRITE, PSIM_ACCESS_REMOTE_READ, PSIM_ACCESS_REMOTE_WRITE,
};
use peermem_sim::{Engine, SimDevice, SimError};

use crate::bench::{self, BenchResult, SizeResult, Stats};
use crate::error::fail;
use crate::report::{Check, Stop};
use crate::{Backend, BenchArgs, Outcome, SimEngine, ValidateArgs};

const GPU_PAGE: u64 = 64 << 10;
const SENTINEL: u8 = 0xa5;
const ACCESS: u32 = PSIM_ACCESS_LOCAL_WRITE | PSIM_ACCESS_REMOTE_WRITE | PSIM_ACCESS_REMOTE_READ;
/// First mismatching offsets reported per run.
const KEEP: usize = 8;

fn engine(e: SimEngine) -> Engine {
    match e {
        SimEngine::Cpu => Engine::Cpu,
        SimEngine::Edu => Engine::Edu,
    }
}

fn err_box(id: &'static str, title: &str, e: &SimError) -> Stop {
    Box::new(fail(id, title, e))
}

fn seed_or_clock(s: Option<u64>) -> u64 {
    s.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// One validation run: size, offset, iteration.
struct Run {
    size: u64,
    offset: u64,
    iteration: u64,
    seed: u64,
}

/// The result of one run as JSON, plus a failure check if it failed.
fn validate_one(dev: &SimDevice, r: &Run, eng: Engine) -> (serde_json::Value, Option<Check>) {
    let mut out =
        json!({"size": r.size, "offset": r.offset, "iteration": r.iteration, "seed": r.seed});
    let alloc = round_up(r.offset + r.size, GPU_PAGE);
    let va = match dev.gpu_alloc(alloc) {
        Ok(va) => va,
        Err(e) => {
            return (
                out,
                Some(fail("gpu_alloc", "GPU allocation (cudaMalloc)", &e)),
            )
        }
    };
    let result = (|| -> Result<Option<Check>, Stop> {
        dev.gpu_write(va, &vec![SENTINEL; alloc as usize])
            .map_err(|e| err_box("sentinel", "GPU sentinel fill", &e))?;
        let mr = dev.mr_reg(va + r.offset, r.size, ACCESS).map_err(|e| {
            err_box(
                "mr_reg",
                "Memory registration (ibv_reg_mr on GPU memory)",
                &e,
            )
        })?;
        out["client"] = json!(mr.client);
        out["sg_entries"] = json!(mr.sg_entries);
        let body = (|| -> Result<Option<Check>, Stop> {
            let pattern = Pattern::Seeded(r.seed).make(0, r.size as usize);
            dev.hca_write(mr.id, 0, &pattern, eng)
                .map_err(|e| err_box("rdma_write", "RDMA WRITE into GPU memory", &e))?;
            let mut back = vec![0u8; r.size as usize];
            dev.hca_read(mr.id, 0, &mut back, eng)
                .map_err(|e| err_box("rdma_read", "RDMA READ from GPU memory", &e))?;
            let read_cmp = compare(&pattern, &back, KEEP);
            let mut whole = vec![0u8; alloc as usize];
            dev.gpu_read(va, &mut whole)
                .map_err(|e| err_box("gpu_copy", "GPU to host copy (cudaMemcpy)", &e))?;
            let mut expect = vec![SENTINEL; alloc as usize];
            expect[r.offset as usize..(r.offset + r.size) as usize].copy_from_slice(&pattern);
            let gpu_cmp = compare(&expect, &whole, KEEP);
            out["rdma_read_mismatched_bytes"] = json!(read_cmp.mismatched_bytes);
            out["gpu_mismatched_bytes"] = json!(gpu_cmp.mismatched_bytes);
            let firsts: Vec<_> = gpu_cmp
                .first
                .iter()
                .map(|m| {
                    json!({"offset": m.offset as i64 - r.offset as i64, "expected": m.expected, "actual": m.actual,
                           "where": if m.offset < r.offset || m.offset >= r.offset + r.size { "outside the MR (sentinel)" } else { "inside the MR" }})
                })
                .collect();
            out["first_mismatches"] = json!(firsts);
            if gpu_cmp.ok() && read_cmp.ok() {
                return Ok(None);
            }
            let what = if !gpu_cmp.ok() {
                let m = gpu_cmp.first[0];
                let rel = m.offset as i64 - r.offset as i64;
                format!(
                    "{} byte(s) of GPU memory differ; first at MR offset {rel} (expected 0x{:02x}, got 0x{:02x}){}",
                    gpu_cmp.mismatched_bytes,
                    m.expected,
                    m.actual,
                    if m.actual == SENTINEL { ": the write never landed there" } else { "" }
                )
            } else {
                format!(
                    "RDMA READ returned {} wrong byte(s), first at offset {}",
                    read_cmp.mismatched_bytes, read_cmp.first[0].offset
                )
            };
            Ok(Some(
                Check::fail("compare", "Data comparison", what)
                    .fix("the DMA addresses the client mapped do not point at this GPU memory: check dmesg, IOMMU and the client's dma_map")
                    .data(json!({"first_mismatches": out["first_mismatches"].clone()})),
            ))
        })();
        let dereg = dev.mr_dereg(mr.id);
        let res = body?;
        dereg.map_err(|e| err_box("mr_dereg", "Deregistration (ibv_dereg_mr)", &e))?;
        Ok(res)
    })();
    let freed = dev.gpu_free(va);
    let check = match result {
        Err(c) => Some(*c),
        Ok(c) => match freed {
            Err(e) => Some(fail("gpu_free", "GPU free (cudaFree)", &e)),
            Ok(()) => c,
        },
    };
    out["result"] = json!(if check.is_none() { "pass" } else { "fail" });
    (out, check)
}

/// `validate --backend sim`.
pub fn validate(a: &ValidateArgs) -> Outcome {
    let mut checks = Vec::new();
    let seed = seed_or_clock(a.seed);
    let eng = engine(a.sim.engine);
    let mut outcome = Outcome {
        command: "validate",
        backend: Backend::Sim,
        checks: Vec::new(),
        extra: json!({"seed": seed}),
        notes: Vec::new(),
    };
    let dev = match SimDevice::open_path(&a.sim.sim_dev) {
        Ok(d) => d,
        Err(e) => {
            outcome.checks.push(fail("open", "Simulated stack", &e));
            return outcome;
        }
    };
    checks.push(Check::pass(
        "open",
        "Simulated stack",
        format!("{} opened", a.sim.sim_dev),
    ));
    let before = dev.counters().ok();
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    let mut clients = std::collections::BTreeSet::new();
    let mut bytes = 0u64;
    for &size in &a.sizes {
        if size == 0 {
            failures.push(
                Check::fail("arguments", "Arguments", "--size 0: nothing to register")
                    .fix("use a size of at least 1 byte"),
            );
            continue;
        }
        for &offset in &a.offsets {
            for it in 0..a.iterations {
                let run = Run {
                    size,
                    offset,
                    iteration: it,
                    seed: seed.wrapping_add(runs.len() as u64),
                };
                let (j, c) = validate_one(&dev, &run, eng);
                if let Some(cl) = j.get("client").and_then(|v| v.as_str()) {
                    clients.insert(cl.to_string());
                }
                if c.is_none() {
                    bytes += size;
                }
                runs.push(j);
                if let Some(c) = c {
                    failures.push(c);
                    // One failure per size/offset is enough to explain it.
                    break;
                }
            }
        }
    }
    let passed = runs.iter().filter(|r| r["result"] == "pass").count();
    if !clients.is_empty() {
        checks.push(Check::pass(
            "mr_reg",
            "Memory registration",
            format!(
                "GPU memory registered through the PeerDirect core by client {}",
                clients.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    if !clients.is_empty() && !clients.iter().any(|c| c.starts_with("nv_mem")) {
        checks.push(
            Check::warn(
                "client_name",
                "Client name",
                format!("registrations went to {clients:?}, not nv_mem"),
            )
            .fix("NCCL and UCX look for nv_mem: load nvidia_peermem_rs"),
        );
    }
    if failures.is_empty() {
        checks.push(Check::pass(
            "compare",
            "Data comparison",
            format!(
                "{passed}/{} transfer(s) matched byte for byte ({} bytes, engine {}, sizes {}, offsets {:?}), sentinel intact outside every MR",
                runs.len(),
                bytes,
                eng.name(),
                a.sizes.iter().map(|s| bench::size_label(*s)).collect::<Vec<_>>().join(","),
                a.offsets
            ),
        ));
    }
    checks.extend(failures);
    // What the run left behind (our own leaks would show here).
    if let (Some(b), Ok(after)) = (before, dev.counters()) {
        let imb = peermem_sim::counters::imbalances(&b, &after);
        if after.mrs_live > b.mrs_live || after.gpu_allocs_live > b.gpu_allocs_live {
            checks.push(
                Check::fail(
                    "leaks",
                    "Nothing left behind",
                    format!(
                        "MRs live {} -> {}, GPU allocations live {} -> {}",
                        b.mrs_live, after.mrs_live, b.gpu_allocs_live, after.gpu_allocs_live
                    ),
                )
                .fix("simtest leak-check shows what is left"),
            );
        } else if imb.is_empty() {
            checks.push(Check::pass(
                "leaks",
                "Nothing left behind",
                "every MR deregistered, every page unpinned, every allocation freed",
            ));
        } else {
            checks.push(Check::warn(
                "leaks",
                "Nothing left behind",
                format!("core counters: {}", imb.join(", ")),
            ));
        }
    }
    outcome.checks = checks;
    outcome.extra = json!({"seed": seed, "engine": eng.name(), "runs": runs});
    outcome
        .notes
        .push(format!("seed {seed} (replay with --seed {seed})"));
    outcome
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// `bench --backend sim`.
pub fn bench(a: &BenchArgs, json_mode: bool) -> Outcome {
    let mut outcome = Outcome {
        command: "bench",
        backend: Backend::Sim,
        checks: Vec::new(),
        extra: json!({}),
        notes: Vec::new(),
    };
    let dev = match SimDevice::open_path(&a.sim.sim_dev) {
        Ok(d) => d,
        Err(e) => {
            outcome.checks.push(fail("open", "Simulated stack", &e));
            return outcome;
        }
    };
    let eng = engine(a.sim.engine);
    let mut result = BenchResult {
        backend: "sim".into(),
        platform: format!("simulated stack ({}), HCA engine {}", a.sim.sim_dev, eng.name()),
        method: "reg/dereg: wall time of the MR_REG/MR_DEREG ioctls (phases: in-kernel ktime); direct: one HCA DMA into the GPU MR; bounce: a host memcpy standing in for the NIC's DMA to host memory, then gpu_write (cudaMemcpy)".into(),
        results: Vec::new(),
    };
    let total = a.sizes.len() as u64 * a.iterations * 3;
    let pb = bench::progress(total, json_mode);
    pb.set_prefix("sim");
    for &size in &a.sizes {
        pb.set_message(bench::size_label(size));
        match bench_size(&dev, size, a.iterations, eng, &pb) {
            Ok(r) => result.results.push(r),
            Err(e) => {
                outcome.checks.push(fail("bench", "Bench", &e));
                break;
            }
        }
    }
    pb.finish_and_clear();
    finish_bench(&mut outcome, result, a);
    outcome
}

/// MiB/s samples: direct, bounce, copy.
type Rates = (Vec<f64>, Vec<f64>, Vec<f64>);

fn bench_size(
    dev: &SimDevice,
    size: u64,
    iters: u64,
    eng: Engine,
    pb: &indicatif::ProgressBar,
) -> Result<SizeResult, SimError> {
    let alloc = round_up(size, GPU_PAGE);
    let va = dev.gpu_alloc(alloc)?;
    let res = (|| -> Result<SizeResult, SimError> {
        let mut reg = Vec::new();
        let mut dereg = Vec::new();
        let _ = dev.phase_times(true);
        for _ in 0..iters {
            let (mr, t) = time(|| dev.mr_reg(va, size, ACCESS));
            let mr = mr?;
            reg.push(t);
            let (d, t) = time(|| dev.mr_dereg(mr.id));
            d?;
            dereg.push(t);
            pb.inc(1);
        }
        let phases = dev.phase_times(true).ok();
        let data = Pattern::Seeded(size).make(0, size as usize);
        let mr = dev.mr_reg(va, size, ACCESS)?;
        let bw = (|| -> Result<Rates, SimError> {
            let (mut direct, mut bounce, mut copy) = (Vec::new(), Vec::new(), Vec::new());
            let mut staging = vec![0u8; size as usize];
            for _ in 0..iters {
                let (r, t) = time(|| dev.hca_write(mr.id, 0, &data, eng));
                r?;
                direct.push(bench::mib_s(size, t));
                pb.inc(1);
                let (r, t) = time(|| {
                    staging.copy_from_slice(&data);
                    dev.gpu_write(va, &staging)
                });
                r?;
                bounce.push(bench::mib_s(size, t));
                let (r, t) = time(|| dev.gpu_write(va, &data));
                r?;
                copy.push(bench::mib_s(size, t));
                pb.inc(1);
            }
            Ok((direct, bounce, copy))
        })();
        let d = dev.mr_dereg(mr.id);
        let (direct, bounce, copy) = bw?;
        d?;
        let mut phases_ns = std::collections::BTreeMap::new();
        if let Some(p) = phases {
            for r in phase_rows(&p).iter().filter(|r| r.calls > 0) {
                phases_ns.insert(r.name.to_string(), r.avg_ns as f64);
            }
        }
        Ok(SizeResult {
            size,
            iterations: iters,
            reg_ns: Stats::of_durations(&reg),
            dereg_ns: Stats::of_durations(&dereg),
            phases_ns,
            direct_mib_s: Stats::of(&direct).map(|s| s.median),
            bounce_mib_s: Stats::of(&bounce).map(|s| s.median),
            copy_mib_s: Stats::of(&copy).map(|s| s.median),
        })
    })();
    let f = dev.gpu_free(va);
    let r = res?;
    f?;
    Ok(r)
}

/// Writes bench.json and bench.png and fills the outcome (shared with the
/// real backend).
pub fn finish_bench(outcome: &mut Outcome, result: BenchResult, a: &BenchArgs) {
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        outcome.checks.push(Check::fail(
            "output",
            "Output",
            format!("{}: {e}", a.out.display()),
        ));
    }
    let json_path = a.out.join("bench.json");
    match bench::save(&result, &json_path) {
        Ok(()) => outcome.notes.push(format!("wrote {}", json_path.display())),
        Err(e) => outcome
            .checks
            .push(Check::fail("output", "Output", e.to_string())),
    }
    if !a.no_plot && !result.results.is_empty() {
        let png = a.out.join("bench.png");
        match crate::plot::render(&result, &png) {
            Ok(()) => outcome.notes.push(format!("wrote {}", png.display())),
            Err(e) => outcome
                .checks
                .push(Check::warn("plot", "Plot", e.to_string())),
        }
    }
    if !result.results.is_empty() {
        outcome.checks.push(Check::pass(
            "bench",
            "Bench",
            format!("{} size(s) measured", result.results.len()),
        ));
    }
    let mut notes = bench::table(&result);
    notes.append(&mut outcome.notes);
    outcome.notes = notes;
    outcome.extra = json!({"bench": result});
}
