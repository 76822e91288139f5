// SPDX-License-Identifier: GPL-2.0
//! `bench` on a real node: ibv_reg_mr/ibv_dereg_mr latency on GPU memory by
//! size, and host-to-GPU write bandwidth straight into GPU memory (RDMA
//! WRITE into the GPU MR) against a host bounce buffer (RDMA WRITE into host
//! memory, then cuMemcpyHtoD). Without an RDMA NIC it still measures the
//! host-to-GPU copy leg and says why the rest is missing.

use std::time::{Duration, Instant};

use serde_json::json;

use super::cuda::{self, Context, DeviceBuffer};
use super::hostmem::HostBuffer;
use super::target::Target;
use super::verbs::{self, Verbs};
use crate::bench::{self, BenchResult, SizeResult, Stats};
use crate::causes::Op;
use crate::error::fail;
use crate::report::Check;
use crate::sim::finish_bench;
use crate::Memory;
use crate::{Backend, BenchArgs, Outcome};

const TIMEOUT: Duration = Duration::from_secs(10);

fn elapsed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

pub fn run(a: &BenchArgs, json_mode: bool) -> Outcome {
    let mut o = Outcome {
        command: "bench",
        backend: Backend::Real,
        checks: Vec::new(),
        extra: json!({}),
        notes: Vec::new(),
    };
    // --memory host: no CUDA at all; the target is page-aligned host memory.
    let ctx = match a.memory {
        Memory::Host => None,
        Memory::Gpu => match Context::new(a.hw.gpu) {
            Ok(c) => Some(c),
            Err(e) => {
                o.checks.push(fail("cuda", "CUDA driver", &e));
                return o;
            }
        },
    };
    let attrs = ctx.as_ref().and_then(|_| cuda::gpu_attrs(a.hw.gpu).ok());
    let gpu_name = match &ctx {
        Some(_) => attrs.as_ref().map_or("GPU".to_string(), |g| {
            format!("{} [{}]", g.name, g.pci_bus_id)
        }),
        None => "host memory".to_string(),
    };
    let (device, choice) = super::validate::choose_device(
        a.hw.device.as_deref(),
        attrs.as_ref().map(|g| g.pci_bus_id.as_str()),
    );
    o.checks.push(choice);
    let method = match &ctx {
        Some(_) => "reg/dereg: wall time of ibv_reg_mr/ibv_dereg_mr on cuMemAlloc memory; direct: RDMA WRITE from a registered host buffer into the GPU MR (loopback RC QP, completion waited); bounce: RDMA WRITE into a registered host buffer, then cuMemcpyHtoD from it; copy: cuMemcpyHtoD from pageable host memory",
        None => "--memory host: reg/dereg: wall time of ibv_reg_mr/ibv_dereg_mr on a page-aligned host target buffer; direct: RDMA WRITE from a registered host buffer into the target MR (loopback RC QP, completion waited); bounce: RDMA WRITE into a registered staging buffer, then memcpy into the target; copy: memcpy into the target",
    };
    let target_op = if ctx.is_some() {
        Op::RegGpuMr
    } else {
        Op::RegHostMr
    };
    let mut result = BenchResult {
        backend: "real".into(),
        platform: gpu_name.clone(),
        method: method.into(),
        results: Vec::new(),
    };
    // The RDMA side, if there is one.
    let v = Verbs::load();
    let dev = v.as_ref().ok().map(|v| v.open(device.as_deref()));
    let rdma_err = match (&v, &dev) {
        (Err(e), _) => Some(fail("rdma", "RDMA figures", e)),
        (Ok(_), Some(Err(e))) => Some(fail("rdma", "RDMA figures", e)),
        _ => None,
    };
    let dev = dev.and_then(|d| d.ok());
    let pd = dev.as_ref().map(|d| d.alloc_pd());
    let cq = dev.as_ref().map(|d| d.create_cq(32));
    let mut rdma_problem = rdma_err;
    let mut qp_holder = None;
    if let (Some(Ok(pd)), Some(Ok(cq)), Some(d)) = (&pd, &cq, &dev) {
        match pd.create_rc_qp(cq) {
            Ok(qp) => {
                let p = d.query_port(a.hw.port);
                match p {
                    Ok(p) if p.is_active() => {
                        let l = verbs::Loopback {
                            port: a.hw.port,
                            lid: p.lid,
                            mtu: p.active_mtu,
                            gid: if p.is_ethernet() {
                                d.query_gid(a.hw.port, i32::from(a.hw.gid_index.unwrap_or(0)))
                                    .ok()
                                    .map(|g| (g, a.hw.gid_index.unwrap_or(0)))
                            } else {
                                None
                            },
                        };
                        match qp.connect_loopback(&l) {
                            Ok(()) => {
                                result.platform = format!("{gpu_name} + {}", d.name);
                                qp_holder = Some(qp);
                            }
                            Err(e) => rdma_problem = Some(fail("rdma", "RDMA figures", &e)),
                        }
                    }
                    Ok(_) => {
                        rdma_problem = Some(
                            Check::warn(
                                "rdma",
                                "RDMA figures",
                                format!("{} port {} is not ACTIVE", d.name, a.hw.port),
                            )
                            .fix("bring the link up (ibstat)"),
                        )
                    }
                    Err(e) => rdma_problem = Some(fail("rdma", "RDMA figures", &e)),
                }
            }
            Err(e) => rdma_problem = Some(fail("rdma", "RDMA figures", &e)),
        }
    } else if rdma_problem.is_none() {
        if let Some(Err(e)) = &pd {
            rdma_problem = Some(fail("rdma", "RDMA figures", e));
        } else if let Some(Err(e)) = &cq {
            rdma_problem = Some(fail("rdma", "RDMA figures", e));
        }
    }
    let per_size = if qp_holder.is_some() { 4 } else { 1 };
    let pb = bench::progress(a.sizes.len() as u64 * a.iterations * per_size, json_mode);
    pb.set_prefix("bench");
    for &size in &a.sizes {
        pb.set_message(bench::size_label(size));
        let buf = match &ctx {
            Some(ctx) => DeviceBuffer::new(ctx, size as usize)
                .map(Target::Gpu)
                .map_err(|e| e.to_string()),
            None => HostBuffer::new(size as usize)
                .map(Target::Host)
                .map_err(|e| e.to_string()),
        };
        let buf = match buf {
            Ok(b) => b,
            Err(e) => {
                o.checks
                    .push(Check::fail("gpu_alloc", "Target allocation", e));
                break;
            }
        };
        let host = peermem_sim::pattern::Pattern::Seeded(size).make(0, size as usize);
        let mut r = SizeResult {
            size,
            iterations: a.iterations,
            ..Default::default()
        };
        let mut copy = Vec::new();
        for _ in 0..a.iterations {
            let (res, t) = elapsed(|| buf.write(0, &host));
            if let Err(e) = res {
                o.checks
                    .push(Check::fail("gpu_copy", "cuMemcpyHtoD", e.to_string()));
                break;
            }
            copy.push(bench::mib_s(size, t));
            pb.inc(1);
        }
        r.copy_mib_s = Stats::of(&copy).map(|s| s.median);
        if let (Some(qp), Some(Ok(pd))) = (&qp_holder, &pd) {
            let mut reg = Vec::new();
            let mut dereg = Vec::new();
            let mut failed = None;
            for _ in 0..a.iterations {
                let (m, t) = elapsed(|| pd.reg_mr(buf.ptr(), size as usize, target_op));
                match m {
                    Ok(m) => {
                        reg.push(t);
                        let (d, t) = elapsed(|| m.dereg());
                        if let Err(e) = d {
                            failed = Some(e);
                            break;
                        }
                        dereg.push(t);
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
                pb.inc(1);
            }
            r.reg_ns = Stats::of_durations(&reg);
            r.dereg_ns = Stats::of_durations(&dereg);
            if let Some(e) = failed {
                o.checks
                    .push(fail("reg", "ibv_reg_mr on the target memory", &e));
            } else {
                let bw = (|| -> Result<(Vec<f64>, Vec<f64>), verbs::VerbsError> {
                    let gmr = pd.reg_mr(buf.ptr(), size as usize, target_op)?;
                    let src = host.clone();
                    let mut bounce = vec![0u8; size as usize];
                    let smr = pd.reg_mr(src.as_ptr() as u64, src.len(), Op::RegHostMr)?;
                    let bmr = pd.reg_mr(bounce.as_mut_ptr() as u64, bounce.len(), Op::RegHostMr)?;
                    let (mut direct, mut via) = (Vec::new(), Vec::new());
                    let chunk = 1u64 << 30;
                    for _ in 0..a.iterations {
                        let t = Instant::now();
                        qp.rdma(
                            verbs::RdmaOp {
                                direction: verbs::Direction::Write,
                                laddr: src.as_ptr() as u64,
                                lkey: smr.lkey(),
                                raddr: buf.ptr(),
                                rkey: gmr.rkey(),
                                len: size,
                            },
                            chunk,
                            TIMEOUT,
                        )?;
                        direct.push(bench::mib_s(size, t.elapsed()));
                        pb.inc(1);
                        let t = Instant::now();
                        qp.rdma(
                            verbs::RdmaOp {
                                direction: verbs::Direction::Write,
                                laddr: src.as_ptr() as u64,
                                lkey: smr.lkey(),
                                raddr: bounce.as_ptr() as u64,
                                rkey: bmr.rkey(),
                                len: size,
                            },
                            chunk,
                            TIMEOUT,
                        )?;
                        buf.write(0, &bounce).map_err(|e| verbs::VerbsError {
                            op: Op::Completion,
                            call: "cuMemcpyHtoD",
                            errno: 0,
                            detail: e.to_string(),
                        })?;
                        via.push(bench::mib_s(size, t.elapsed()));
                        pb.inc(1);
                    }
                    drop((smr, bmr));
                    gmr.dereg()?;
                    Ok((direct, via))
                })();
                match bw {
                    Ok((d, b)) => {
                        r.direct_mib_s = Stats::of(&d).map(|s| s.median);
                        r.bounce_mib_s = Stats::of(&b).map(|s| s.median);
                    }
                    Err(e) => o.checks.push(fail("bandwidth", "RDMA bandwidth", &e)),
                }
            }
        }
        result.results.push(r);
    }
    pb.finish_and_clear();
    if let Some(mut c) = rdma_problem {
        // Registration and RDMA figures need a NIC; the copy leg was measured.
        c.verdict = crate::report::Verdict::Warn;
        c.detail = format!("registration and RDMA bandwidth not measured: {}", c.detail);
        o.checks.push(c);
    }
    finish_bench(&mut o, result, a);
    o
}
