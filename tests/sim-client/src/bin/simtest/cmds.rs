// SPDX-License-Identifier: GPL-2.0
//! The single-operation subcommands, and dispatch to the load generators.

use peermem_sim::counters::{counter_fields, leak_fields, leftovers, phase_rows};
use peermem_sim::errno;
use peermem_sim::parse;
use peermem_sim::pattern::{compare, Comparison, Pattern};
use peermem_sim::uapi::{
    PSIM_ACCESS_LOCAL_WRITE, PSIM_ACCESS_REMOTE_READ, PSIM_ACCESS_REMOTE_WRITE,
};
use peermem_sim::{Engine, ProviderConfig, SimDevice};

use crate::args::{Args, Usage};
use crate::{race, stress, Failure, Outcome};

const COMMANDS: &[&str] = &[
    "gpu-alloc",
    "gpu-free",
    "gpu-fill",
    "gpu-check",
    "gpu-write",
    "gpu-read",
    "mr-reg",
    "mr-dereg",
    "mr-query",
    "hca-write",
    "hca-check",
    "hca-read",
    "verify",
    "roundtrip",
    "counters",
    "fault",
    "fault-clear",
    "delay",
    "release",
    "config",
    "provider-config",
    "leak-check",
    "phase-times",
    "stress",
    "race",
    "hold",
    "bench",
];

/// All read/write access rights, what ibv_reg_mr callers usually ask.
pub const ACCESS_ALL: u32 =
    PSIM_ACCESS_LOCAL_WRITE | PSIM_ACCESS_REMOTE_WRITE | PSIM_ACCESS_REMOTE_READ;

/// Sentinel byte filled around and under MRs before DMA (as gdrcopy does).
pub const SENTINEL: u8 = 0xa5;

/// Number of mismatching offsets printed on stderr.
const KEEP_MISMATCHES: usize = 8;

/// Upper bound of one host buffer (len arguments).
const MAX_XFER: u64 = 1 << 30;

pub fn known(cmd: &str) -> bool {
    COMMANDS.contains(&cmd)
}

pub fn run(dev: &SimDevice, cmd: &str, argv: &[String]) -> Result<Outcome, Failure> {
    match cmd {
        "gpu-alloc" => gpu_alloc(dev, argv),
        "gpu-free" => gpu_free(dev, argv),
        "gpu-fill" | "gpu-write" => gpu_fill(dev, argv),
        "gpu-check" => gpu_check(dev, argv),
        "gpu-read" => gpu_read(dev, argv),
        "mr-reg" => mr_reg(dev, argv),
        "mr-dereg" => mr_dereg(dev, argv),
        "mr-query" => mr_query(dev, argv),
        "hca-write" => hca_write(dev, argv),
        "hca-check" => hca_check(dev, argv),
        "hca-read" => hca_read(dev, argv),
        "verify" => verify_cmd(dev, argv),
        "roundtrip" => roundtrip(dev, argv),
        "counters" => counters(dev, argv),
        "fault" => fault(dev, argv),
        "fault-clear" => fault_clear(dev, argv),
        "delay" => delay(dev, argv),
        "release" => release(dev, argv),
        "config" | "provider-config" => config(dev, argv),
        "leak-check" => leak_check(dev, argv),
        "phase-times" => phase_times(dev, argv),
        "stress" => stress::run(dev, argv),
        "race" => race::run(dev, argv),
        "hold" => hold(dev, argv),
        "bench" => crate::bench::run(dev, argv),
        _ => Err(Usage(format!("unknown command {cmd:?}")).into()),
    }
}

fn ok() -> Result<Outcome, Failure> {
    outln!("ok=1");
    Ok(Outcome::Ok)
}

fn xfer_len(s: &str) -> Result<usize, String> {
    let n = parse::size(s)?;
    if n > MAX_XFER {
        return Err(format!(
            "{n} bytes is more than the {MAX_XFER}-byte limit of one transfer"
        ));
    }
    Ok(n as usize)
}

