// SPDX-License-Identifier: GPL-2.0
//! `validate` on a real node: allocate GPU memory (cuMemAlloc), fill a
//! sentinel, register it (ibv_reg_mr = the peer-memory client; and/or
//! ibv_reg_dmabuf_mr on a dma-buf from cuMemGetHandleForAddressRange), RDMA
//! WRITE a pattern into it from a host buffer over a loopback RC queue pair,
//! RDMA READ it back, flush GPUDirect writes, copy the GPU memory to the host
//! and compare, sentinel included. Each step is a check; a failed step says
//! its likely cause.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use peermem_sim::pattern::{compare, Pattern};

use super::cuda::{self, Context, CudaError, DeviceBuffer};
use super::hostmem::HostBuffer;
use super::target::Target;
use super::verbs::{
    self, Device, Direction, DmabufSupport, Gid, Loopback, Pd, Qp, Verbs, VerbsError,
};
use crate::causes::Op;
use crate::error::{fail, Error};
use crate::gpuinfo::{ordering_name, GpuAttrs, WRITES_ORDERING_OWNER};
use crate::report::Check;
use crate::{Backend, Memory, Outcome, RegPath, ValidateArgs, VerbsFault, HOLD_LIMIT};

const GPU_PAGE: u64 = 64 << 10;
const SENTINEL: u8 = 0xa5;
const KEEP: usize = 8;
/// Largest single RDMA message we post.
const MAX_WR: u64 = 1 << 30;
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// The RDMA device to open: `-d NAME` as given, else the one nearest to the
/// GPU at `gpu_bdf` in the PCIe topology (sysfs), else libibverbs' first.
/// Also the check that says which was taken and why.
pub fn choose_device(given: Option<&str>, gpu_bdf: Option<&str>) -> (Option<String>, Check) {
    const T: &str = "RDMA device choice";
    let root = crate::doctor::SysRoot::new("/");
    let all = crate::doctor::pci::rdma_devices_by_distance(&root, gpu_bdf);
    let link_of = |n: &str| {
        all.iter()
            .find(|c| c.name == n)
            .and_then(|c| c.link)
            .map_or("no PCI path known", |l| l.name())
    };
    let others = |skip: &str| {
        let o: Vec<String> = all
            .iter()
            .filter(|c| c.name != skip)
            .map(|c| format!("{} {}", c.name, link_of(&c.name)))
            .collect();
        if o.is_empty() {
            String::new()
        } else {
            format!("; others: {}", o.join(", "))
        }
    };
    let gpu = gpu_bdf.map_or("host memory (no GPU)".to_string(), |b| format!("GPU {b}"));
    let data = json!({"gpu": gpu_bdf, "devices": all});
    match given {
        Some(d) => (
            Some(d.to_string()),
            Check::pass(
                "rdma_device_choice",
                T,
                match (
                    gpu_bdf,
                    all.iter().find(|c| c.name == d).and_then(|c| c.link),
                ) {
                    (Some(_), Some(l)) => {
                        format!("{d} (given with -d): {} to {gpu}{}", l.name(), others(d))
                    }
                    _ => format!("{d} (given with -d){}", others(d)),
                },
            )
            .data(data),
        ),
        None => match all.first() {
            Some(c) if gpu_bdf.is_some() && c.link.is_some() => (
                Some(c.name.clone()),
                Check::pass(
                    "rdma_device_choice",
                    T,
                    format!(
                        "{}: nearest to {gpu} ({}){}",
                        c.name,
                        link_of(&c.name),
                        others(&c.name)
                    ),
                )
                .data(data),
            ),
            Some(c) => (
                Some(c.name.clone()),
                Check::pass(
                    "rdma_device_choice",
                    T,
                    format!(
                        "{}: the first by name ({}){}; choose with -d",
                        c.name,
                        if gpu_bdf.is_some() {
                            format!("no PCIe path to {gpu} known")
                        } else {
                            "no GPU to measure the distance from".to_string()
                        },
                        others(&c.name)
                    ),
                )
                .data(data),
            ),
            None => (
                None,
                Check::pass(
                    "rdma_device_choice",
                    T,
                    "no device in /sys/class/infiniband: libibverbs' first",
                )
                .data(data),
            ),
        },
    }
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

fn gpu_line(g: &GpuAttrs, driver: Option<i32>) -> String {
    let yn = |v: Option<bool>| match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    format!(
        "GPU{} {} [{}], {} MiB, CUDA driver {}; GPUDirect RDMA supported: {}, dma-buf supported: {}, RDMA writes ordering: {}",
        g.index,
        g.name,
        g.pci_bus_id,
        g.total_mem >> 20,
        driver.map_or("?".to_string(), |v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        yn(g.gpudirect_rdma_supported),
        yn(g.dma_buf_supported),
        g.rdma_writes_ordering.map_or("unknown", ordering_name)
    )
}

/// The GPU half on its own: allocation, sentinel, host<->GPU copy of a
/// pattern, dma-buf export. Runs before any verbs call so a node without a
/// NIC still shows what its GPU can do.
fn gpu_half(ctx: &Context, a: &ValidateArgs, g: &GpuAttrs, checks: &mut Vec<Check>) -> bool {
    let size = a.sizes.iter().copied().max().unwrap_or(1 << 20);
    let off = a.offsets.iter().copied().max().unwrap_or(0);
    let alloc = round_up(size + off, GPU_PAGE) as usize;
    let buf = match DeviceBuffer::new(ctx, alloc) {
        Ok(b) => b,
        Err(e) => {
            checks.push(fail("gpu_alloc", "GPU allocation (cuMemAlloc)", &e));
            return false;
        }
    };
    let r = (|| -> Result<(), CudaError> {
        buf.fill(SENTINEL)?;
        let p = Pattern::Seeded(0x5eed).make(0, size as usize);
        buf.write(off as usize, &p)?;
        let mut back = vec![0u8; alloc];
        buf.read(0, &mut back)?;
        let mut expect = vec![SENTINEL; alloc];
        expect[off as usize..(off + size) as usize].copy_from_slice(&p);
        let c = compare(&expect, &back, 1);
        if !c.ok() {
            return Err(CudaError {
                call: "compare",
                name: "GPU memory mismatch".into(),
                text: format!(
                    "{} byte(s) differ after cuMemcpyHtoD/DtoH",
                    c.mismatched_bytes
                ),
            });
        }
        Ok(())
    })();
    match r {
        Ok(()) => checks.push(Check::pass(
            "gpu_alloc",
            "GPU memory (cuMemAlloc, sentinel, copy)",
            format!(
                "{alloc} bytes at 0x{:x}, SYNC_MEMOPS set, 0x{SENTINEL:02x} sentinel and a host<->GPU pattern round trip intact",
                buf.ptr()
            ),
        )),
        Err(e) => {
            checks.push(fail("gpu_alloc", "GPU memory (cuMemAlloc, sentinel, copy)", &e));
            return false;
        }
    }
    if a.path != RegPath::Peermem {
        if g.dma_buf_supported == Some(false) {
            checks.push(
                Check::skip(
                    "dmabuf_export",
                    "dma-buf export",
                    "the GPU reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0",
                )
                .fix("dma-buf needs the open NVIDIA kernel modules"),
            );
        } else {
            match buf.export_dmabuf(0, alloc) {
                Ok(d) => checks.push(Check::pass(
                    "dmabuf_export",
                    "dma-buf export (cuMemGetHandleForAddressRange)",
                    format!("{alloc} bytes exported as dma-buf fd {}", d.fd()),
                )),
                Err(e) => checks.push(fail(
                    "dmabuf_export",
                    "dma-buf export (cuMemGetHandleForAddressRange)",
                    &e,
                )),
            }
        }
    }
    true
}

/// Finds how to reach ourselves on `port`.
fn loopback(
    dev: &Device,
    port: u8,
    gid_index: Option<u8>,
) -> Result<(Loopback, String), VerbsError> {
    let p = dev.query_port(port)?;
    if !p.is_active() {
        return Err(VerbsError {
            op: Op::ModifyQp,
            call: "ibv_query_port",
            errno: 0,
            detail: format!("{} port {port} is not ACTIVE (state {})", dev.name, p.state),
        });
    }
    let mut l = Loopback {
        port,
        lid: p.lid,
        mtu: p.active_mtu,
        gid: None,
    };
    let mut how = format!(
        "{} port {port} lid {} mtu enum {}",
        dev.name, p.lid, p.active_mtu
    );
    if p.is_ethernet() {
        let pick = match gid_index {
            Some(i) => Some((dev.query_gid(port, i32::from(i))?, i)),
            None => {
                let mut best: Option<(Gid, u8)> = None;
                for i in 0..p.gid_tbl_len.clamp(0, 256) {
                    let Ok(g) = dev.query_gid(port, i) else {
                        continue;
                    };
                    if g.is_zero() {
                        continue;
                    }
                    let v4_mapped = g.is_ipv4_mapped();
                    if best.is_none() || v4_mapped {
                        best = Some((g, i as u8));
                        if v4_mapped {
                            break;
                        }
                    }
                }
                best
            }
        };
        let Some((g, i)) = pick else {
            return Err(VerbsError {
                op: Op::ModifyQp,
                call: "ibv_query_gid",
                errno: 0,
                detail: "RoCE port without a usable GID (no IP address on its netdev?)".into(),
            });
        };
        l.gid = Some((g, i));
        how.push_str(&format!(", RoCE GID index {i}"));
    }
    Ok((l, how))
}

/// The check for a device that was removed or failed during the run.
fn device_gone(e: &VerbsError) -> Check {
    fail("rdma_device", "RDMA device during the run", e)
}

/// Writes `text` to `file` so that whoever sees the file sees all of it:
/// into a temporary file beside it, then renamed into place (a script
/// waiting for the hold file read it empty, between the create and the
/// write, in a loaded `make test`).
fn write_whole(file: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `--fault hold`: creates `file` (our pid and QP number in it), then waits
/// until it is gone, polling, at most `HOLD_LIMIT`. Returns how long it
/// held, or why it stopped holding.
fn hold(file: &Path, qpn: u32) -> Result<Duration, Error> {
    write_whole(file, &format!("pid {}\nqp {qpn}\n", std::process::id()))
        .map_err(|e| format!("cannot create the hold file {}: {e}", file.display()))?;
    eprintln!(
        "peermem-check: holding with QP {qpn} ready: remove {} to go on (at most {HOLD_LIMIT:?})",
        file.display()
    );
    let start = Instant::now();
    while file.exists() {
        if start.elapsed() > HOLD_LIMIT {
            let _ = std::fs::remove_file(file);
            return Err(Error::Msg(format!(
                "{} was not removed within {HOLD_LIMIT:?}: gave up holding",
                file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(start.elapsed())
}

const DMABUF_TITLE: &str = "dma-buf path (ibv_reg_dmabuf_mr)";
const DMABUF_GAP_FIX: &str = "the peer-memory path (--path peermem) is validated without it; dma-buf needs GPU memory (--memory gpu), the open NVIDIA kernel modules, rdma-core 34+ and a NIC driver that registers dma-bufs (mlx5 on kernel 5.12+)";

/// Why the dma-buf path cannot run on this node, or `None` when it can:
/// no GPU memory (`--memory host`), a GPU without dma-buf export, a
/// libibverbs without ibv_reg_dmabuf_mr, or a device that refuses it.
/// `device` is what the device said to a probe registration.
fn dmabuf_gap(
    memory: Memory,
    gpu: Option<&GpuAttrs>,
    device: DmabufSupport,
    dev: &str,
) -> Option<String> {
    let device = match device {
        DmabufSupport::Offered => None,
        DmabufSupport::NotInLibrary => {
            Some("libibverbs has no ibv_reg_dmabuf_mr (older than rdma-core 34)".to_string())
        }
        DmabufSupport::NotByDevice { errno } => Some(format!(
            "not supported by this device: {dev} refuses ibv_reg_dmabuf_mr with {} ({})",
            peermem_sim::errno::name(errno),
            peermem_sim::errno::describe(errno)
        )),
    };
    if memory == Memory::Host {
        return Some(format!(
            "skipped: --memory host has no GPU memory to export as a dma-buf; {}",
            device.unwrap_or_else(|| format!("{dev} offers ibv_reg_dmabuf_mr"))
        ));
    }
    if gpu.is_some_and(|g| g.dma_buf_supported == Some(false)) {
        return Some(
            "the GPU reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0 (no dma-buf export)".into(),
        );
    }
    device
}

/// The GPU side of a run; `None` with `--memory host`.
struct Gpu<'a> {
    cuda: &'a Context,
    attrs: &'a GpuAttrs,
}

struct Ctx<'a, 'v> {
    gpu: Option<Gpu<'a>>,
    /// The target memory in words ("GPU memory", "host memory").
    target: &'static str,
    pd: &'a Pd<'v>,
    qp: &'a Qp<'v>,
    max_wr: u64,
    fault: Option<VerbsFault>,
}

/// Moves `len` bytes in chunks of at most the port's message size.
fn rdma_all(
    c: &Ctx,
    direction: Direction,
    laddr: u64,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    len: u64,
) -> Result<(), VerbsError> {
    let op = verbs::RdmaOp {
        direction,
        laddr,
        lkey,
        raddr,
        rkey,
        len,
    };
    c.qp.rdma(op, c.max_wr, COMPLETION_TIMEOUT)
}

/// One (path, size, offset): register, then `iterations` transfers.
fn run_one(
    c: &Ctx,
    path: RegPath,
    size: u64,
    offset: u64,
    iterations: u64,
    seed: u64,
) -> (serde_json::Value, Option<Check>) {
    let path_name = if path == RegPath::Dmabuf {
        "dmabuf"
    } else {
        "peermem"
    };
    let mut out = json!({"path": path_name, "size": size, "offset": offset});
    let alloc = round_up(offset + size, GPU_PAGE) as usize;
    let buf = match &c.gpu {
        Some(g) => DeviceBuffer::new(g.cuda, alloc).map(Target::Gpu),
        None => match HostBuffer::new(alloc) {
            Ok(b) => Ok(Target::Host(b)),
            Err(e) => {
                let chk = Check::fail("host_alloc", "Host target buffer (mmap)", e.to_string());
                return (out, Some(chk));
            }
        },
    };
    let buf = match buf {
        Ok(b) => b,
        Err(e) => return (out, Some(fail("gpu_alloc", "GPU allocation", &e))),
    };
    if let Err(e) = buf.fill(SENTINEL) {
        return (out, Some(fail("gpu_alloc", "GPU sentinel", &e)));
    }
    let gaddr = buf.ptr() + offset;
    // Keep the dma-buf open while its MR lives.
    let dmabuf = match (&buf, path) {
        (Target::Gpu(b), RegPath::Dmabuf) => match b.export_dmabuf(0, alloc) {
            Ok(d) => Some(d),
            Err(e) => return (out, Some(fail("dmabuf_export", "dma-buf export", &e))),
        },
        _ => None,
    };
    // --fault short-mr: the MR covers half of what is then written.
    let mr_len = if c.fault == Some(VerbsFault::ShortMr) {
        (size as usize / 2).max(1)
    } else {
        size as usize
    };
    let target_op = match buf {
        Target::Gpu(_) => Op::RegGpuMr,
        Target::Host(_) => Op::RegHostMr,
    };
    let gmr = match &dmabuf {
        Some(d) => c.pd.reg_dmabuf_mr(offset, mr_len, gaddr, d.fd()),
        None => c.pd.reg_mr(gaddr, mr_len, target_op),
    };
    let gmr = match gmr {
        Ok(m) => m,
        Err(e) => {
            let title = match (&dmabuf, &buf) {
                (Some(_), _) => "ibv_reg_dmabuf_mr on GPU memory",
                (None, Target::Gpu(_)) => "ibv_reg_mr on GPU memory (peer-memory client)",
                (None, Target::Host(_)) => "ibv_reg_mr on the host target buffer",
            };
            return (out, Some(fail("gpu_mr", title, &e)));
        }
    };
    let mut src = vec![0u8; size as usize];
    let mut dst = vec![0u8; size as usize];
    let smr = match c
        .pd
        .reg_mr(src.as_mut_ptr() as u64, src.len(), Op::RegHostMr)
    {
        Ok(m) => m,
        Err(e) => return (out, Some(fail("host_mr", "ibv_reg_mr on host memory", &e))),
    };
    let dmr = match c
        .pd
        .reg_mr(dst.as_mut_ptr() as u64, dst.len(), Op::RegHostMr)
    {
        Ok(m) => m,
        Err(e) => return (out, Some(fail("host_mr", "ibv_reg_mr on host memory", &e))),
    };
    let mut flushed = false;
    // --fault bad-lkey: an lkey no MR of ours has (the key byte flipped).
    let src_lkey = if c.fault == Some(VerbsFault::BadLkey) {
        smr.lkey() ^ 0xff
    } else {
        smr.lkey()
    };
    if c.fault == Some(VerbsFault::QpReset) {
        if let Err(e) = c.qp.reset() {
            return (out, Some(fail("rdma_write", "QP to RESET (--fault)", &e)));
        }
    }
    let (write_title, read_title) = match buf {
        Target::Gpu(_) => ("RDMA WRITE host -> GPU", "RDMA READ GPU -> host"),
        Target::Host(_) => (
            "RDMA WRITE host -> host target",
            "RDMA READ host target -> host",
        ),
    };
    for it in 0..iterations {
        let s = seed.wrapping_add(it);
        Pattern::Seeded(s).fill(0, &mut src);
        dst.fill(0);
        if let Err(e) = rdma_all(
            c,
            Direction::Write,
            src.as_ptr() as u64,
            src_lkey,
            gaddr,
            gmr.rkey(),
            size,
        ) {
            return (out, Some(fail("rdma_write", write_title, &e)));
        }
        if let Err(e) = rdma_all(
            c,
            Direction::Read,
            dst.as_ptr() as u64,
            dmr.lkey(),
            gaddr,
            gmr.rkey(),
            size,
        ) {
            return (out, Some(fail("rdma_read", read_title, &e)));
        }
        let read_cmp = compare(&src, &dst, KEEP);
        if let Some(g) = &c.gpu {
            // Make completed RDMA writes visible to the GPU's own reads.
            if g.attrs
                .rdma_writes_ordering
                .is_none_or(|o| o < WRITES_ORDERING_OWNER)
            {
                match g.cuda.flush_rdma_writes() {
                    Ok(f) => flushed |= f,
                    Err(e) => return (out, Some(fail("flush", "cuFlushGPUDirectRDMAWrites", &e))),
                }
            }
            if let Err(e) = g.cuda.synchronize() {
                return (out, Some(fail("gpu_copy", "cuCtxSynchronize", &e)));
            }
        }
        let mut whole = vec![0u8; alloc];
        if let Err(e) = buf.read_all(&mut whole) {
            return (
                out,
                Some(fail(
                    "gpu_copy",
                    &format!("cuMemcpyDtoH of {}", c.target),
                    &e,
                )),
            );
        }
        let mut expect = vec![SENTINEL; alloc];
        expect[offset as usize..(offset + size) as usize].copy_from_slice(&src);
        let gpu_cmp = compare(&expect, &whole, KEEP);
        let firsts: Vec<_> = gpu_cmp
            .first
            .iter()
            .map(|m| json!({"offset": m.offset as i64 - offset as i64, "expected": m.expected, "actual": m.actual}))
            .collect();
        out["iterations_done"] = json!(it + 1);
        out["first_mismatches"] = json!(firsts);
        if !gpu_cmp.ok() || !read_cmp.ok() {
            let detail = if !gpu_cmp.ok() {
                let m = gpu_cmp.first[0];
                format!(
                    "iteration {it}: {} byte(s) of {} differ, first at MR offset {} (expected 0x{:02x}, got 0x{:02x}){}",
                    gpu_cmp.mismatched_bytes,
                    c.target,
                    m.offset as i64 - offset as i64,
                    m.expected,
                    m.actual,
                    if m.actual == SENTINEL {
                        format!(": the RDMA WRITE reported success but never landed in {}", c.target)
                    } else {
                        String::new()
                    }
                )
            } else {
                format!(
                    "iteration {it}: RDMA READ from {} returned {} wrong byte(s)",
                    c.target, read_cmp.mismatched_bytes
                )
            };
            out["result"] = json!("fail");
            return (
                out,
                Some(
                    Check::fail("compare", "Data comparison", detail)
                        .fix("the NIC wrote somewhere else: check the IOMMU (iommu=pt), ACS and the PCIe path with peermem-check doctor; look for DMAR faults in dmesg")
                        .data(json!({"first_mismatches": firsts})),
                ),
            );
        }
    }
    out["flushed"] = json!(flushed);
    out["result"] = json!("pass");
    drop((smr, dmr));
    if let Err(e) = gmr.dereg() {
        return (
            out,
            Some(fail("dereg", &format!("ibv_dereg_mr on {}", c.target), &e)),
        );
    }
    (out, None)
}

/// CUDA and the GPU half: the context and the GPU's attributes, or `None`
/// after pushing the failed check.
fn cuda_half(a: &ValidateArgs, checks: &mut Vec<Check>) -> Option<(Context, GpuAttrs)> {
    let ctx = match Context::new(a.hw.gpu) {
        Ok(c) => c,
        Err(e) => {
            checks.push(fail("cuda", "CUDA driver", &e));
            return None;
        }
    };
    let g = match cuda::gpu_attrs(a.hw.gpu) {
        Ok(g) => g,
        Err(e) => {
            checks.push(fail("cuda", "CUDA driver", &e));
            return None;
        }
    };
    let line = gpu_line(&g, cuda::driver_version().ok());
    if g.gpudirect_rdma_supported == Some(false) {
        checks.push(
            Check::fail("cuda", "CUDA driver", line)
                .fix("this GPU cannot do GPUDirect RDMA (consumer or unsupported GPU)"),
        );
        return None;
    }
    checks.push(
        Check::pass("cuda", "CUDA driver", line).data(serde_json::to_value(&g).unwrap_or_default()),
    );
    if !gpu_half(&ctx, a, &g, checks) {
        return None;
    }
    Some((ctx, g))
}

pub fn run(a: &ValidateArgs) -> Outcome {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut o = Outcome {
        command: "validate",
        backend: Backend::Real,
        checks: Vec::new(),
        extra: json!({"seed": seed}),
        notes: vec![format!("seed {seed} (replay with --seed {seed})")],
    };
    if a.sizes.contains(&0) {
        o.checks.push(
            Check::fail("arguments", "Arguments", "--size 0: nothing to register")
                .fix("use a size of at least 1 byte"),
        );
        return o;
    }
    // 1-2. CUDA and the GPU half (not with --memory host).
    let cuda_side = if a.memory == Memory::Gpu {
        match cuda_half(a, &mut o.checks) {
            Some(x) => Some(x),
            None => return o,
        }
    } else {
        o.checks.push(Check::pass(
            "memory",
            "Target memory",
            "page-aligned host memory (--memory host): the verbs flow alone, no GPU or libcuda",
        ));
        if a.path == RegPath::Dmabuf {
            o.checks.push(
                Check::fail(
                    "dmabuf_path",
                    "dma-buf path (ibv_reg_dmabuf_mr)",
                    "the dma-buf path needs GPU memory to export; --memory host has none",
                )
                .fix("use --path peermem with --memory host, or --memory gpu"),
            );
            return o;
        }
        None
    };
    // 3. Verbs.
    let v = match Verbs::load() {
        Ok(v) => v,
        Err(e) => {
            o.checks.push(fail("verbs", "libibverbs", &e));
            return o;
        }
    };
    o.checks.push(Check::pass(
        "verbs",
        "libibverbs",
        format!(
            "loaded (ibv_reg_dmabuf_mr {})",
            if v.has_dmabuf() {
                "available"
            } else {
                "missing"
            }
        ),
    ));
    let gpu_bdf = cuda_side.as_ref().map(|(_, g)| g.pci_bus_id.clone());
    let (device, choice) = choose_device(a.hw.device.as_deref(), gpu_bdf.as_deref());
    o.checks.push(choice);
    let dev = match v.open(device.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            o.checks.push(fail("rdma_device", "RDMA device", &e));
            return o;
        }
    };
    let (l, how) = match loopback(&dev, a.hw.port, a.hw.gid_index) {
        Ok(x) => x,
        Err(e) => {
            o.checks.push(fail("rdma_device", "RDMA device", &e));
            return o;
        }
    };
    let max_wr = dev
        .query_port(a.hw.port)
        .map(|p| u64::from(p.max_msg_sz).clamp(4096, MAX_WR))
        .unwrap_or(MAX_WR);
    let pd = match dev.alloc_pd() {
        Ok(p) => p,
        Err(e) => {
            o.checks.push(fail("rdma_device", "RDMA device", &e));
            return o;
        }
    };
    let cq = match dev.create_cq(32) {
        Ok(c) => c,
        Err(e) => {
            o.checks.push(fail("rdma_device", "RDMA device", &e));
            return o;
        }
    };
    let qp = match pd.create_rc_qp(&cq) {
        Ok(q) => q,
        Err(e) => {
            o.checks.push(fail("rdma_device", "RDMA device", &e));
            return o;
        }
    };
    if let Err(e) = qp.connect_loopback(&l) {
        o.checks
            .push(fail("loopback", "Loopback RC queue pair", &e));
        return o;
    }
    o.checks.push(Check::pass(
        "loopback",
        "Loopback RC queue pair",
        format!("QP {} connected to itself on {how}", qp.qp_num()),
    ));
    // --fault hold: the run stops here, the QP ready, until the test bed
    // has done something to the device (removed it) and lets it go on.
    if a.fault == Some(VerbsFault::Hold) {
        match hold(&a.hold_file, qp.qp_num()) {
            Ok(held) => o.checks.push(Check::pass(
                "hold",
                "Held with the QP ready (--fault hold)",
                format!("{} removed after {held:.1?}", a.hold_file.display()),
            )),
            Err(why) => {
                o.checks.push(
                    Check::fail(
                        "hold",
                        "Held with the QP ready (--fault hold)",
                        why.to_string(),
                    )
                    .fix("whoever runs --fault hold removes the hold file to let the run go on"),
                );
                return o;
            }
        }
    }
    if let Err(e) = dev.check_alive() {
        o.checks.push(device_gone(&e));
        return o;
    }
    // 4. The registration paths that can run here. A dma-buf path that
    // cannot is skipped with its reason, or fails when it was asked for.
    let gap = if a.path == RegPath::Peermem {
        None
    } else {
        dmabuf_gap(
            a.memory,
            cuda_side.as_ref().map(|(_, g)| g),
            pd.dmabuf_support(),
            &dev.name,
        )
    };
    let paths: Vec<RegPath> = match (a.path, &gap) {
        (RegPath::Peermem, _) => vec![RegPath::Peermem],
        (RegPath::Dmabuf, None) => vec![RegPath::Dmabuf],
        (RegPath::Dmabuf, Some(why)) => {
            o.checks.push(
                Check::fail("dmabuf_path", DMABUF_TITLE, why.clone())
                    .fix(DMABUF_GAP_FIX)
                    .data(json!({"path": "dmabuf", "supported": false})),
            );
            return o;
        }
        (RegPath::Both, None) => vec![RegPath::Peermem, RegPath::Dmabuf],
        (RegPath::Both, Some(why)) => {
            o.checks.push(
                Check::skip("dmabuf_path", DMABUF_TITLE, why.clone())
                    .fix(DMABUF_GAP_FIX)
                    .data(json!({"path": "dmabuf", "supported": false})),
            );
            vec![RegPath::Peermem]
        }
    };
    let c = Ctx {
        gpu: cuda_side.as_ref().map(|(ctx, g)| Gpu {
            cuda: ctx,
            attrs: g,
        }),
        target: if a.memory == Memory::Host {
            "host memory"
        } else {
            "GPU memory"
        },
        pd: &pd,
        qp: &qp,
        max_wr,
        fault: a.fault,
    };
    let mut runs = Vec::new();
    for &path in &paths {
        let mut ok = 0;
        let mut failed = false;
        for &size in &a.sizes {
            for &off in &a.offsets {
                let (j, chk) = run_one(
                    &c,
                    path,
                    size,
                    off,
                    a.iterations,
                    seed.wrapping_add(runs.len() as u64 * 1000),
                );
                runs.push(j);
                match chk {
                    Some(ch) => {
                        o.checks.push(ch);
                        failed = true;
                    }
                    None => ok += 1,
                }
                // A device that went away during the transfers is named
                // (a fatal async event, or unregistered), and the run ends.
                if let Err(e) = dev.check_alive() {
                    o.checks.push(device_gone(&e));
                    o.extra = json!({"seed": seed, "runs": runs});
                    return o;
                }
            }
        }
        if !failed {
            let name = match (path, a.memory) {
                (RegPath::Dmabuf, _) => "dma-buf path (ibv_reg_dmabuf_mr)",
                (_, Memory::Host) => "host-memory path (ibv_reg_mr)",
                _ => "peer-memory path (ibv_reg_mr)",
            };
            let landed = if a.memory == Memory::Host {
                "RDMA WRITE landed in the host target buffer, RDMA READ matched, sentinel intact"
            } else {
                "RDMA WRITE landed in GPU memory, RDMA READ and cuMemcpyDtoH matched, sentinel intact"
            };
            o.checks.push(Check::pass(
                if path == RegPath::Dmabuf {
                    "dmabuf_path"
                } else {
                    "peermem_path"
                },
                name,
                format!(
                    "{ok} size/offset combination(s) x {} iteration(s): {landed}",
                    a.iterations
                ),
            ));
        }
    }
    o.extra = json!({"seed": seed, "runs": runs});
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(dma_buf: Option<bool>) -> GpuAttrs {
        GpuAttrs {
            dma_buf_supported: dma_buf,
            ..Default::default()
        }
    }

    #[test]
    fn hold_waits_for_its_file_to_go() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("hold");
        // Many rounds, the watcher polling without a pause: a hold file
        // seen before it is whole (created, not yet written) is caught.
        for round in 0..100 {
            let g = f.clone();
            let t = std::thread::spawn(move || {
                while !g.exists() {
                    std::thread::yield_now();
                }
                let text = std::fs::read_to_string(&g).unwrap();
                std::fs::remove_file(&g).unwrap();
                text
            });
            let held = hold(&f, 7).expect("released");
            let text = t.join().unwrap();
            assert!(text.contains("qp 7"), "round {round}: read {text:?}");
            assert!(held < HOLD_LIMIT);
        }
        let e = hold(&dir.path().join("no/such/dir"), 7).unwrap_err();
        assert!(e.to_string().contains("cannot create the hold file"), "{e}");
    }

    #[test]
    fn dmabuf_runs_where_everything_offers_it() {
        let g = gpu(Some(true));
        assert_eq!(
            dmabuf_gap(Memory::Gpu, Some(&g), DmabufSupport::Offered, "mlx5_0"),
            None
        );
        // An unknown GPU attribute is tried, not skipped.
        let g = gpu(None);
        assert_eq!(
            dmabuf_gap(Memory::Gpu, Some(&g), DmabufSupport::Offered, "mlx5_0"),
            None
        );
    }

    /// What rxe answers: a device whose driver has no dma-buf support.
    fn refused_by_device() -> DmabufSupport {
        DmabufSupport::NotByDevice {
            errno: libc::EOPNOTSUPP,
        }
    }

    #[test]
    fn a_device_without_dmabuf_is_named_as_such() {
        let g = gpu(Some(true));
        let why = dmabuf_gap(Memory::Gpu, Some(&g), refused_by_device(), "rxe0").unwrap();
        assert!(why.contains("not supported by this device"), "{why}");
        assert!(why.contains("rxe0") && why.contains("EOPNOTSUPP"), "{why}");
        let why = dmabuf_gap(Memory::Gpu, Some(&g), DmabufSupport::NotInLibrary, "x").unwrap();
        assert!(why.contains("rdma-core 34"), "{why}");
    }

    #[test]
    fn host_memory_skips_dmabuf_and_still_reports_the_device() {
        let why = dmabuf_gap(Memory::Host, None, refused_by_device(), "rxe0").unwrap();
        assert!(why.starts_with("skipped: --memory host"), "{why}");
        assert!(why.contains("not supported by this device"), "{why}");
        let why = dmabuf_gap(Memory::Host, None, DmabufSupport::Offered, "mlx5_0").unwrap();
        assert!(why.contains("mlx5_0 offers ibv_reg_dmabuf_mr"), "{why}");
    }

    #[test]
    fn a_gpu_without_dmabuf_export_is_the_reason_before_the_device() {
        let g = gpu(Some(false));
        let why = dmabuf_gap(Memory::Gpu, Some(&g), refused_by_device(), "rxe0").unwrap();
        assert!(why.contains("DMA_BUF_SUPPORTED = 0"), "{why}");
    }
}
