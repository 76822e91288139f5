// SPDX-License-Identifier: GPL-2.0
//! `simtest bench memory SIZE`: kernel memory per live registration, by the
//! module that asked for it.
//!
//! Owned by the bench engineer (see `docs/lab-notes/simtest-bench.md`).
//!
//! Slab totals (/proc/meminfo) of a KASAN kernel say little about what a
//! registration costs on a production kernel, and nothing about who asked.
//! So: with the kmem and vmalloc trace events on, and a `stacktrace` trigger
//! on every allocation event, register N MRs of SIZE on one allocation
//! (window 1), then deregister them (window 2). Each allocation belongs to
//! the innermost module frame of its stack (`func+off/len [module]`): the
//! client module, the provider (nvidia_p2p_sim), the core (peerdirect_sim),
//! the control device (peermem_sim), or the kernel itself. An allocation is
//! live when window 1 did not free it. Its production size is:
//! - kmalloc up to 8 KiB: the kmalloc size class of `bytes_req` (8, 16, 32,
//!   64, 96, 128, 192, 256, 512, 1k, 2k, 4k, 8k); above: `bytes_alloc`
//!   (whole pages);
//! - kmem_cache_alloc: `bytes_req` (the cache's object size) rounded to 8;
//! - page allocations: PAGE_SIZE << order, except the pages the slab,
//!   large-kmalloc and vmalloc paths take for themselves (counted above);
//! - vmalloc: the vmap area minus its guard page (its pages come from the
//!   untraced bulk allocator).
//!
//! KASAN's redzones and metadata are left out on purpose (`bytes_alloc` of
//! a slab object includes them on this kernel).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use peermem_sim::parse;
use peermem_sim::{SimDevice, SimError};

use crate::args::{Args, Usage};
use crate::bench::{emit, header, GpuBuf, Json, ScaleMode};
use crate::cmds::ACCESS_ALL;
use crate::{Failure, Outcome};

const PAGE_SIZE: u64 = 4096;

const ALLOC_EVENTS: &[&str] = &[
    "kmem/kmalloc",
    "kmem/kmem_cache_alloc",
    "kmem/mm_page_alloc",
    "vmalloc/alloc_vmap_area",
];
const FREE_EVENTS: &[&str] = &[
    "kmem/kfree",
    "kmem/kmem_cache_free",
    "kmem/mm_page_free",
    "kmem/mm_page_free_batched",
    "vmalloc/free_vmap_area_noflush",
];

/// Whether a stack frame (function name) belongs to an allocator's own page
/// allocations: a page allocation under one of them is already counted by
/// its kmalloc, kmem_cache or vmap event.
fn allocator_frame(name: &str) -> bool {
    name == "allocate_slab"
        || name == "new_slab"
        || name.contains("slab_alloc")
        || name.contains("kmalloc_large")
        || name.contains("vmalloc_node")
        || name.contains("vmalloc_area")
        || name == "vm_area_alloc_pages"
}

/// Known modules of the simulated stack and the role they play.
const STACK_MODULES: &[(&str, &str)] = &[
    ("nvidia_p2p_sim", "provider"),
    ("peerdirect_sim", "core"),
    ("peermem_sim", "control"),
];

/// Production bytes of a kmalloc of `req` bytes (`alloc`: what this kernel
/// took, whole pages above the largest size class).
pub fn kmalloc_bytes(req: u64, alloc: u64) -> u64 {
    const CLASSES: &[u64] = &[
        8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
    ];
    CLASSES
        .iter()
        .copied()
        .find(|&c| c >= req)
        .unwrap_or_else(|| alloc.max(req.next_power_of_two().max(PAGE_SIZE)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Obj(u64),
    Pfn(u64),
    Vmap(u64),
}

#[derive(Debug, Clone)]
struct Alloc {
    key: Key,
    bytes: u64,
    req: u64,
    owner: Option<String>,
    /// Its stack trace was found.
    has_stack: bool,
    /// A page allocation made by an allocator for itself: not counted.
    internal: bool,
}

/// Allocations of one trace window, and the keys it freed.
#[derive(Debug, Default)]
pub struct Window {
    allocs: Vec<Alloc>,
    /// Index in `allocs` of each allocation not freed (so far).
    live: HashMap<Key, usize>,
    freed: Vec<Key>,
    pub events: u64,
    pub without_stack: u64,
    pub lost: u64,
}

fn field<'a>(fields: &'a str, name: &str) -> Option<&'a str> {
    fields
        .split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}