fn parse_engine(s: &str) -> Result<Engine, String> {
    Engine::parse(s).ok_or_else(|| format!("unknown engine {s:?} (cpu or edu)"))
}

/// The engine from `--engine`, else positional `i` if it is `edu`/`cpu`.
/// Returns the engine and whether positional `i` was consumed.
fn engine_at(a: &Args, i: usize) -> Result<(Engine, bool), Usage> {
    if let Some(e) = a.pos.get(i).and_then(|s| Engine::parse(s)) {
        return Ok((e, true));
    }
    Ok((a.get("engine", Engine::Cpu, parse_engine)?, false))
}

fn engine(a: &Args) -> Result<Engine, Usage> {
    a.get("engine", Engine::Cpu, parse_engine)
}

fn access(s: &str) -> Result<u32, String> {
    let mut m = 0;
    for part in s.split(',').filter(|p| !p.is_empty()) {
        m |= match part {
            "lw" | "local_write" => PSIM_ACCESS_LOCAL_WRITE,
            "rw" | "remote_write" => PSIM_ACCESS_REMOTE_WRITE,
            "rr" | "remote_read" => PSIM_ACCESS_REMOTE_READ,
            "none" => 0,
            n => parse::number32(n)
                .map_err(|_| format!("unknown access {n:?} (lw,rw,rr or a number)"))?,
        };
    }
    Ok(m)
}

/// The result of a comparison: `ok=1` printed, or the mismatch line.
/// `base` is added to the offsets reported.
fn report(what: &str, base: u64, c: &Comparison) -> Outcome {
    let Some(first) = c.first.first() else {
        return Outcome::Ok;
    };
    for m in &c.first {
        errln!(
            "simtest: {what}: offset {} expected 0x{:02x} actual 0x{:02x}",
            base + m.offset,
            m.expected,
            m.actual
        );
    }
    Outcome::Mismatch(format!(
        "mismatch={} first_offset={} expected=0x{:02x} actual=0x{:02x}",
        c.mismatched_bytes,
        base + first.offset,
        first.expected,
        first.actual
    ))
}

fn print_ok_or(o: Outcome) -> Result<Outcome, Failure> {
    if let Outcome::Ok = o {
        outln!("ok=1");
    }
    Ok(o)
}

fn dump(buf: &[u8]) {
    for (i, chunk) in buf.chunks(16).take(4).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        errln!("{:08x}: {}", i * 16, hex.join(" "));
    }
}

fn gpu_alloc(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    outln!("va=0x{:x}", dev.gpu_alloc(size)?);
    Ok(Outcome::Ok)
}

fn gpu_free(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(1, 1)?;
    dev.gpu_free(a.pos_as(0, "VA", parse::number)?)?;
    ok()
}

fn gpu_fill(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(3, 3)?;
    let va = a.pos_as(0, "VA", parse::number)?;
    let len = a.pos_as(1, "LEN", xfer_len)?;
    let p = a.pos_as(2, "PATTERN", Pattern::parse)?;
    dev.gpu_write(va, &p.make(0, len))?;
    ok()
}

fn gpu_check(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(3, 4)?;
    let va = a.pos_as(0, "VA", parse::number)?;
    let len = a.pos_as(1, "LEN", xfer_len)?;
    let p = a.pos_as(2, "PATTERN", Pattern::parse)?;
    let base = if a.pos.len() > 3 {
        a.pos_as(3, "BASE", parse::size)?
    } else {
        0
    };
    let mut buf = vec![0u8; len];
    dev.gpu_read(va, &mut buf)?;
    print_ok_or(report(
        "gpu-check",
        0,
        &compare(&p.make(base, len), &buf, KEEP_MISMATCHES),
    ))
}

fn gpu_read(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &["dump"])?;
    a.expect_pos(2, 2)?;
    let va = a.pos_as(0, "VA", parse::number)?;
    let len = a.pos_as(1, "LEN", xfer_len)?;
    let mut buf = vec![0u8; len];
    dev.gpu_read(va, &mut buf)?;
    if a.flag("dump") {
        dump(&buf);
    }
    ok()
}

