// SPDX-License-Identifier: GPL-2.0
//! `bench` on a real node: ibv_reg_mr/ibv_dereg_mr latency on GPU memory by
//! size, and host-to-GPU write bandwidth straight into GPU memory (RDMA
//! WRITE into the GPU MR) against a host bounce buffer (RDMA WRITE into host
//! memory, then cuMemcpyHtoD). Without an RDMA NIC it still measures the
//! host-to-GPU copy leg and says why the rest is missing.

use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::json;

use super::cuda::{self, Context, DeviceBuffer};
use super::hostmem::HostBuffer;
use super::target::Target;
use super::validate::choose_device;
use super::verbs::{self, Cq, Device, Pd, Qp, Verbs, VerbsError};
use crate::bench::{self, BenchResult, SizeResult, Stats};
use crate::causes::Op;
use crate::error::fail;
use crate::report::{Check, Stop};
use crate::sim::finish_bench;
use crate::Memory;
use crate::{Backend, BenchArgs, HwArgs, Outcome};

const TIMEOUT: Duration = Duration::from_secs(10);

fn elapsed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// How each figure is measured, with GPU memory or (`gpu` false) with
/// `--memory host`.
fn method(gpu: bool) -> &'static str {
    if gpu {
        "reg/dereg: wall time of ibv_reg_mr/ibv_dereg_mr on cuMemAlloc memory; direct: RDMA WRITE from a registered host buffer into the GPU MR (loopback RC QP, completion waited); bounce: RDMA WRITE into a registered host buffer, then cuMemcpyHtoD from it; copy: cuMemcpyHtoD from pageable host memory"
    } else {
        "--memory host: reg/dereg: wall time of ibv_reg_mr/ibv_dereg_mr on a page-aligned host target buffer; direct: RDMA WRITE from a registered host buffer into the target MR (loopback RC QP, completion waited); bounce: RDMA WRITE into a registered staging buffer, then memcpy into the target; copy: memcpy into the target"
    }
}

/// The CUDA context of `--memory gpu`; `None` with `--memory host`, which
/// needs no CUDA at all.
fn open_cuda(a: &BenchArgs) -> Result<Option<Context>, Stop> {
    match a.memory {
        Memory::Host => Ok(None),
        Memory::Gpu => Context::new(a.hw.gpu)
            .map(Some)
            .map_err(|e| Box::new(fail("cuda", "CUDA driver", &e))),
    }
}

/// Why the RDMA figures cannot be measured, as a check.
fn rdma_fail(e: &VerbsError) -> Stop {
    Box::new(fail("rdma", "RDMA figures", e))
}

/// The RDMA side of the figures, if there is one: a loopback RC queue pair
/// on port `hw.port` of `dev`, with `pd` and `cq` opened on it.
fn rdma_side<'d, 'p>(
    dev: &verbs::Result<Device>,
    pd: &'p verbs::Result<Pd<'d>>,
    cq: &'d verbs::Result<Cq<'d>>,
    hw: &HwArgs,
) -> Result<Qp<'p>, Stop> {
    let d = dev.as_ref().map_err(rdma_fail)?;
    let pd = pd.as_ref().map_err(rdma_fail)?;
    let cq = cq.as_ref().map_err(rdma_fail)?;
    let qp = pd.create_rc_qp(cq).map_err(|e| rdma_fail(&e))?;
    let p = d.query_port(hw.port).map_err(|e| rdma_fail(&e))?;
    if !p.is_active() {
        return Err(Box::new(
            Check::warn(
                "rdma",
                "RDMA figures",
                format!("{} port {} is not ACTIVE", d.name, hw.port),
            )
            .fix("bring the link up (ibstat)"),
        ));
    }
    let gid_index = hw.gid_index.unwrap_or(0);
    let l = verbs::Loopback {
        port: hw.port,
        lid: p.lid,
        mtu: p.active_mtu,
        gid: if p.is_ethernet() {
            d.query_gid(hw.port, i32::from(gid_index))
                .ok()
                .map(|g| (g, gid_index))
        } else {
            None
        },
    };
    qp.connect_loopback(&l).map_err(|e| rdma_fail(&e))?;
    Ok(qp)
}

