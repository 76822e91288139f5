// SPDX-License-Identifier: GPL-2.0
//! Two operations on the same allocation/MR, started together from two
//! threads, many times: `race free dereg` is cudaFree against ibv_dereg_mr,
//! `race free reg` a cudaFree during registration (get_pages, dma_map; use
//! `simtest delay` to widen the window), `race free dma` DMA during
//! invalidation. Errors of the racing operations are expected and counted;
//! the cleanup after each round (dereg what is left, free what is left) must
//! succeed and the leak check at the end must be clean.

use std::collections::BTreeMap;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use peermem_sim::counters::leftovers;
use peermem_sim::parse;
use peermem_sim::pattern::Pattern;
use peermem_sim::{Engine, SimDevice, SimError};

use crate::args::{Args, Usage};
use crate::cmds::ACCESS_ALL;
use crate::rng::{fresh_seed, Rng};
use crate::{Failure, Outcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Free,
    Dereg,
    Reg,
    Dma,
    Query,
}

impl Op {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "free" => Op::Free,
            "dereg" => Op::Dereg,
            "reg" => Op::Reg,
            "dma" => Op::Dma,
            "query" => Op::Query,
            _ => {
                return Err(format!(
                    "unknown race operation {s:?} (free dereg reg dma query)"
                ))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::Free => "free",
            Op::Dereg => "dereg",
            Op::Reg => "reg",
            Op::Dma => "dma",
            Op::Query => "query",
        }
    }
}

/// What one round owns, shared by the two racing threads.
struct Round {
    va: u64,
    size: u64,
    /// MRs registered (before or during the round), and whether deregistered.
    mrs: Mutex<Vec<(u64, bool)>>,
    freed: Mutex<bool>,
}

