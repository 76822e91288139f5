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

use peermem_sim::pattern::{compare, Comparison, Pattern};

use super::cuda::{self, Context, CudaError, DeviceBuffer, DmaBuf};
use super::hostmem::HostBuffer;
use super::target::Target;
use super::verbs::{
    self, Device, Direction, DmabufSupport, Gid, Loopback, Mr, Pd, Qp, Verbs, VerbsError,
};
use crate::causes::Op;
use crate::error::{fail, Error};
use crate::gpuinfo::{ordering_name, GpuAttrs, WRITES_ORDERING_OWNER};
use crate::report::{Check, Stop};
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
fn gpu_half(
    ctx: &Context,
    a: &ValidateArgs,
    g: &GpuAttrs,
    checks: &mut Vec<Check>,
) -> Result<(), Stop> {
    let size = a.sizes.iter().copied().max().unwrap_or(1 << 20);
    let off = a.offsets.iter().copied().max().unwrap_or(0);
    let alloc = round_up(size + off, GPU_PAGE) as usize;
    let buf = DeviceBuffer::new(ctx, alloc)
        .map_err(|e| stop("gpu_alloc", "GPU allocation (cuMemAlloc)", &e))?;
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
    const TITLE: &str = "GPU memory (cuMemAlloc, sentinel, copy)";
    r.map_err(|e| stop("gpu_alloc", TITLE, &e))?;
    checks.push(Check::pass(
        "gpu_alloc",
        TITLE,
        format!(
            "{alloc} bytes at 0x{:x}, SYNC_MEMOPS set, 0x{SENTINEL:02x} sentinel and a host<->GPU pattern round trip intact",
            buf.ptr()
        ),
    ));
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
    Ok(())
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

/// A failed step's check, boxed as a [`Stop`].
fn stop(id: &'static str, title: &str, e: impl Into<Error>) -> Stop {
    Box::new(fail(id, title, e))
}

/// The memory of one run: GPU memory, or page-aligned host memory with
/// `--memory host`.
fn alloc_target<'a>(c: &Ctx<'a, '_>, alloc: usize) -> Result<Target<'a>, Stop> {
    match &c.gpu {
        Some(g) => DeviceBuffer::new(g.cuda, alloc)
            .map(Target::Gpu)
            .map_err(|e| stop("gpu_alloc", "GPU allocation", &e)),
        None => HostBuffer::new(alloc).map(Target::Host).map_err(|e| {
            Box::new(Check::fail(
                "host_alloc",
                "Host target buffer (mmap)",
                e.to_string(),
            ))
        }),
    }
}

/// Registers `len` bytes of the target at `gaddr`: through its dma-buf when
/// there is one, else by address (the peer-memory client for GPU memory).
fn register_target<'p>(
    c: &Ctx<'p, '_>,
    buf: &Target,
    dmabuf: Option<&DmaBuf>,
    offset: u64,
    gaddr: u64,
    len: usize,
) -> Result<Mr<'p>, Stop> {
    let target_op = match buf {
        Target::Gpu(_) => Op::RegGpuMr,
        Target::Host(_) => Op::RegHostMr,
    };
    let mr = match dmabuf {
        Some(d) => c.pd.reg_dmabuf_mr(offset, len, gaddr, d.fd()),
        None => c.pd.reg_mr(gaddr, len, target_op),
    };
    mr.map_err(|e| {
        let title = match (dmabuf, buf) {
            (Some(_), _) => "ibv_reg_dmabuf_mr on GPU memory",
            (None, Target::Gpu(_)) => "ibv_reg_mr on GPU memory (peer-memory client)",
            (None, Target::Host(_)) => "ibv_reg_mr on the host target buffer",
        };
        stop("gpu_mr", title, &e)
    })
}

/// A registered target and the host buffers' keys that write and read it.
struct Transfer<'a> {
    buf: &'a Target<'a>,
    /// Where the MR starts: `offset` bytes into the allocation.
    gaddr: u64,
    rkey: u32,
    src_lkey: u32,
    dst_lkey: u32,
    offset: u64,
    alloc: usize,
    write_title: &'static str,
    read_title: &'static str,
}