fn num(s: &str) -> Option<u64> {
    parse::number(s).ok()
}

/// `ptr=` is printed with `%p`: hashed (hex) or, early, `(____ptrval____)`.
fn ptr(fields: &str) -> Option<u64> {
    let p = field(fields, "ptr")?;
    u64::from_str_radix(p.trim_start_matches("0x"), 16).ok()
}

/// Splits a trace line into (cpu, event name, fields), or None.
fn split_event(line: &str) -> Option<(u32, &str, &str)> {
    // "<comm>-<pid> [ccc] flags ts: name: fields"; comm may hold anything,
    // so find the last "[digits]" before the timestamp colon.
    let b = line.find("] ")?;
    let open = line[..b].rfind('[')?;
    let cpu: u32 = line[open + 1..b].trim().parse().ok()?;
    let rest = &line[b + 2..];
    let (_ts, ev) = rest.split_once(": ")?;
    match ev.split_once(": ") {
        Some((name, fields)) => Some((cpu, name.trim(), fields)),
        None => Some((cpu, ev.trim(), "")),
    }
}

/// The module in brackets at the end of a stack frame, if any.
fn frame_module(frame: &str) -> Option<&str> {
    let f = frame.trim_end();
    let end = f.strip_suffix(']')?;
    let open = end.rfind('[')?;
    Some(&end[open + 1..])
}

