// SPDX-License-Identifier: GPL-2.0
//! Two operations on the same allocation/MR, started together from two
//! threads, many times: `race free dereg` is cudaFree against ibv_dereg_mr,
//! `race free reg` a cudaFree during registration (get_pages, dma_map; use
//! `simtest delay` to widen the window), `race free dma` DMA during
//! invalidation. A round counts as a race only if the two operations were
//! really in flight together: for cudaFree against a registration or a
//! deregistration the core's overlap counters say so (`win_free_reg`,
//! `win_free_dereg`: the operation that began second saw the other one
//! running); for the other pairs, the two calls' time spans intersected.
//! A run with no such round fails (it raced nothing), and so does an error
//! of a racing operation that losing the race cannot explain (cudaFree and
//! deregistration never fail; a registration racing cudaFree may be
//! refused with EFAULT or EINVAL; DMA or a query racing the MR's end may
//! get EIO or ENOENT). The cleanup after each round (dereg what is left,
//! free what is left) must succeed and the leak check at the end must be
//! clean.

use std::collections::BTreeMap;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use peermem_sim::counters::leftovers;
use peermem_sim::parse;
use peermem_sim::pattern::Pattern;
use peermem_sim::uapi::PsimCounters;
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

    /// The errors `self` may return when it loses the race with `other`.
    fn expected_errors(self, other: Op) -> &'static [&'static str] {
        match (self, other) {
            // the memory went before the registration pinned it
            (Op::Reg, Op::Free) => &["EFAULT", "EINVAL"],
            // the HCA's remote access error on an invalidated MR, or an
            // MR already deregistered
            (Op::Dma, Op::Free) => &["EIO"],
            (Op::Dma, Op::Dereg) => &["EIO", "ENOENT"],
            (Op::Query, Op::Dereg) => &["ENOENT"],
            // the same operation twice on one allocation or MR
            (Op::Free, Op::Free) => &["EINVAL"],
            (Op::Dereg, Op::Dereg) => &["ENOENT"],
            _ => &[],
        }
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
    /// Errors that losing the race does not explain.
    unexpected: Vec<String>,
}

impl Tally {
    fn add(&mut self, r: &Result<(), SimError>, op: Op, other: Op, round: u64) {
        match r {
            Ok(()) => self.ok += 1,
            Err(e) => {
                let name = e.errno_name();
                if !op.expected_errors(other).contains(&name.as_str()) {
                    self.unexpected.push(format!(
                        "round {round}: {} racing {}: {e}",
                        op.name(),
                        other.name()
                    ));
                }
                *self.errors.entry(name).or_default() += 1;
            }
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
    outln!(
        "# race a={} b={} iters={iters} size={size} jitter_us={jitter} seed={seed}",
        op_a.name(),
        op_b.name()
    );
    let mut rng = Rng::new(seed, 0);
    let (mut ta, mut tb) = (Tally::default(), Tally::default());
    let mut cleanup_errors: Vec<String> = Vec::new();
    let mut invalidated_seen = 0u64;
    let mut overlapped = 0u64;
    // The core's overlap counter of this pair, if it has one.
    let pair = |a: Op, b: Op| (a == op_a && b == op_b) || (a == op_b && b == op_a);
    let overlap_counter = |c: &PsimCounters| {
        if pair(Op::Free, Op::Reg) {
            Some(c.win_free_reg)
        } else if pair(Op::Free, Op::Dereg) {
            Some(c.win_free_dereg)
        } else {
            None
        }
    };
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
        let before = overlap_counter(&dev.counters()?);
        let timed = |op: Op, j: u64| {
            barrier.wait();
            spin(j);
            let t0 = Instant::now();
            let r = do_op(dev, op, &round);
            (r, t0, Instant::now())
        };
        let (ra, rb) = std::thread::scope(|s| {
            let ha = s.spawn(|| timed(op_a, ja));
            let hb = s.spawn(|| timed(op_b, jb));
            (ha.join(), hb.join())
        });
        let (Ok((ra, a0, a1)), Ok((rb, b0, b1))) = (ra, rb) else {
            return Ok(Outcome::CheckFailed("a racing thread panicked".into()));
        };
        let raced = match (before, overlap_counter(&dev.counters()?)) {
            (Some(n0), Some(n1)) => n1 != n0,
            _ => a0 < b1 && b0 < a1,
        };
        overlapped += u64::from(raced);
        ta.add(&ra, op_a, op_b, i);
        tb.add(&rb, op_b, op_a, i);
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
    outln!("# race a={} {}", op_a.name(), ta.summary());
    outln!("# race b={} {}", op_b.name(), tb.summary());
    for e in cleanup_errors.iter().take(10) {
        errln!("race: cleanup failed: {e}");
    }
    let unexpected: Vec<&String> = ta.unexpected.iter().chain(&tb.unexpected).collect();
    for e in unexpected.iter().take(10) {
        errln!("race: unexpected error: {e}");
    }
    let mut problems = Vec::new();
    if iters > 0 && overlapped == 0 {
        problems.push(format!(
            "no round of {iters} overlapped: the two operations never ran together"
        ));
    }
    if !unexpected.is_empty() {
        problems.push(format!(
            "{} unexpected error(s) of the racing operations, first: {}",
            unexpected.len(),
            unexpected[0]
        ));
    }
    if !cleanup_errors.is_empty() {
        problems.push(format!("{} cleanup error(s)", cleanup_errors.len()));
    }
    if !left.is_empty() {
        let l: Vec<String> = left.iter().map(|(k, v)| format!("{k}={v}")).collect();
        problems.push(format!("left behind: {}", l.join(" ")));
    }
    let result = if problems.is_empty() { "pass" } else { "fail" };
    let errs = |t: &Tally| t.errors.values().sum::<u64>();
    outln!(
        "result={result} a={} b={} iters={iters} races={overlapped} a_ok={} a_err={} b_ok={} b_err={} \
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