/// The memory measured: `size` bytes of GPU memory, or of page-aligned host
/// memory without a CUDA context.
fn alloc_target(ctx: Option<&Context>, size: u64) -> Result<Target<'_>, String> {
    match ctx {
        Some(ctx) => DeviceBuffer::new(ctx, size as usize)
            .map(Target::Gpu)
            .map_err(|e| e.to_string()),
        None => HostBuffer::new(size as usize)
            .map(Target::Host)
            .map_err(|e| e.to_string()),
    }
}

/// The copy leg: `host` written into `buf` `iterations` times; the median
/// MiB/s.
fn measure_copy(
    buf: &Target,
    host: &[u8],
    iterations: u64,
    pb: &ProgressBar,
    checks: &mut Vec<Check>,
) -> Option<f64> {
    let mut copy = Vec::new();
    for _ in 0..iterations {
        let (res, t) = elapsed(|| buf.write(0, host));
        if let Err(e) = res {
            checks.push(Check::fail("gpu_copy", "cuMemcpyHtoD", e.to_string()));
            break;
        }
        copy.push(bench::mib_s(host.len() as u64, t));
        pb.inc(1);
    }
    Stats::of(&copy).map(|s| s.median)
}

/// Registration and deregistration times of `buf`, and the error that cut
/// them short, if one did.
struct RegTimes {
    reg: Vec<Duration>,
    dereg: Vec<Duration>,
    failed: Option<VerbsError>,
}

/// `iterations` registrations and deregistrations of `len` bytes of `buf`.
fn measure_reg(
    pd: &Pd,
    (buf, len): (&Target, usize),
    iterations: u64,
    pb: &ProgressBar,
) -> RegTimes {
    let mut times = RegTimes {
        reg: Vec::new(),
        dereg: Vec::new(),
        failed: None,
    };
    for _ in 0..iterations {
        let (m, t) = elapsed(|| pd.reg_mr(buf.ptr(), len, target_op(buf)));
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                times.failed = Some(e);
                break;
            }
        };
        times.reg.push(t);
        let (d, t) = elapsed(|| m.dereg());
        if let Err(e) = d {
            times.failed = Some(e);
            break;
        }
        times.dereg.push(t);
        pb.inc(1);
    }
    times
}

/// How `buf` is registered, for the cause of a failure.
fn target_op(buf: &Target) -> Op {
    match buf {
        Target::Gpu(_) => Op::RegGpuMr,
        Target::Host(_) => Op::RegHostMr,
    }
}

/// One RDMA WRITE of `len` bytes from `src` into `raddr`; the time it took.
fn write_once(
    qp: &Qp,
    (src, lkey): (&[u8], u32),
    (raddr, rkey): (u64, u32),
) -> verbs::Result<Duration> {
    let t = Instant::now();
    qp.rdma(
        verbs::RdmaOp {
            direction: verbs::Direction::Write,
            laddr: src.as_ptr() as u64,
            lkey,
            raddr,
            rkey,
            len: src.len() as u64,
        },
        1 << 30,
        TIMEOUT,
    )?;
    Ok(t.elapsed())
}

/// Direct and bounce bandwidth, MiB/s per iteration: `host` written by RDMA
/// into `buf`, and into a host bounce buffer then copied into `buf`.
fn measure_bandwidth(
    (qp, pd): (&Qp, &Pd),
    buf: &Target,
    host: &[u8],
    iterations: u64,
    pb: &ProgressBar,
) -> verbs::Result<(Vec<f64>, Vec<f64>)> {
    let size = host.len();
    let gmr = pd.reg_mr(buf.ptr(), size, target_op(buf))?;
    let src = host.to_vec();
    let mut bounce = vec![0u8; size];
    let smr = pd.reg_mr(src.as_ptr() as u64, src.len(), Op::RegHostMr)?;
    let bmr = pd.reg_mr(bounce.as_mut_ptr() as u64, bounce.len(), Op::RegHostMr)?;
    let (mut direct, mut via) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let t = write_once(qp, (&src, smr.lkey()), (buf.ptr(), gmr.rkey()))?;
        direct.push(bench::mib_s(size as u64, t));
        pb.inc(1);
        let t = Instant::now();
        write_once(qp, (&src, smr.lkey()), (bounce.as_ptr() as u64, bmr.rkey()))?;
        buf.write(0, &bounce).map_err(|e| VerbsError {
            op: Op::Completion,
            call: "cuMemcpyHtoD",
            errno: 0,
            detail: e.to_string(),
        })?;
        via.push(bench::mib_s(size as u64, t.elapsed()));
        pb.inc(1);
    }
    drop((smr, bmr));
    gmr.dereg()?;
    Ok((direct, via))
}