/// RDMA WRITEs `src` into the target, READs it back into `dst`, and
/// compares the two host buffers.
fn round_trip(c: &Ctx, t: &Transfer, src: &[u8], dst: &mut [u8]) -> Result<Comparison, Stop> {
    rdma_all(
        c,
        t,
        Direction::Write,
        (src.as_ptr() as u64, t.src_lkey),
        src.len(),
    )
    .map_err(|e| stop("rdma_write", t.write_title, &e))?;
    rdma_all(
        c,
        t,
        Direction::Read,
        (dst.as_ptr() as u64, t.dst_lkey),
        dst.len(),
    )
    .map_err(|e| stop("rdma_read", t.read_title, &e))?;
    Ok(compare(src, dst, KEEP))
}

/// Moves `len` bytes between the host buffer at `laddr` and the target, in
/// chunks of at most the port's message size.
fn rdma_all(
    c: &Ctx,
    t: &Transfer,
    direction: Direction,
    (laddr, lkey): (u64, u32),
    len: usize,
) -> Result<(), VerbsError> {
    let op = verbs::RdmaOp {
        direction,
        laddr,
        lkey,
        raddr: t.gaddr,
        rkey: t.rkey,
        len: len as u64,
    };
    c.qp.rdma(op, c.max_wr, COMPLETION_TIMEOUT)
}

/// Makes completed RDMA writes visible to the GPU's own reads; whether a
/// flush was issued. Nothing to do for host memory.
fn make_visible(c: &Ctx) -> Result<bool, Stop> {
    let Some(g) = &c.gpu else {
        return Ok(false);
    };
    let mut flushed = false;
    if g.attrs
        .rdma_writes_ordering
        .is_none_or(|o| o < WRITES_ORDERING_OWNER)
    {
        flushed = g
            .cuda
            .flush_rdma_writes()
            .map_err(|e| stop("flush", "cuFlushGPUDirectRDMAWrites", &e))?;
    }
    g.cuda
        .synchronize()
        .map_err(|e| stop("gpu_copy", "cuCtxSynchronize", &e))?;
    Ok(flushed)
}

/// Copies the whole allocation to the host and compares it with `src` at
/// the MR's offset and the sentinel around it.
fn read_target(c: &Ctx, t: &Transfer, src: &[u8]) -> Result<Comparison, Stop> {
    let mut whole = vec![0u8; t.alloc];
    t.buf
        .read_all(&mut whole)
        .map_err(|e| stop("gpu_copy", &format!("cuMemcpyDtoH of {}", c.target), &e))?;
    let mut expect = vec![SENTINEL; t.alloc];
    let start = t.offset as usize;
    expect[start..start + src.len()].copy_from_slice(src);
    Ok(compare(&expect, &whole, KEEP))
}

/// The failed comparison of iteration `it`: the target's bytes when they
/// differ, else the RDMA READ's.
fn mismatch(
    c: &Ctx,
    it: u64,
    offset: u64,
    target: &Comparison,
    read: &Comparison,
    firsts: &[serde_json::Value],
) -> Check {
    let detail = match target.first.first() {
        Some(m) if !target.ok() => format!(
            "iteration {it}: {} byte(s) of {} differ, first at MR offset {} (expected 0x{:02x}, got 0x{:02x}){}",
            target.mismatched_bytes,
            c.target,
            m.offset as i64 - offset as i64,
            m.expected,
            m.actual,
            if m.actual == SENTINEL {
                format!(": the RDMA WRITE reported success but never landed in {}", c.target)
            } else {
                String::new()
            }
        ),
        _ => format!(
            "iteration {it}: RDMA READ from {} returned {} wrong byte(s)",
            c.target, read.mismatched_bytes
        ),
    };
    Check::fail("compare", "Data comparison", detail)
        .fix("the NIC wrote somewhere else: check the IOMMU (iommu=pt), ACS and the PCIe path with peermem-check doctor; look for DMAR faults in dmesg")
        .data(json!({"first_mismatches": firsts}))
}

/// One transfer of iteration `it` with the pattern of `seed`: written and
/// read back by RDMA, then read through the GPU; recorded in `out`.
/// Whether a flush was issued.
fn iteration(
    c: &Ctx,
    t: &Transfer,
    (src, dst): (&mut [u8], &mut [u8]),
    (it, seed): (u64, u64),
    out: &mut serde_json::Value,
) -> Result<bool, Stop> {
    Pattern::Seeded(seed).fill(0, src);
    dst.fill(0);
    let read_cmp = round_trip(c, t, src, dst)?;
    let flushed = make_visible(c)?;
    let gpu_cmp = read_target(c, t, src)?;
    let firsts: Vec<_> = gpu_cmp
        .first
        .iter()
        .map(|m| json!({"offset": m.offset as i64 - t.offset as i64, "expected": m.expected, "actual": m.actual}))
        .collect();
    out["iterations_done"] = json!(it + 1);
    out["first_mismatches"] = json!(firsts);
    if !gpu_cmp.ok() || !read_cmp.ok() {
        out["result"] = json!("fail");
        return Err(Box::new(mismatch(
            c, it, t.offset, &gpu_cmp, &read_cmp, &firsts,
        )));
    }
    Ok(flushed)
}

