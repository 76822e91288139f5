// SPDX-License-Identifier: GPL-2.0
//! Seeded multi-threaded stress over shared buffers.
//!
//! Threads share a table of slots. A slot holds at most one GPU allocation,
//! a shadow copy of what its bytes must be, and the MRs registered on it.
//! Every operation on a live allocation holds its slot's lock, so its data is
//! checked exactly. `free` moves the slot's MRs to a shared orphan list
//! before calling gpu_free outside the lock: other threads then deregister
//! (and try DMA on) those MRs while the free callback may still run, which is
//! the cudaFree-vs-ibv_dereg_mr race. Errors on orphans are expected and
//! counted; errors on live objects, data mismatches, leaks and unbalanced
//! core counters fail the run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use peermem_sim::counters::{imbalances, leftovers};
use peermem_sim::parse;
use peermem_sim::pattern::{compare, Pattern};
use peermem_sim::{Engine, SimDevice, SimError};

use crate::args::{Args, Usage};
use crate::cmds::{ACCESS_ALL, SENTINEL};
use crate::rng::{fresh_seed, Rng};
use crate::{Failure, Outcome};

const PAGE: u64 = 64 << 10;
const MAX_MRS_PER_SLOT: usize = 4;
const MAX_DMA: u64 = 16 << 10;
/// Largest DMA handed to the edu engine (its buffer is 4 KiB; keep it quick).
const MAX_EDU_DMA: u64 = 4 << 10;
const MAX_ORPHANS: usize = 256;

#[derive(Clone, Copy)]
struct Mr {
    id: u64,
    /// Offset of the MR inside its allocation, and its length.
    off: u64,
    len: u64,
}

struct Buffer {
    va: u64,
    shadow: Vec<u8>,
    mrs: Vec<Mr>,
}

struct Orphan {
    id: u64,
    /// Set once gpu_free of its allocation has returned.
    freed: Arc<AtomicBool>,
}

#[derive(Default)]
struct Stats {
    ops: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    regs: AtomicU64,
    deregs: AtomicU64,
    dmas: AtomicU64,
    dma_bytes: AtomicU64,
    edu_dmas: AtomicU64,
    checks: AtomicU64,
    queries: AtomicU64,
    orphan_deregs: AtomicU64,
    orphan_dma_ok: AtomicU64,
    orphan_dma_err: AtomicU64,
    enomem: AtomicU64,
    mismatches: AtomicU64,
    unexpected: AtomicU64,
}

struct Shared<'a> {
    dev: &'a SimDevice,
    slots: Vec<Mutex<Option<Buffer>>>,
    orphans: Mutex<Vec<Orphan>>,
    stats: Stats,
    /// Errors by "op:ERRNO", expected or not.
    errors: Mutex<BTreeMap<String, u64>>,
    cfg: Config,
}