/// The figures of one size on `buf`: the copy leg, and with an RDMA side
/// registration latency and direct vs bounce bandwidth.
fn bench_size(
    a: &BenchArgs,
    (buf, size): (&Target, u64),
    rdma: Option<(&Qp, &Pd)>,
    pb: &ProgressBar,
    checks: &mut Vec<Check>,
) -> SizeResult {
    let host = peermem_sim::pattern::Pattern::Seeded(size).make(0, size as usize);
    let mut r = SizeResult {
        size,
        iterations: a.iterations,
        ..Default::default()
    };
    r.copy_mib_s = measure_copy(buf, &host, a.iterations, pb, checks);
    let Some((qp, pd)) = rdma else {
        return r;
    };
    let times = measure_reg(pd, (buf, size as usize), a.iterations, pb);
    r.reg_ns = Stats::of_durations(&times.reg);
    r.dereg_ns = Stats::of_durations(&times.dereg);
    if let Some(e) = times.failed {
        checks.push(fail("reg", "ibv_reg_mr on the target memory", &e));
        return r;
    }
    match measure_bandwidth((qp, pd), buf, &host, a.iterations, pb) {
        Ok((d, b)) => {
            r.direct_mib_s = Stats::of(&d).map(|s| s.median);
            r.bounce_mib_s = Stats::of(&b).map(|s| s.median);
        }
        Err(e) => checks.push(fail("bandwidth", "RDMA bandwidth", &e)),
    }
    r
}

pub fn run(a: &BenchArgs, json_mode: bool) -> Outcome {
    let mut o = Outcome {
        command: "bench",
        backend: Backend::Real,
        checks: Vec::new(),
        extra: json!({}),
        notes: Vec::new(),
    };
    let ctx = match open_cuda(a) {
        Ok(c) => c,
        Err(failed) => {
            o.checks.push(*failed);
            return o;
        }
    };
    let attrs = ctx.as_ref().and_then(|_| cuda::gpu_attrs(a.hw.gpu).ok());
    let gpu_name = match &ctx {
        Some(_) => attrs.as_ref().map_or("GPU".to_string(), |g| {
            format!("{} [{}]", g.name, g.pci_bus_id)
        }),
        None => "host memory".to_string(),
    };
    let (device, choice) = choose_device(
        a.hw.device.as_deref(),
        attrs.as_ref().map(|g| g.pci_bus_id.as_str()),
    );
    o.checks.push(choice);
    let mut result = BenchResult {
        backend: "real".into(),
        platform: gpu_name.clone(),
        method: method(ctx.is_some()).into(),
        results: Vec::new(),
    };
    let v = Verbs::load();
    let dev = v
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|v| v.open(device.as_deref()));
    let pd = dev
        .as_ref()
        .map_err(Clone::clone)
        .and_then(Device::alloc_pd);
    let cq = dev
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|d| d.create_cq(32));
    let qp = rdma_side(&dev, &pd, &cq, &a.hw);
    let rdma = match (&qp, &dev, &pd) {
        (Ok(qp), Ok(d), Ok(pd)) => {
            result.platform = format!("{gpu_name} + {}", d.name);
            Some((qp, pd))
        }
        _ => None,
    };
    let per_size = if rdma.is_some() { 4 } else { 1 };
    let pb = bench::progress(a.sizes.len() as u64 * a.iterations * per_size, json_mode);
    pb.set_prefix("bench");
    for &size in &a.sizes {
        pb.set_message(bench::size_label(size));
        let buf = match alloc_target(ctx.as_ref(), size) {
            Ok(b) => b,
            Err(e) => {
                o.checks
                    .push(Check::fail("gpu_alloc", "Target allocation", e));
                break;
            }
        };
        let r = bench_size(a, (&buf, size), rdma, &pb, &mut o.checks);
        result.results.push(r);
    }
    pb.finish_and_clear();
    if let Err(c) = qp {
        let mut c = *c;
        // Registration and RDMA figures need a NIC; the copy leg was measured.
        c.verdict = crate::report::Verdict::Warn;
        c.detail = format!("registration and RDMA bandwidth not measured: {}", c.detail);
        o.checks.push(c);
    }
    finish_bench(&mut o, result, a);
    o
}