fn mr_reg(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["access"], &[])?;
    a.expect_pos(2, 3)?;
    let va = a.pos_as(0, "VA", parse::number)?;
    let len = a.pos_as(1, "LEN", parse::size)?;
    let acc = if a.pos.len() > 2 {
        a.pos_as(2, "ACCESS", access)?
    } else {
        a.get("access", ACCESS_ALL, access)?
    };
    let mr = dev.mr_reg(va, len, acc)?;
    let client = if mr.client.is_empty() || mr.client.contains(char::is_whitespace) {
        format!("{:?}", mr.client)
    } else {
        mr.client.clone()
    };
    outln!("mr={} sg={} client={client}", mr.id, mr.sg_entries);
    Ok(Outcome::Ok)
}

fn mr_dereg(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(1, 1)?;
    dev.mr_dereg(a.pos_as(0, "ID", parse::number)?)?;
    ok()
}

fn mr_query(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(1, 1)?;
    let q = dev.mr_query(a.pos_as(0, "ID", parse::number)?)?;
    outln!("state={} va=0x{:x} len={}", q.state_name(), q.va, q.len);
    Ok(Outcome::Ok)
}

fn hca_write(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["engine"], &[])?;
    a.expect_pos(4, 5)?;
    let id = a.pos_as(0, "ID", parse::number)?;
    let off = a.pos_as(1, "OFFSET", parse::size)?;
    let len = a.pos_as(2, "LEN", xfer_len)?;
    let p = a.pos_as(3, "PATTERN", Pattern::parse)?;
    let (e, used) = engine_at(&a, 4)?;
    if a.pos.len() > 4 && !used {
        return Err(Usage(format!("unknown engine {:?} (cpu or edu)", a.pos[4])).into());
    }
    dev.hca_write(id, off, &p.make(0, len), e)?;
    ok()
}

fn hca_check(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["engine"], &[])?;
    a.expect_pos(4, 6)?;
    let id = a.pos_as(0, "ID", parse::number)?;
    let off = a.pos_as(1, "OFFSET", parse::size)?;
    let len = a.pos_as(2, "LEN", xfer_len)?;
    let p = a.pos_as(3, "PATTERN", Pattern::parse)?;
    let (e, used) = engine_at(&a, 4)?;
    let base_at = if used { 5 } else { 4 };
    if a.pos.len() > base_at + 1 {
        return Err(Usage(format!("unexpected argument {:?}", a.pos[base_at + 1])).into());
    }
    let base = if a.pos.len() > base_at {
        a.pos_as(base_at, "BASE", parse::size)?
    } else {
        0
    };
    let mut buf = vec![0u8; len];
    dev.hca_read(id, off, &mut buf, e)?;
    print_ok_or(report(
        "hca-check",
        0,
        &compare(&p.make(base, len), &buf, KEEP_MISMATCHES),
    ))
}

fn hca_read(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["engine"], &["dump"])?;
    a.expect_pos(3, 4)?;
    let id = a.pos_as(0, "ID", parse::number)?;
    let off = a.pos_as(1, "OFFSET", parse::size)?;
    let len = a.pos_as(2, "LEN", xfer_len)?;
    let (e, used) = engine_at(&a, 3)?;
    if a.pos.len() > 3 && !used {
        return Err(Usage(format!("unknown engine {:?} (cpu or edu)", a.pos[3])).into());
    }
    let mut buf = vec![0u8; len];
    dev.hca_read(id, off, &mut buf, e)?;
    if a.flag("dump") {
        dump(&buf);
    }
    ok()
}