/// One (path, size, offset): register, then `iterations` transfers. The
/// run's JSON record, and the check that failed, if one did.
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
    let failed = transfers(c, path, (size, offset), (iterations, seed), &mut out).err();
    (out, failed.map(|f| *f))
}

/// `run_one`'s work: the target, its registration, the host buffers and
/// their registrations, then the transfers.
fn transfers(
    c: &Ctx,
    path: RegPath,
    (size, offset): (u64, u64),
    (iterations, seed): (u64, u64),
    out: &mut serde_json::Value,
) -> Result<(), Stop> {
    let alloc = round_up(offset + size, GPU_PAGE) as usize;
    let buf = alloc_target(c, alloc)?;
    buf.fill(SENTINEL)
        .map_err(|e| stop("gpu_alloc", "GPU sentinel", &e))?;
    let gaddr = buf.ptr() + offset;
    // Keep the dma-buf open while its MR lives.
    let dmabuf = match (&buf, path) {
        (Target::Gpu(b), RegPath::Dmabuf) => Some(
            b.export_dmabuf(0, alloc)
                .map_err(|e| stop("dmabuf_export", "dma-buf export", &e))?,
        ),
        _ => None,
    };
    // --fault short-mr: the MR covers half of what is then written.
    let mr_len = if c.fault == Some(VerbsFault::ShortMr) {
        (size as usize / 2).max(1)
    } else {
        size as usize
    };
    let gmr = register_target(c, &buf, dmabuf.as_ref(), offset, gaddr, mr_len)?;
    let mut src = vec![0u8; size as usize];
    let mut dst = vec![0u8; size as usize];
    let host_mr = |b: &mut [u8]| {
        c.pd.reg_mr(b.as_mut_ptr() as u64, b.len(), Op::RegHostMr)
            .map_err(|e| stop("host_mr", "ibv_reg_mr on host memory", &e))
    };
    let smr = host_mr(&mut src)?;
    let dmr = host_mr(&mut dst)?;
    // --fault bad-lkey: an lkey no MR of ours has (the key byte flipped).
    let src_lkey = if c.fault == Some(VerbsFault::BadLkey) {
        smr.lkey() ^ 0xff
    } else {
        smr.lkey()
    };
    if c.fault == Some(VerbsFault::QpReset) {
        c.qp.reset()
            .map_err(|e| stop("rdma_write", "QP to RESET (--fault)", &e))?;
    }
    let (write_title, read_title) = match buf {
        Target::Gpu(_) => ("RDMA WRITE host -> GPU", "RDMA READ GPU -> host"),
        Target::Host(_) => (
            "RDMA WRITE host -> host target",
            "RDMA READ host target -> host",
        ),
    };
    let t = Transfer {
        buf: &buf,
        gaddr,
        rkey: gmr.rkey(),
        src_lkey,
        dst_lkey: dmr.lkey(),
        offset,
        alloc,
        write_title,
        read_title,
    };
    let mut flushed = false;
    for it in 0..iterations {
        let s = seed.wrapping_add(it);
        flushed |= iteration(c, &t, (&mut src, &mut dst), (it, s), out)?;
    }
    out["flushed"] = json!(flushed);
    out["result"] = json!("pass");
    drop((smr, dmr));
    gmr.dereg()
        .map_err(|e| stop("dereg", &format!("ibv_dereg_mr on {}", c.target), &e))
}

/// CUDA and the GPU half: the context and the GPU's attributes.
fn cuda_half(a: &ValidateArgs, checks: &mut Vec<Check>) -> Result<(Context, GpuAttrs), Stop> {
    let ctx = Context::new(a.hw.gpu).map_err(|e| stop("cuda", "CUDA driver", &e))?;
    let g = cuda::gpu_attrs(a.hw.gpu).map_err(|e| stop("cuda", "CUDA driver", &e))?;
    let line = gpu_line(&g, cuda::driver_version().ok());
    if g.gpudirect_rdma_supported == Some(false) {
        return Err(Box::new(Check::fail("cuda", "CUDA driver", line).fix(
            "this GPU cannot do GPUDirect RDMA (consumer or unsupported GPU)",
        )));
    }
    checks.push(
        Check::pass("cuda", "CUDA driver", line).data(serde_json::to_value(&g).unwrap_or_default()),
    );
    gpu_half(&ctx, a, &g, checks)?;
    Ok((ctx, g))
}