fn spin(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn do_op(dev: &SimDevice, op: Op, r: &Round) -> Result<(), SimError> {
    match op {
        Op::Free => {
            dev.gpu_free(r.va)?;
            *lock(&r.freed) = true;
        }
        Op::Dereg => {
            let id = lock(&r.mrs).iter().find(|(_, d)| !d).map(|(id, _)| *id);
            if let Some(id) = id {
                dev.mr_dereg(id)?;
                if let Some(m) = lock(&r.mrs).iter_mut().find(|(i, _)| *i == id) {
                    m.1 = true;
                }
            }
        }
        Op::Reg => {
            let mr = dev.mr_reg(r.va, r.size, ACCESS_ALL)?;
            lock(&r.mrs).push((mr.id, false));
        }
        Op::Dma => {
            let id = lock(&r.mrs).first().map(|(id, _)| *id);
            if let Some(id) = id {
                let data = Pattern::Seq.make(0, r.size.min(16 << 10) as usize);
                dev.hca_write(id, 0, &data, Engine::Cpu)?;
            }
        }
        Op::Query => {
            let id = lock(&r.mrs).first().map(|(id, _)| *id);
            if let Some(id) = id {
                dev.mr_query(id)?;
            }
        }
    }
    Ok(())
}

#[derive(Default)]
struct Tally {
    ok: u64,
    errors: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, r: &Result<(), SimError>) {
        match r {
            Ok(()) => self.ok += 1,
            Err(e) => *self.errors.entry(e.errno_name()).or_default() += 1,
        }
    }

    fn summary(&self) -> String {
        let mut s = format!("ok={}", self.ok);
        for (k, v) in &self.errors {
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }
}

pub fn run(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["iters", "size", "jitter-us", "seed"], &[])?;
    a.expect_pos(2, 2)?;
    let op_a = a.pos_as(0, "A", Op::parse)?;
    let op_b = a.pos_as(1, "B", Op::parse)?;
    let iters = a.get("iters", 200, parse::number)?;
    let size = a.get("size", 64 << 10, parse::size)?;
    let jitter = a.get("jitter-us", 200, parse::number)?;
    let seed = a.get("seed", fresh_seed(), parse::number)?;
    if size == 0 || size > (1 << 30) || jitter > 1_000_000 {
        return Err(Usage("--size must be 1..=1G and --jitter-us <= 1000000".into()).into());
    }
    let prereg = op_a != Op::Reg && op_b != Op::Reg;
    println!(
        "# race a={} b={} iters={iters} size={size} jitter_us={jitter} seed={seed}",
        op_a.name(),
        op_b.name()
    );
    let mut rng = Rng::new(seed, 0);
    let (mut ta, mut tb) = (Tally::default(), Tally::default());
    let mut cleanup_errors: Vec<String> = Vec::new();
    let mut invalidated_seen = 0u64;
    let start = Instant::now();
    for i in 0..iters {
        let va = dev.gpu_alloc(size)?;
        let round = Round {
            va,
            size,
            mrs: Mutex::new(Vec::new()),
            freed: Mutex::new(false),
        };
        if prereg {
            match dev.mr_reg(va, size, ACCESS_ALL) {
                Ok(mr) => lock(&round.mrs).push((mr.id, false)),
                Err(e) => {
                    let _ = dev.gpu_free(va);
                    return Err(e.into());
                }
            }
        }
        let (ja, jb) = (rng.below(jitter + 1), rng.below(jitter + 1));
        let barrier = Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let ha = s.spawn(|| {
                barrier.wait();
                spin(ja);
                do_op(dev, op_a, &round)
            });
            let hb = s.spawn(|| {
                barrier.wait();
                spin(jb);
                do_op(dev, op_b, &round)
            });
            (ha.join(), hb.join())
        });
        let (Ok(ra), Ok(rb)) = (ra, rb) else {
            return Ok(Outcome::CheckFailed("a racing thread panicked".into()));
        };
        ta.add(&ra);
        tb.add(&rb);
        // Cleanup in the normal order: dereg what is left, then free.
        let left: Vec<u64> = lock(&round.mrs)
            .iter()
            .filter(|(_, d)| !d)
            .map(|(id, _)| *id)
            .collect();
        for id in left {
            if let Ok(q) = dev.mr_query(id) {
                if q.state == peermem_sim::uapi::PSIM_MR_INVALIDATED {
                    invalidated_seen += 1;
                }
            }
            if let Err(e) = dev.mr_dereg(id) {
                cleanup_errors.push(format!("round {i}: {e}"));
            }
        }
        if !*lock(&round.freed) {
            if let Err(e) = dev.gpu_free(va) {
                cleanup_errors.push(format!("round {i}: {e}"));
            }
        }
    }
    let leak = dev.leak_check()?;
    let left = leftovers(&leak);
    println!("# race a={} {}", op_a.name(), ta.summary());
    println!("# race b={} {}", op_b.name(), tb.summary());
    for e in cleanup_errors.iter().take(10) {
        eprintln!("race: cleanup failed: {e}");
    }
    let mut problems = Vec::new();
    if !cleanup_errors.is_empty() {
        problems.push(format!("{} cleanup error(s)", cleanup_errors.len()));
    }
    if !left.is_empty() {
        let l: Vec<String> = left.iter().map(|(k, v)| format!("{k}={v}")).collect();
        problems.push(format!("left behind: {}", l.join(" ")));
    }
    let result = if problems.is_empty() { "pass" } else { "fail" };
    let errs = |t: &Tally| t.errors.values().sum::<u64>();
    println!(
        "result={result} a={} b={} iters={iters} races={iters} a_ok={} a_err={} b_ok={} b_err={} \
         invalidated_at_cleanup={invalidated_seen} cleanup_errors={} leaks={} seed={seed} elapsed_ms={}",
        op_a.name(),
        op_b.name(),
        ta.ok,
        errs(&ta),
        tb.ok,
        errs(&tb),
        cleanup_errors.len(),
        left.len(),
        start.elapsed().as_millis()
    );
    if problems.is_empty() {
        Ok(Outcome::Ok)
    } else {
        Ok(Outcome::CheckFailed(problems.join("; ")))
    }
}