/// HCA-writes a seeded pattern to `[off, off+len)` of MR `id` (whose GPU
/// address is `va`), then checks it through a GPU read and an HCA read.
/// Prints nothing on success.
pub fn verify(
    dev: &SimDevice,
    id: u64,
    va: u64,
    off: u64,
    len: usize,
    engine: Engine,
    seed: u64,
) -> Result<Outcome, Failure> {
    let p = Pattern::Seeded(seed);
    let data = p.make(0, len);
    dev.hca_write(id, off, &data, engine)?;
    let mut back = vec![0u8; len];
    dev.gpu_read(va + off, &mut back)?;
    let o = report(
        "gpu read after hca write",
        off,
        &compare(&data, &back, KEEP_MISMATCHES),
    );
    if !matches!(o, Outcome::Ok) {
        return Ok(o);
    }
    back.fill(0);
    dev.hca_read(id, off, &mut back, engine)?;
    Ok(report(
        "hca read",
        off,
        &compare(&data, &back, KEEP_MISMATCHES),
    ))
}

fn verify_cmd(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["offset", "len", "engine", "seed"], &[])?;
    a.expect_pos(1, 1)?;
    let id = a.pos_as(0, "ID", parse::number)?;
    let q = dev.mr_query(id)?;
    let off = a.get("offset", 0, parse::size)?;
    if off >= q.len {
        return Err(Usage(format!("--offset {off} is past the MR's {} bytes", q.len)).into());
    }
    let len = a.get("len", (q.len - off).min(MAX_XFER) as usize, xfer_len)?;
    let seed = a.get("seed", crate::rng::fresh_seed(), parse::number)?;
    let e = engine(&a)?;
    let out = verify(dev, id, q.va, off, len, e, seed)?;
    if let Outcome::Ok = out {
        outln!(
            "ok=1 mr={id} offset={off} len={len} engine={} seed={seed}",
            e.name()
        );
    }
    Ok(out)
}

fn roundtrip(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &["offset", "len", "engine", "iters", "seed"], &[])?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", xfer_len)? as u64;
    let off = a.get("offset", 0, parse::size)?;
    if size == 0 || off >= size {
        return Err(Usage(format!("--offset {off} must be below SIZE {size}")).into());
    }
    let len = a.get("len", size - off, parse::size)?;
    if len == 0 || len > size - off {
        return Err(Usage(format!("--len {len} must be 1..={}", size - off)).into());
    }
    let iters = a.get("iters", 1, parse::number)?;
    let seed = a.get("seed", crate::rng::fresh_seed(), parse::number)?;
    let e = engine(&a)?;

    let va = dev.gpu_alloc(size)?;
    // Whatever happens below, free the allocation before returning.
    let result = (|| -> Result<Outcome, Failure> {
        dev.gpu_write(va, &vec![SENTINEL; size as usize])?;
        let mr = dev.mr_reg(va + off, len, ACCESS_ALL)?;
        let body = (|| -> Result<Outcome, Failure> {
            for i in 0..iters {
                let out = verify(
                    dev,
                    mr.id,
                    va + off,
                    0,
                    len as usize,
                    e,
                    seed.wrapping_add(i),
                )?;
                if !matches!(out, Outcome::Ok) {
                    errln!("simtest roundtrip: iteration {i} failed");
                    return Ok(out);
                }
            }
            // The DMA must not have touched a byte outside the MR.
            let mut whole = vec![0u8; size as usize];
            dev.gpu_read(va, &mut whole)?;
            let mut expect = whole.clone();
            expect[..off as usize].fill(SENTINEL);
            expect[(off + len) as usize..].fill(SENTINEL);
            let c = compare(&expect, &whole, KEEP_MISMATCHES);
            if !c.ok() {
                errln!("simtest roundtrip: bytes outside the MR lost the sentinel");
            }
            Ok(report("sentinel outside the MR", 0, &c))
        })();
        let dereg = dev.mr_dereg(mr.id);
        let out = body?;
        dereg?;
        if let Outcome::Ok = out {
            outln!(
                "ok=1 size={size} offset={off} len={len} iters={iters} engine={} seed={seed} client={} sg={}",
                e.name(),
                mr.client,
                mr.sg_entries
            );
        }
        Ok(out)
    })();
    let freed = dev.gpu_free(va);
    let out = result?;
    freed?;
    Ok(out)
}