/// The seed of the run's patterns: `--seed`, else from the clock.
fn seed_of(a: &ValidateArgs) -> u64 {
    a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// The target memory: CUDA and the GPU half, or with `--memory host` none
/// (and no dma-buf path, which needs GPU memory to export).
fn target_memory(
    a: &ValidateArgs,
    checks: &mut Vec<Check>,
) -> Result<Option<(Context, GpuAttrs)>, Stop> {
    if a.memory == Memory::Gpu {
        return cuda_half(a, checks).map(Some);
    }
    checks.push(Check::pass(
        "memory",
        "Target memory",
        "page-aligned host memory (--memory host): the verbs flow alone, no GPU or libcuda",
    ));
    if a.path == RegPath::Dmabuf {
        return Err(Box::new(
            Check::fail(
                "dmabuf_path",
                "dma-buf path (ibv_reg_dmabuf_mr)",
                "the dma-buf path needs GPU memory to export; --memory host has none",
            )
            .fix("use --path peermem with --memory host, or --memory gpu"),
        ));
    }
    Ok(None)
}

/// libibverbs, loaded.
fn load_verbs(checks: &mut Vec<Check>) -> Result<Verbs, Stop> {
    let v = Verbs::load().map_err(|e| stop("verbs", "libibverbs", &e))?;
    checks.push(Check::pass(
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
    Ok(v)
}

/// The largest RDMA message to post on `port`.
fn max_message(dev: &Device, port: u8) -> u64 {
    dev.query_port(port)
        .map(|p| u64::from(p.max_msg_sz).clamp(4096, MAX_WR))
        .unwrap_or(MAX_WR)
}

/// Connects `qp` to itself as `l` says (`how`: the same in words).
fn connect(qp: &Qp, l: &Loopback, how: &str, checks: &mut Vec<Check>) -> Result<(), Stop> {
    qp.connect_loopback(l)
        .map_err(|e| stop("loopback", "Loopback RC queue pair", &e))?;
    checks.push(Check::pass(
        "loopback",
        "Loopback RC queue pair",
        format!("QP {} connected to itself on {how}", qp.qp_num()),
    ));
    Ok(())
}

/// `--fault hold`: the run stops here, the QP ready, until the test bed
/// has done something to the device (removed it) and lets it go on.
fn hold_if_asked(a: &ValidateArgs, qp: &Qp, checks: &mut Vec<Check>) -> Result<(), Stop> {
    if a.fault != Some(VerbsFault::Hold) {
        return Ok(());
    }
    const TITLE: &str = "Held with the QP ready (--fault hold)";
    let held = hold(&a.hold_file, qp.qp_num()).map_err(|why| {
        Box::new(
            Check::fail("hold", TITLE, why.to_string())
                .fix("whoever runs --fault hold removes the hold file to let the run go on"),
        )
    })?;
    checks.push(Check::pass(
        "hold",
        TITLE,
        format!("{} removed after {held:.1?}", a.hold_file.display()),
    ));
    Ok(())
}

/// The registration paths that can run here. A dma-buf path that cannot
/// is skipped with its reason, or fails when it was asked for.
fn paths_to_run(
    a: &ValidateArgs,
    gpu: Option<&GpuAttrs>,
    pd: &Pd,
    dev: &Device,
    checks: &mut Vec<Check>,
) -> Result<Vec<RegPath>, Stop> {
    let gap = if a.path == RegPath::Peermem {
        None
    } else {
        dmabuf_gap(a.memory, gpu, pd.dmabuf_support(), &dev.name)
    };
    let gap_check = |c: Check| {
        c.fix(DMABUF_GAP_FIX)
            .data(json!({"path": "dmabuf", "supported": false}))
    };
    match (a.path, &gap) {
        (RegPath::Peermem, _) => Ok(vec![RegPath::Peermem]),
        (RegPath::Dmabuf, None) => Ok(vec![RegPath::Dmabuf]),
        (RegPath::Dmabuf, Some(why)) => Err(Box::new(gap_check(Check::fail(
            "dmabuf_path",
            DMABUF_TITLE,
            why.clone(),
        )))),
        (RegPath::Both, None) => Ok(vec![RegPath::Peermem, RegPath::Dmabuf]),
        (RegPath::Both, Some(why)) => {
            checks.push(gap_check(Check::skip(
                "dmabuf_path",
                DMABUF_TITLE,
                why.clone(),
            )));
            Ok(vec![RegPath::Peermem])
        }
    }
}

/// The passed check of a registration path all of whose runs passed.
fn path_passed(a: &ValidateArgs, path: RegPath, ok: usize) -> Check {
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
    Check::pass(
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
    )
}

/// Every size and offset on every path in `paths`, each run recorded in
/// `runs`. A device that goes away during the transfers is named (a fatal
/// async event, or unregistered), and the run ends there.
fn run_paths(
    a: &ValidateArgs,
    (c, dev): (&Ctx, &Device),
    paths: &[RegPath],
    (seed, runs): (u64, &mut Vec<serde_json::Value>),
    checks: &mut Vec<Check>,
) -> Result<(), Stop> {
    for &path in paths {
        let mut ok = 0;
        let mut failed = false;
        for &size in &a.sizes {
            for &off in &a.offsets {
                let run_seed = seed.wrapping_add(runs.len() as u64 * 1000);
                let (j, chk) = run_one(c, path, size, off, a.iterations, run_seed);
                runs.push(j);
                match chk {
                    Some(ch) => {
                        checks.push(ch);
                        failed = true;
                    }
                    None => ok += 1,
                }
                dev.check_alive().map_err(|e| Box::new(device_gone(&e)))?;
            }
        }
        if !failed {
            checks.push(path_passed(a, path, ok));
        }
    }
    Ok(())
}

/// Everything of `run` after the seed, in order; stops at the first step
/// that fails. `runs` is set when the transfers begin, and holds those done.
fn steps(
    a: &ValidateArgs,
    seed: u64,
    checks: &mut Vec<Check>,
    runs: &mut Option<Vec<serde_json::Value>>,
) -> Result<(), Stop> {
    if a.sizes.contains(&0) {
        return Err(Box::new(
            Check::fail("arguments", "Arguments", "--size 0: nothing to register")
                .fix("use a size of at least 1 byte"),
        ));
    }
    let cuda_side = target_memory(a, checks)?;
    let gpu_attrs = cuda_side.as_ref().map(|(_, g)| g);
    let v = load_verbs(checks)?;
    let gpu_bdf = gpu_attrs.map(|g| g.pci_bus_id.as_str());
    let (device, choice) = choose_device(a.hw.device.as_deref(), gpu_bdf);
    checks.push(choice);
    let rdma_device = |e: VerbsError| stop("rdma_device", "RDMA device", &e);
    let dev = v.open(device.as_deref()).map_err(rdma_device)?;
    let (l, how) = loopback(&dev, a.hw.port, a.hw.gid_index).map_err(rdma_device)?;
    let max_wr = max_message(&dev, a.hw.port);
    let pd = dev.alloc_pd().map_err(rdma_device)?;
    let cq = dev.create_cq(32).map_err(rdma_device)?;
    let qp = pd.create_rc_qp(&cq).map_err(rdma_device)?;
    connect(&qp, &l, &how, checks)?;
    hold_if_asked(a, &qp, checks)?;
    dev.check_alive().map_err(|e| Box::new(device_gone(&e)))?;
    let paths = paths_to_run(a, gpu_attrs, &pd, &dev, checks)?;
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
    let runs = runs.insert(Vec::new());
    run_paths(a, (&c, &dev), &paths, (seed, runs), checks)
}

pub fn run(a: &ValidateArgs) -> Outcome {
    let seed = seed_of(a);
    let mut o = Outcome {
        command: "validate",
        backend: Backend::Real,
        checks: Vec::new(),
        extra: json!({"seed": seed}),
        notes: vec![format!("seed {seed} (replay with --seed {seed})")],
    };
    let mut runs = None;
    if let Err(failed) = steps(a, seed, &mut o.checks, &mut runs) {
        o.checks.push(*failed);
    }
    // The runs are reported once the transfers began, even when one of
    // them ended the run.
    if let Some(runs) = runs {
        o.extra = json!({"seed": seed, "runs": runs});
    }
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