impl Window {
    /// Parses the text of the `trace` file.
    pub fn parse(text: &str, roles: &HashMap<String, String>) -> Window {
        let mut w = Window::default();
        // per CPU: the allocation waiting for its stack, and whether the
        // stack lines now being read belong to it
        let mut pending: HashMap<u32, usize> = HashMap::new();
        let mut reading: Option<usize> = None;
        for line in text.lines() {
            if let Some(frame) = line.strip_prefix(" => ") {
                if let Some(i) = reading {
                    let a = &mut w.allocs[i];
                    let name = frame.split('+').next().unwrap_or("");
                    if a.owner.is_none() {
                        if matches!(a.key, Key::Pfn(_)) && allocator_frame(name) {
                            a.internal = true;
                        }
                        if let Some(m) = frame_module(frame) {
                            a.owner = Some(roles.get(m).cloned().unwrap_or_else(|| m.to_string()));
                        }
                    }
                }
                continue;
            }
            reading = None;
            if let Some(h) = line.strip_prefix("# entries-in-buffer/entries-written:") {
                let counts = h.split_whitespace().next().unwrap_or("");
                if let Some((inbuf, written)) = counts.split_once('/') {
                    let (i, wr) = (num(inbuf).unwrap_or(0), num(written).unwrap_or(0));
                    w.lost += wr.saturating_sub(i);
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let Some((cpu, name, f)) = split_event(line) else {
                continue;
            };
            if name == "<stack trace>" {
                if let Some(i) = pending.remove(&cpu) {
                    reading = Some(i);
                    w.allocs[i].has_stack = true;
                }
                continue;
            }
            w.events += 1;
            let alloc = match name {
                "kmalloc" => ptr(f).map(|p| {
                    let req = field(f, "bytes_req").and_then(num).unwrap_or(0);
                    let got = field(f, "bytes_alloc").and_then(num).unwrap_or(req);
                    (Key::Obj(p), kmalloc_bytes(req, got), req)
                }),
                "kmem_cache_alloc" => ptr(f).map(|p| {
                    let req = field(f, "bytes_req").and_then(num).unwrap_or(0);
                    (Key::Obj(p), req.div_ceil(8) * 8, req)
                }),
                "mm_page_alloc" => {
                    let pfn = field(f, "pfn").and_then(num);
                    let order = field(f, "order").and_then(num).unwrap_or(0);
                    pfn.filter(|&p| p != 0)
                        .map(|p| (Key::Pfn(p), PAGE_SIZE << order, PAGE_SIZE << order))
                }
                "alloc_vmap_area" => {
                    // "va_start: 12345 size=... failed=0"
                    let addr = f
                        .trim_start()
                        .strip_prefix("va_start:")
                        .and_then(|r| r.split_whitespace().next())
                        .and_then(num);
                    let size = field(f, "size").and_then(num).unwrap_or(0);
                    let failed = field(f, "failed").and_then(num).unwrap_or(0);
                    addr.filter(|_| failed == 0).map(|a| {
                        let b = size.saturating_sub(PAGE_SIZE);
                        (Key::Vmap(a), b, b)
                    })
                }
                "kfree" | "kmem_cache_free" => {
                    w.free(ptr(f).map(Key::Obj));
                    None
                }
                "mm_page_free" | "mm_page_free_batched" => {
                    w.free(field(f, "pfn").and_then(num).map(Key::Pfn));
                    None
                }
                "free_vmap_area_noflush" => {
                    w.free(field(f, "va_start").and_then(num).map(Key::Vmap));
                    None
                }
                _ => None,
            };
            if let Some((key, bytes, req)) = alloc {
                w.allocs.push(Alloc {
                    key,
                    bytes,
                    req,
                    owner: None,
                    has_stack: false,
                    internal: false,
                });
                let i = w.allocs.len() - 1;
                w.live.insert(key, i);
                pending.insert(cpu, i);
            }
        }
        w.without_stack = w.allocs.iter().filter(|a| !a.has_stack).count() as u64;
        w
    }

    fn free(&mut self, key: Option<Key>) {
        if let Some(k) = key {
            self.live.remove(&k);
            self.freed.push(k);
        }
    }

    /// The counted allocations not freed by the end of the window.
    fn live(&self) -> Vec<&Alloc> {
        let mut idx: Vec<usize> = self.live.values().copied().collect();
        idx.sort_unstable();
        idx.into_iter()
            .map(|i| &self.allocs[i])
            .filter(|a| !a.internal)
            .collect()
    }
}

/// Per-owner sums of live allocations.
#[derive(Debug, Default, Clone)]
pub struct OwnerSum {
    pub objects: u64,
    pub bytes: u64,
    pub bytes_req: u64,
    pub freed_after: u64,
    pub left_after: u64,
    pub left_bytes_after: u64,
}

/// Attributes the live allocations of `reg` by owner, and checks which of
/// them `dereg` freed.
pub fn attribute(reg: &Window, dereg: &Window) -> Vec<(String, OwnerSum)> {
    let freed: std::collections::HashSet<Key> = dereg.freed.iter().copied().collect();
    let mut sums: Vec<(String, OwnerSum)> = Vec::new();
    for a in reg.live() {
        let owner = a.owner.clone().unwrap_or_else(|| "kernel".to_string());
        let i = match sums.iter().position(|(o, _)| *o == owner) {
            Some(i) => i,
            None => {
                sums.push((owner, OwnerSum::default()));
                sums.len() - 1
            }
        };
        let s = &mut sums[i].1;
        s.objects += 1;
        s.bytes += a.bytes;
        s.bytes_req += a.req;
        if freed.contains(&a.key) {
            s.freed_after += 1;
        } else {
            s.left_after += 1;
            s.left_bytes_after += a.bytes;
        }
    }
    sums
}

/// The tracefs directory, with the events on and a stack trace recorded
/// for every allocation event; put back as it was when dropped.
struct Tracer {
    dir: PathBuf,
    old_kb: String,
}

fn write(p: &Path, v: &str) -> Result<(), SimError> {
    fs::write(p, v).map_err(|e| SimError {
        op: "tracefs",
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        detail: format!("write {v:?} to {}", p.display()),
    })
}

fn read(p: &Path) -> Result<String, SimError> {
    fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| SimError {
            op: "tracefs",
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            detail: format!("read {}", p.display()),
        })
}

impl Tracer {
    fn new(buffer_kb: u64) -> Result<Self, SimError> {
        let dir = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("trace").exists())
            .ok_or_else(|| SimError {
                op: "tracefs",
                errno: libc::ENOENT,
                detail: "no tracefs (mount -t tracefs nodev /sys/kernel/tracing)".into(),
            })?;
        let old_kb = read(&dir.join("buffer_size_kb"))?
            .split_whitespace()
            .next()
            .unwrap_or("1408")
            .to_string();
        let t = Tracer { dir, old_kb };
        write(&t.dir.join("tracing_on"), "0")?;
        write(&t.dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
        write(&t.dir.join("options/sym-offset"), "1")?;
        for e in ALLOC_EVENTS.iter().chain(FREE_EVENTS) {
            write(&t.dir.join("events").join(e).join("enable"), "1")?;
        }
        for e in ALLOC_EVENTS {
            write(&t.dir.join("events").join(e).join("trigger"), "stacktrace")?;
        }
        t.clear()?;
        Ok(t)
    }