fn counters(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(0, 1)?;
    let c = dev.counters()?;
    let fields = counter_fields(&c);
    match a.pos.first() {
        None => {
            let words: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            outln!("{}", words.join(" "));
        }
        Some(name) => {
            let v = fields
                .iter()
                .find(|(k, _)| k == name)
                .ok_or_else(|| Usage(format!("unknown counter {name:?}")))?;
            outln!("{}", v.1);
        }
    }
    Ok(Outcome::Ok)
}

fn fault(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    if a.pos.first().map(String::as_str) == Some("clear") {
        a.expect_pos(1, 1)?;
        dev.clear_faults()?;
        return ok();
    }
    a.expect_pos(3, 4)?;
    let op = a.pos[0].clone();
    let nth = a.pos_as(1, "NTH", parse::number32)?;
    let err = a.pos_as(2, "ERRNO", |s| {
        errno::parse(s).ok_or_else(|| format!("unknown errno {s:?}"))
    })?;
    let count = if a.pos.len() > 3 {
        a.pos_as(3, "COUNT", parse::number32)?
    } else {
        0
    };
    dev.fault(&op, nth, err, count)?;
    ok()
}

fn fault_clear(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(0, 0)?;
    dev.clear_faults()?;
    ok()
}

fn delay(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    if a.pos.first().map(String::as_str) == Some("clear") && a.pos.len() <= 2 {
        // `delay clear POINT` = `delay POINT 0`; `delay clear` clears all.
        let point = a.pos.get(1).map_or("", String::as_str);
        dev.delay(point, 0, 0)?;
        return ok();
    }
    a.expect_pos(2, 3)?;
    let ms = a.pos_as(1, "MS", parse::number32)?;
    let count = if a.pos.len() > 2 {
        a.pos_as(2, "COUNT", parse::number32)?
    } else {
        0
    };
    dev.delay(&a.pos[0], ms, count)?;
    ok()
}

/// `release [POINT]`: the threads held at POINT (every point without one)
/// go on now.
fn release(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(0, 1)?;
    dev.release(a.pos.first().map_or("", String::as_str))?;
    ok()
}

fn config(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    let mut cfg = ProviderConfig::default();
    for kv in &a.pos {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Usage(format!("expected key=value, got {kv:?}")))?;
        let bad = |e: String| Usage(format!("{k}: {e}"));
        match k.replace('-', "_").as_str() {
            "page_size" => {
                cfg.page_size_type = match v.to_ascii_lowercase().as_str() {
                    "4k" | "0" => 0,
                    "64k" | "1" => 1,
                    "128k" | "2" => 2,
                    _ => return Err(bad(format!("{v:?} is not 4k, 64k or 128k")).into()),
                }
            }
            "pt_version" => cfg.page_table_version = parse::number32(v).map_err(bad)?,
            "map_version" => cfg.dma_mapping_version = parse::number32(v).map_err(bad)?,
            "scale" => cfg.scale_alias_pages = parse::number32(v).map_err(bad)?,
            "persistent" => {
                cfg.persistent_supported = match v {
                    "0" => 0,
                    "1" => 1,
                    _ => return Err(bad(format!("{v:?} is not 0 or 1")).into()),
                }
            }
            "contiguous" | "contiguous_backing" => {
                cfg.contiguous_backing = match v {
                    "0" => 0,
                    "1" => 1,
                    _ => return Err(bad(format!("{v:?} is not 0 or 1")).into()),
                }
            }
            _ => {
                let known = "page_size pt_version map_version scale persistent contiguous";
                return Err(Usage(format!("unknown key {k:?} ({known})")).into());
            }
        }
    }
    dev.provider_config(&cfg)?;
    ok()
}