#[derive(Clone, Copy)]
struct Config {
    seed: u64,
    threads: u64,
    ops: u64,
    edu_every: u64,
    max_pages: u64,
    allow_errors: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking worker must not hide the others' results.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared<'_> {
    fn error(&self, e: &SimError, expected: bool) {
        *lock(&self.errors)
            .entry(format!("{}:{}", e.op, e.errno_name()))
            .or_default() += 1;
        if !expected {
            self.stats.unexpected.fetch_add(1, Ordering::Relaxed);
            if self.stats.unexpected.load(Ordering::Relaxed) <= 10 {
                errln!("stress: unexpected error {e}");
            }
        }
    }

    fn mismatch(&self, what: &str, va: u64, off: u64, n: u64) {
        let total = self.stats.mismatches.fetch_add(1, Ordering::Relaxed) + 1;
        if total <= 10 {
            errln!("stress: MISMATCH {what} va=0x{va:x} offset={off} bytes={n}");
        }
    }

    fn alloc(&self, rng: &mut Rng, slot: &mut Option<Buffer>) {
        let pages = 1 + rng.below(self.cfg.max_pages);
        let size = pages * PAGE;
        match self.dev.gpu_alloc(size) {
            Ok(va) => {
                let shadow = vec![SENTINEL; size as usize];
                if let Err(e) = self.dev.gpu_write(va, &shadow) {
                    self.error(&e, false);
                    if let Err(e) = self.dev.gpu_free(va) {
                        self.error(&e, false);
                    }
                    return;
                }
                self.stats.allocs.fetch_add(1, Ordering::Relaxed);
                *slot = Some(Buffer {
                    va,
                    shadow,
                    mrs: Vec::new(),
                });
            }
            Err(e) if e.errno == libc::ENOMEM => {
                self.stats.enomem.fetch_add(1, Ordering::Relaxed);
                self.error(&e, true);
            }
            Err(e) => self.error(&e, false),
        }
    }

    fn reg(&self, rng: &mut Rng, b: &mut Buffer) {
        if b.mrs.len() >= MAX_MRS_PER_SLOT {
            return;
        }
        let size = b.shadow.len() as u64;
        // Mostly unaligned sub-ranges, sometimes the whole allocation.
        let (off, len) = if rng.one_in(4) {
            (0, size)
        } else {
            let off = rng.below(size);
            (off, 1 + rng.below(size - off))
        };
        match self.dev.mr_reg(b.va + off, len, ACCESS_ALL) {
            Ok(mr) => {
                self.stats.regs.fetch_add(1, Ordering::Relaxed);
                b.mrs.push(Mr {
                    id: mr.id,
                    off,
                    len,
                });
            }
            Err(e) => self.error(&e, self.cfg.allow_errors),
        }
    }

    fn dma(&self, rng: &mut Rng, b: &mut Buffer) {
        if b.mrs.is_empty() {
            return self.reg(rng, b);
        }
        let mr = b.mrs[rng.below(b.mrs.len() as u64) as usize];
        let edu = rng.one_in(self.cfg.edu_every);
        let max = if edu { MAX_EDU_DMA } else { MAX_DMA };
        let off = rng.below(mr.len);
        let len = 1 + rng.below((mr.len - off).min(max));
        let engine = if edu { Engine::Edu } else { Engine::Cpu };
        let data = Pattern::Seeded(rng.next()).make(0, len as usize);
        if let Err(e) = self.dev.hca_write(mr.id, off, &data, engine) {
            return self.error(&e, self.cfg.allow_errors);
        }
        let at = (mr.off + off) as usize;
        b.shadow[at..at + len as usize].copy_from_slice(&data);
        let mut back = vec![0u8; len as usize];
        match self.dev.gpu_read(b.va + at as u64, &mut back) {
            Ok(()) => {
                let c = compare(&data, &back, 1);
                if !c.ok() {
                    self.mismatch(
                        "gpu_read after hca_write",
                        b.va,
                        at as u64,
                        c.mismatched_bytes,
                    );
                }
            }
            Err(e) => self.error(&e, false),
        }
        back.fill(0);
        match self.dev.hca_read(mr.id, off, &mut back, engine) {
            Ok(()) => {
                let c = compare(&data, &back, 1);
                if !c.ok() {
                    self.mismatch("hca_read", b.va, at as u64, c.mismatched_bytes);
                }
            }
            Err(e) => self.error(&e, self.cfg.allow_errors),
        }
        self.stats.dmas.fetch_add(1, Ordering::Relaxed);
        self.stats.dma_bytes.fetch_add(2 * len, Ordering::Relaxed);
        if edu {
            self.stats.edu_dmas.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reads the whole allocation through the GPU and compares it with the
    /// shadow: catches DMA that landed in the wrong allocation.
    fn check(&self, b: &Buffer) {
        let mut all = vec![0u8; b.shadow.len()];
        match self.dev.gpu_read(b.va, &mut all) {
            Ok(()) => {
                let c = compare(&b.shadow, &all, 1);
                if let Some(m) = c.first.first() {
                    self.mismatch("whole-buffer check", b.va, m.offset, c.mismatched_bytes);
                }
                self.stats.checks.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.error(&e, false),
        }
    }

    fn dereg(&self, rng: &mut Rng, b: &mut Buffer) {
        if b.mrs.is_empty() {
            return;
        }
        let mr = b.mrs.swap_remove(rng.below(b.mrs.len() as u64) as usize);
        match self.dev.mr_dereg(mr.id) {
            Ok(()) => {
                self.stats.deregs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.error(&e, self.cfg.allow_errors),
        }
    }

    fn query(&self, rng: &mut Rng, b: &Buffer) {
        if b.mrs.is_empty() {
            return;
        }
        let mr = b.mrs[rng.below(b.mrs.len() as u64) as usize];
        match self.dev.mr_query(mr.id) {
            Ok(q) => {
                self.stats.queries.fetch_add(1, Ordering::Relaxed);
                if q.state != peermem_sim::uapi::PSIM_MR_LIVE || q.len != mr.len {
                    self.stats.unexpected.fetch_add(1, Ordering::Relaxed);
                    errln!(
                        "stress: mr {} of a live allocation is {} len={} (expected live len={})",
                        mr.id,
                        q.state_name(),
                        q.len,
                        mr.len
                    );
                }
            }
            Err(e) => self.error(&e, self.cfg.allow_errors),
        }
    }

    fn free(&self, slot_idx: usize) {
        let taken = lock(&self.slots[slot_idx]).take();
        let Some(b) = taken else { return };
        self.check(&b);
        let freed = Arc::new(AtomicBool::new(false));
        {
            let mut o = lock(&self.orphans);
            for mr in &b.mrs {
                o.push(Orphan {
                    id: mr.id,
                    freed: freed.clone(),
                });
            }
        }
        // The slot is unlocked: other threads may now dereg these MRs while
        // the free callbacks run.
        match self.dev.gpu_free(b.va) {
            Ok(()) => {
                self.stats.frees.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.error(&e, false),
        }
        freed.store(true, Ordering::Release);
    }

    fn orphan(&self, rng: &mut Rng) {
        let o = {
            let mut list = lock(&self.orphans);
            if list.is_empty() {
                return;
            }
            let i = rng.below(list.len() as u64) as usize;
            list.swap_remove(i)
        };
        if rng.one_in(2) {
            // DMA into an MR whose memory is being or was freed. With the
            // invalidating client it must fail once invalidated; with the
            // persistent client the pages stay pinned until dereg, so it may
            // land. Either way it must not reach another allocation: the
            // whole-buffer checks of live slots would see it.
            let data = [0x5au8; 64];
            match self.dev.hca_write(o.id, 0, &data, Engine::Cpu) {
                Ok(()) => self.stats.orphan_dma_ok.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    self.error(&e, true);
                    self.stats.orphan_dma_err.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        let _ = o.freed.load(Ordering::Acquire);
        match self.dev.mr_dereg(o.id) {
            Ok(()) => {
                self.stats.orphan_deregs.fetch_add(1, Ordering::Relaxed);
            }
            // ibv_dereg_mr after an invalidation must still succeed; anything
            // else is counted and would show as a leak anyway.
            Err(e) => self.error(&e, self.cfg.allow_errors),
        }
    }

    fn step(&self, rng: &mut Rng) {
        let slot_idx = rng.below(self.slots.len() as u64) as usize;
        let r = rng.below(100);
        if (85..95).contains(&r) {
            return self.orphan(rng);
        }
        if (75..85).contains(&r) {
            if lock(&self.orphans).len() >= MAX_ORPHANS {
                return self.orphan(rng);
            }
            return self.free(slot_idx);
        }
        let mut slot = lock(&self.slots[slot_idx]);
        let Some(b) = slot.as_mut() else {
            return self.alloc(rng, &mut slot);
        };
        match r {
            0..=19 => self.reg(rng, b),
            20..=59 => self.dma(rng, b),
            60..=71 => self.dereg(rng, b),
            72..=74 => self.check(b),
            _ => self.query(rng, b),
        }
    }

    /// Deregisters and frees everything left, in the normal order.
    fn drain(&self) {
        for s in &self.slots {
            if let Some(b) = lock(s).take() {
                self.check(&b);
                for mr in &b.mrs {
                    match self.dev.mr_dereg(mr.id) {
                        Ok(()) => self.stats.deregs.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            self.error(&e, false);
                            0
                        }
                    };
                }
                match self.dev.gpu_free(b.va) {
                    Ok(()) => self.stats.frees.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        self.error(&e, false);
                        0
                    }
                };
            }
        }
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for o in orphans {
            match self.dev.mr_dereg(o.id) {
                Ok(()) => self.stats.orphan_deregs.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    self.error(&e, self.cfg.allow_errors);
                    0
                }
            };
        }
    }
}

pub fn run(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(
        argv,
        &["threads", "ops", "seed", "slots", "edu-every", "max-pages"],
        &["allow-errors"],
    )?;
    a.expect_pos(0, 0)?;
    let nonzero = |s: &str| {
        parse::number(s).and_then(|n| {
            if n == 0 {
                Err("must be > 0".into())
            } else {
                Ok(n)
            }
        })
    };
    let cfg = Config {
        seed: a.get("seed", fresh_seed(), parse::number)?,
        threads: a.get("threads", 8, nonzero)?,
        ops: a.get("ops", 100_000, parse::number)?,
        edu_every: a.get("edu-every", 64, nonzero)?,
        max_pages: a.get("max-pages", 4, nonzero)?,
        allow_errors: a.flag("allow-errors"),
    };
    let nslots = a.get("slots", 32, nonzero)?;
    if cfg.threads > 256 || nslots > 4096 || cfg.max_pages > 256 {
        return Err(Usage("--threads <= 256, --slots <= 4096, --max-pages <= 256".into()).into());
    }
    outln!(
        "# stress seed={} threads={} ops={} slots={nslots} max_pages={} edu_every={}",
        cfg.seed,
        cfg.threads,
        cfg.ops,
        cfg.max_pages,
        cfg.edu_every
    );
    let before = dev.counters()?;
    let sh = Shared {
        dev,
        slots: (0..nslots).map(|_| Mutex::new(None)).collect(),
        orphans: Mutex::new(Vec::new()),
        stats: Stats::default(),
        errors: Mutex::new(BTreeMap::new()),
        cfg,
    };
    let start = Instant::now();
    let next_op = AtomicU64::new(0);
    let progress_every = (cfg.ops / 10).max(1);
    // The workers' lines (unexpected errors, mismatches, progress) are the
    // request's output, as the command's own are.
    let sink = crate::out::sink();
    std::thread::scope(|s| {
        for t in 0..cfg.threads {
            let sh = &sh;
            let next_op = &next_op;
            let sink = sink.clone();
            s.spawn(move || {
                crate::out::attach(sink);
                let mut rng = Rng::new(sh.cfg.seed, t);
                loop {
                    let n = next_op.fetch_add(1, Ordering::Relaxed);
                    if n >= sh.cfg.ops {
                        break;
                    }
                    sh.step(&mut rng);
                    sh.stats.ops.fetch_add(1, Ordering::Relaxed);
                    if (n + 1).is_multiple_of(progress_every) {
                        errln!(
                            "stress: progress ops={} elapsed_ms={}",
                            n + 1,
                            start.elapsed().as_millis()
                        );
                    }
                }
            });
        }
    });
    sh.drain();
    let elapsed = start.elapsed();
    let after = dev.counters()?;
    let leak = dev.leak_check()?;
    let left = leftovers(&leak);
    let imb = imbalances(&before, &after);

    let st = &sh.stats;
    let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let errors = lock(&sh.errors).clone();
    let err_list: Vec<String> = errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
    outln!(
        "# stress errors: {}",
        if err_list.is_empty() {
            "none".to_string()
        } else {
            err_list.join(" ")
        }
    );
    let mut problems = Vec::new();
    if g(&st.mismatches) > 0 {
        problems.push(format!("{} data mismatch(es)", g(&st.mismatches)));
    }
    if g(&st.unexpected) > 0 {
        problems.push(format!("{} unexpected error(s)", g(&st.unexpected)));
    }
    if !left.is_empty() {
        let l: Vec<String> = left.iter().map(|(k, v)| format!("{k}={v}")).collect();
        problems.push(format!("left behind: {}", l.join(" ")));
    }
    if !imb.is_empty() {
        problems.push(format!("core counters unbalanced: {}", imb.join(", ")));
    }
    let result = if problems.is_empty() { "pass" } else { "fail" };
    outln!(
        "result={result} seed={} threads={} ops={} allocs={} frees={} regs={} deregs={} orphan_deregs={} \
         dmas={} edu_dmas={} dma_bytes={} checks={} queries={} orphan_dma_ok={} orphan_dma_err={} \
         enomem={} free_callbacks={} mismatches={} unexpected_errors={} leaks={} imbalances={} elapsed_ms={}",
        cfg.seed,
        cfg.threads,
        g(&st.ops),
        g(&st.allocs),
        g(&st.frees),
        g(&st.regs),
        g(&st.deregs),
        g(&st.orphan_deregs),
        g(&st.dmas),
        g(&st.edu_dmas),
        g(&st.dma_bytes),
        g(&st.checks),
        g(&st.queries),
        g(&st.orphan_dma_ok),
        g(&st.orphan_dma_err),
        g(&st.enomem),
        after.free_callbacks.wrapping_sub(before.free_callbacks),
        g(&st.mismatches),
        g(&st.unexpected),
        left.len(),
        imb.len(),
        elapsed.as_millis()
    );
    if problems.is_empty() {
        Ok(Outcome::Ok)
    } else {
        errln!("stress: replay with --seed {}", cfg.seed);
        Ok(Outcome::CheckFailed(problems.join("; ")))
    }
}