    fn clear(&self) -> Result<(), SimError> {
        write(&self.dir.join("trace"), "")
    }

    fn on(&self, on: bool) -> Result<(), SimError> {
        write(&self.dir.join("tracing_on"), if on { "1" } else { "0" })
    }

    /// Reads and clears the buffer.
    fn take(&self, roles: &HashMap<String, String>) -> Result<Window, SimError> {
        let text = read(&self.dir.join("trace"))?;
        self.clear()?;
        Ok(Window::parse(&text, roles))
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = write(&self.dir.join("tracing_on"), "0");
        for e in ALLOC_EVENTS {
            let _ = write(
                &self.dir.join("events").join(e).join("trigger"),
                "!stacktrace",
            );
        }
        for e in ALLOC_EVENTS.iter().chain(FREE_EVENTS) {
            let _ = write(&self.dir.join("events").join(e).join("enable"), "0");
        }
        let _ = write(&self.dir.join("options/sym-offset"), "0");
        let _ = write(&self.dir.join("trace"), "");
        let _ = write(&self.dir.join("buffer_size_kb"), &self.old_kb);
        let _ = write(&self.dir.join("tracing_on"), "1");
    }
}

pub fn memory(dev: &SimDevice, argv: &[String]) -> Result<Outcome, Failure> {
    let a = Args::parse(
        argv,
        &["live", "scale", "label", "client-module", "trace-kb"],
        &[],
    )?;
    a.expect_pos(1, 1)?;
    let size = a.pos_as(0, "SIZE", parse::size)?;
    let live = a.get("live", 16, parse::number)?.clamp(1, 4096);
    let scale = a.get("scale", 0, parse::number32)?;
    let trace_kb = a.get("trace-kb", 32768, parse::number)?.max(1024);
    let label = a.value("label").unwrap_or("unlabelled").to_string();
    let clients = a
        .value("client-module")
        .unwrap_or("nvidia_peermem_rs,peermem_refclient,peermem_refclient2")
        .to_string();
    if clients.is_empty() {
        return Err(Usage("--client-module: empty".into()).into());
    }
    let mut roles: HashMap<String, String> = STACK_MODULES
        .iter()
        .map(|(m, r)| (m.to_string(), r.to_string()))
        .collect();
    for m in clients.split(',') {
        roles.insert(m.to_string(), "client".to_string());
    }

    let _mode = ScaleMode::new(dev, scale)?;
    // One allocation per registration: the same pages mapped twice for the
    // HCA would be overlapping mappings, which DMA-API debugging reports.
    let bufs = (0..live)
        .map(|_| GpuBuf::new(dev, size))
        .collect::<Result<Vec<_>, _>>()?;
    // as many registrations first, all live at once, then gone: caches,
    // xarray nodes and the like that stay after the first use are not
    // per-registration costs. As many as measured: a slab cache of the
    // client's own grows its per-CPU arrays once (7.x's sheaves: a kmalloc
    // the first time `live` objects are out, 16 B a registration at 32),
    // where the kmalloc caches of a client that uses them are warm already.
    let mut warm = Vec::new();
    for buf in &bufs {
        warm.push(dev.mr_reg(buf.va, size, ACCESS_ALL)?.id);
    }
    for id in warm {
        dev.mr_dereg(id)?;
    }

    let tracer = Tracer::new(trace_kb)?;
    let mut ids = Vec::new();
    tracer.on(true)?;
    let mut err = None;
    let mut sg = 0;
    for buf in &bufs {
        match dev.mr_reg(buf.va, size, ACCESS_ALL) {
            Ok(mr) => {
                sg = mr.sg_entries;
                ids.push(mr.id);
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    tracer.on(false)?;
    let reg = tracer.take(&roles);
    tracer.on(true)?;
    for id in &ids {
        if let Err(e) = dev.mr_dereg(*id) {
            err.get_or_insert(e);
        }
    }
    tracer.on(false)?;
    let dereg = tracer.take(&roles);
    drop(tracer);
    drop(bufs);
    if let Some(e) = err {
        return Err(e.into());
    }
    let (reg, dereg) = (reg?, dereg?);

    let sums = attribute(&reg, &dereg);
    let mut owners = Json::default();
    for (o, s) in &sums {
        let mut j = Json::default();
        j.num("objects", s.objects)
            .num("bytes", s.bytes)
            .num("bytes_req", s.bytes_req)
            .num("bytes_per_reg", s.bytes / live)
            .num("freed_at_dereg", s.freed_after)
            .num("left_after_dereg", s.left_after)
            .num("left_bytes_after_dereg", s.left_bytes_after);
        owners.obj(o, &j);
    }
    let client = sums
        .iter()
        .find(|(o, _)| o == "client")
        .map(|(_, s)| s.clone())
        .unwrap_or_default();
    let mut j = header("memory", &label, size, scale);
    j.num("live", live)
        .num("sg_entries", sg)
        .num("client_bytes_per_reg", client.bytes / live)
        .num("client_objects_per_reg_x100", client.objects * 100 / live)
        .num("trace_events", reg.events + dereg.events)
        .num("trace_lost", reg.lost + dereg.lost)
        .num("allocs_without_stack", reg.without_stack)
        .obj("owners", &owners);
    emit(&j)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 9/9   #P:2
#
         simtest-95      [001] .....    35.680117: kmalloc: call_site=pd_mr_reg+0x1/0x2 [peerdirect_sim] ptr=00000000aaaa0001 bytes_req=200 bytes_alloc=256 gfp_flags=GFP_KERNEL node=-1 accounted=false
         simtest-95      [001] .....    35.680118: <stack trace>
 => __kmalloc_cache_noprof+0x1/0x2
 => psim_core_mr_reg+0x1/0x2 [peerdirect_sim]
 => psim_ioctl+0x1/0x2 [peermem_sim]
         simtest-95      [001] .....    35.680119: kmalloc: call_site=krealloc_noprof+0x1/0x2 ptr=00000000bbbb0001 bytes_req=40 bytes_alloc=64 gfp_flags=GFP_KERNEL node=-1 accounted=false
         simtest-95      [001] .....    35.680120: <stack trace>
 => krealloc_noprof+0x1/0x2
 => _RNvCs1_17nvidia_peermem_rs7acquire+0x1/0x2 [nvidia_peermem_rs]
 => pd_acquire+0x1/0x2 [peerdirect_sim]
         simtest-95      [001] .....    35.680121: mm_page_alloc: page=00000000cc pfn=0x1234 order=0 migratetype=0 gfp_flags=GFP_KERNEL
         simtest-95      [001] .....    35.680122: <stack trace>
 => __alloc_pages_noprof+0x1/0x2
 => allocate_slab+0x1/0x2
 => __kmalloc_cache_noprof+0x1/0x2
 => _RNvCs1_17nvidia_peermem_rs3map+0x1/0x2 [nvidia_peermem_rs]
         simtest-95      [001] .....    35.680123: mm_page_alloc: page=00000000cc pfn=0x5678 order=0 migratetype=0 gfp_flags=GFP_KERNEL
         simtest-95      [001] .....    35.680124: <stack trace>
 => __get_free_pages+0x1/0x2
 => sg_kmalloc+0x1/0x2
 => sg_alloc_table+0x1/0x2
 => _RNvCs1_17nvidia_peermem_rs3map+0x1/0x2 [nvidia_peermem_rs]
         simtest-95      [001] .....    35.680125: kmalloc: call_site=krealloc_noprof+0x1/0x2 ptr=00000000bbbb0002 bytes_req=8 bytes_alloc=8 gfp_flags=GFP_KERNEL node=-1 accounted=false
         simtest-95      [001] .....    35.680126: <stack trace>
 => krealloc_noprof+0x1/0x2
 => _RNvCs1_17nvidia_peermem_rs3tmp+0x1/0x2 [nvidia_peermem_rs]
         simtest-95      [001] .....    35.680127: kfree: call_site=x+0x1/0x2 [nvidia_peermem_rs] ptr=00000000bbbb0002
          <idle>-0       [000] d.h..    35.680128: alloc_vmap_area: va_start: 18446 size=12288 align=4096 vstart=0x0 vend=0x0 failed=0
          <idle>-0       [000] d.h..    35.680129: <stack trace>
 => __get_vm_area_node+0x1/0x2
 => psim_map_create+0x1/0x2 [nvidia_p2p_sim]
";

    fn roles() -> HashMap<String, String> {
        [
            ("nvidia_peermem_rs", "client"),
            ("peerdirect_sim", "core"),
            ("nvidia_p2p_sim", "provider"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    }

    #[test]
    fn attributes_by_innermost_module() {
        let reg = Window::parse(TRACE, &roles());
        assert_eq!(reg.lost, 0);
        assert_eq!(reg.without_stack, 0);
        let dereg = Window::parse(
            "  simtest-95 [001] ..... 36.0: kfree: call_site=y ptr=00000000bbbb0001\n",
            &roles(),
        );
        let sums = attribute(&reg, &dereg);
        let get = |o: &str| sums.iter().find(|(n, _)| n == o).unwrap().1.clone();
        let core = get("core");
        assert_eq!((core.objects, core.bytes, core.bytes_req), (1, 256, 200));
        let client = get("client");
        // krealloc'd 40 bytes (class 64) + one sg page; the slab page and
        // the freed temporary are not counted
        assert_eq!((client.objects, client.bytes), (2, 64 + 4096));
        assert_eq!((client.freed_after, client.left_after), (1, 1));
        let provider = get("provider");
        assert_eq!(provider.bytes, 8192);
    }

    #[test]
    fn kmalloc_classes() {
        assert_eq!(kmalloc_bytes(1, 8), 8);
        assert_eq!(kmalloc_bytes(65, 128), 96);
        assert_eq!(kmalloc_bytes(8192, 8192), 8192);
        assert_eq!(kmalloc_bytes(8193, 16384), 16384);
    }

    #[test]
    fn lost_events_are_counted() {
        let w = Window::parse(
            "# entries-in-buffer/entries-written: 5/9   #P:2\n",
            &HashMap::new(),
        );
        assert_eq!(w.lost, 4);
    }
}