fn leak_check(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(0, 0)?;
    let l = dev.leak_check()?;
    let mut words: Vec<String> = leak_fields(&l)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let left = leftovers(&l);
    words.push(format!("leaks={}", left.len()));
    outln!("{}", words.join(" "));
    if left.is_empty() {
        return Ok(Outcome::Ok);
    }
    let list: Vec<String> = left.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Outcome::CheckFailed(format!(
        "left behind: {}",
        list.join(" ")
    )))
}

fn phase_times(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &["reset"])?;
    a.expect_pos(0, 1)?;
    let reset = match a.pos.first().map(String::as_str) {
        None => a.flag("reset"),
        Some("reset") => true,
        Some(x) => return Err(Usage(format!("unexpected argument {x:?} (reset)")).into()),
    };
    let t = dev.phase_times(reset)?;
    let mut words = Vec::new();
    for r in phase_rows(&t) {
        words.push(format!("{}_calls={}", r.name, r.calls));
        words.push(format!("{}_total_ns={}", r.name, r.total_ns));
        words.push(format!("{}_last_ns={}", r.name, r.last_ns));
        words.push(format!("{}_max_ns={}", r.name, r.max_ns));
    }
    outln!("{}", words.join(" "));
    Ok(Outcome::Ok)
}

fn hold(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(argv, &[], &[])?;
    a.expect_pos(2, 2)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    let secs = a.pos_as(1, "SECONDS", parse::number)?;
    let va = dev.gpu_alloc(size)?;
    let reg = dev.mr_reg(va, size, ACCESS_ALL);
    if let Ok(mr) = &reg {
        errln!("simtest hold: va=0x{va:x} mr={} for {secs}s", mr.id);
        std::thread::sleep(std::time::Duration::from_secs(secs));
    }
    let dereg = reg.as_ref().ok().map(|mr| dev.mr_dereg(mr.id));
    let freed = dev.gpu_free(va);
    reg?;
    dereg.unwrap_or(Ok(()))?;
    freed?;
    ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_masks() {
        assert_eq!(access("lw,rw,rr"), Ok(ACCESS_ALL));
        assert_eq!(access("rw"), Ok(PSIM_ACCESS_REMOTE_WRITE));
        assert_eq!(access("none"), Ok(0));
        assert_eq!(access("0x80"), Ok(0x80));
        assert!(access("xx").is_err());
    }

    #[test]
    fn xfer_limit() {
        assert_eq!(xfer_len("4K"), Ok(4096));
        assert!(xfer_len("2G").is_err());
    }

    #[test]
    fn engine_positional() {
        let argv: Vec<String> = ["1", "0", "4K", "seq", "edu"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = Args::parse(&argv, &["engine"], &[]).unwrap();
        assert_eq!(engine_at(&a, 4).unwrap(), (Engine::Edu, true));
        assert_eq!(engine_at(&a, 5).unwrap(), (Engine::Cpu, false));
    }

    #[test]
    fn mismatch_line_format() {
        let c = compare(&[1, 2, 3, 4], &[1, 9, 3, 8], 4);
        match report("x", 100, &c) {
            Outcome::Mismatch(l) => {
                assert_eq!(l, "mismatch=2 first_offset=101 expected=0x02 actual=0x09")
            }
            _ => panic!("expected a mismatch"),
        }
        assert!(matches!(
            report("x", 0, &compare(&[1], &[1], 4)),
            Outcome::Ok
        ));
    }

    #[test]
    fn every_command_dispatches() {
        // Dispatching a known command with bad arguments must give a usage
        // error, never "unknown command" (keeps COMMANDS and run() in sync).
        let dev = SimDevice::open_path("/dev/null").unwrap();
        for c in COMMANDS {
            let r = run(&dev, c, &["--no-such-option".to_string()]);
            match r {
                Err(Failure::Usage(Usage(m))) => {
                    assert!(!m.contains("unknown command"), "{c}: {m}")
                }
                _ => panic!("{c}: expected a usage error"),
            }
        }
    }
}
