// SPDX-License-Identifier: GPL-2.0
//! `peermem-check stats`: the counters nvidia-peermem-rs keeps in sysfs
//! under its module directory (docs/sysfs.md), as text, JSON or the
//! Prometheus text exposition format (for a node exporter's textfile
//! collector).
//!
//! - `/sys/module/<module>/memory_peers/<client>/`: per client, the files of
//!   the PeerDirect core's `/sys/kernel/mm/memory_peers/<client>/`;
//! - `/sys/module/<module>/stats/`: the module's own counters, with
//!   `errors/<kind>` and `declines/<kind>`.
//!
//! Every file holds one value. A value that does not parse is an error
//! naming the file: a half-read or foreign file must not pass for a zero.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// The module names nvidia-peermem-rs loads as: the default drop-in
/// (NVIDIA's name) first, then its own.
pub const MODULES: [&str; 2] = ["nvidia_peermem", "nvidia_peermem_rs"];

/// Files of `stats/` whose value is a word, not a number.
const TEXT_FILES: [&str; 1] = ["persistent_api"];

/// Files of `stats/` whose value is a version word in hexadecimal.
const HEX_FILES: [&str; 1] = ["page_table_version"];

/// Files of `stats/` that go up and down (Prometheus gauges); the other
/// numbers only grow (counters).
const GAUGES: [&str; 6] = [
    "registrations_live",
    "pinned_pages",
    "pinned_bytes",
    "dma_mappings",
    "left_to_owner",
    "page_table_version",
];

/// What each known file means, for Prometheus' HELP lines (the names not
/// listed get a generic line: a newer module may add files).
const HELP: [(&str, &str); 27] = [
    ("num_alloc_mrs", "MRs the client mapped for the PeerDirect core (memory_peers num_alloc_mrs)"),
    ("num_dealloc_mrs", "MRs of the client the core released (memory_peers num_dealloc_mrs)"),
    ("num_reg_pages", "64 KiB GPU pages of the MRs mapped (memory_peers num_reg_pages)"),
    ("num_dereg_pages", "64 KiB GPU pages of the MRs released (memory_peers num_dereg_pages)"),
    ("num_reg_bytes", "Bytes (the user's length) of the MRs mapped (memory_peers num_reg_bytes)"),
    ("num_dereg_bytes", "Bytes (the user's length) of the MRs released (memory_peers num_dereg_bytes)"),
    ("num_free_callbacks", "Invalidations the client asked of the core after a cudaFree (memory_peers num_free_callbacks)"),
    ("registrations_live", "Registrations alive (acquired, not yet released)"),
    ("acquired", "Ranges acquire took (GPU memory)"),
    ("declined", "Ranges acquire declined (not mine), all causes"),
    ("released", "Registrations the core released"),
    ("pinned_pages", "64 KiB GPU pages pinned through the NVIDIA P2P API now"),
    ("pinned_bytes", "Bytes of GPU memory pinned through the NVIDIA P2P API now"),
    ("dma_mappings", "DMA mappings of GPU memory for the NIC alive now"),
    ("invalidations", "Free callbacks the NVIDIA driver made (cudaFree of pinned memory)"),
    ("core_invalidations", "Free callbacks that called the core's invalidate"),
    ("skipped_after_invalidation", "dma_unmap/put_pages calls an invalidation made no-ops"),
    ("dma_unmap_after_free", "dma_unmap calls that lost the race with a free callback"),
    ("free_waited_for_unmap", "Free callbacks that waited for a dma_unmap in flight"),
    ("free_waited_for_registration", "Free callbacks that waited for a dma_map reading the page table"),
    ("free_wait_rechecks", "Times a waiting free callback looked again"),
    ("cpu_cacheable_page_tables", "Page tables the driver marked CPU-cacheable"),
    ("left_to_owner", "Registrations whose pages stay pinned to the process that pinned them"),
    ("unpins_from_other_process", "Unpins asked from a process other than the pinning one"),
    ("release_waited_for_invalidation", "Releases that waited for a free callback to leave the core"),
    ("page_table_version", "Version of the last P2P page table the driver gave (0: none yet)"),
    ("persistent_api", "How persistent pins are made"),
];

/// One module's counters, as read from sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The module's name (`nvidia_peermem` or `nvidia_peermem_rs`).
    pub module: String,
    /// Its `/sys/module/<module>/version`, if readable.
    pub version: Option<String>,
    /// Per client (`nv_mem`, `nv_mem_nc`): its version and counters.
    pub clients: BTreeMap<String, Client>,
    /// `stats/`: numbers (hex files converted) in file order by name.
    pub stats: BTreeMap<String, u64>,
    /// `stats/`'s words (`persistent_api`).
    pub words: BTreeMap<String, String>,
    /// `stats/errors/<kind>`.
    pub errors: BTreeMap<String, u64>,
    /// `stats/declines/<kind>`.
    pub declines: BTreeMap<String, u64>,
}

/// One client's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub version: String,
    pub counters: BTreeMap<String, u64>,
}

/// Why the counters could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsError {
    /// No module of this project is loaded (or its directory lacks the
    /// counters: an older release, or NVIDIA's module).
    NotLoaded(String),
    /// A file could not be read, or its content is not a value.
    Bad(String),
}

impl std::fmt::Display for StatsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatsError::NotLoaded(m) | StatsError::Bad(m) => f.write_str(m),
        }
    }
}

/// The file names of `dir`, sorted; only regular files.
fn files(dir: &Path) -> Result<Vec<String>, StatsError> {
    let entries = fs::read_dir(dir)
        .map_err(|e| StatsError::Bad(format!("cannot list {}: {e}", dir.display())))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| StatsError::Bad(format!("cannot list {}: {e}", dir.display())))?;
        if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// A file's one line, without its newline.
fn read_value(path: &Path) -> Result<String, StatsError> {
    let text = fs::read_to_string(path)
        .map_err(|e| StatsError::Bad(format!("cannot read {}: {e}", path.display())))?;
    let line = text.strip_suffix('\n').unwrap_or(&text);
    if line.is_empty() || line.contains('\n') || line.trim() != line {
        return Err(StatsError::Bad(format!(
            "{}: not one value: {:?}",
            path.display(),
            text
        )));
    }
    Ok(line.to_string())
}

/// A decimal count.
fn parse_count(path: &Path, s: &str) -> Result<u64, StatsError> {
    s.parse::<u64>().map_err(|_| {
        StatsError::Bad(format!(
            "{}: not a count: {s:?} (a garbled or foreign file)",
            path.display()
        ))
    })
}

/// A `0x`-prefixed hexadecimal word.
fn parse_hex(path: &Path, s: &str) -> Result<u64, StatsError> {
    s.strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| {
            StatsError::Bad(format!(
                "{}: not a hexadecimal version: {s:?}",
                path.display()
            ))
        })
}

/// Every file of `dir` as a count.
fn counts(dir: &Path) -> Result<BTreeMap<String, u64>, StatsError> {
    let mut out = BTreeMap::new();
    for name in files(dir)? {
        let path = dir.join(&name);
        let v = read_value(&path)?;
        out.insert(name, parse_count(&path, &v)?);
    }
    Ok(out)
}

/// The loaded module with counters under `root` (`/` on the live system).
pub fn find_module(root: &Path) -> Result<String, StatsError> {
    let sys_module = root.join("sys/module");
    if let Some(m) = MODULES
        .iter()
        .find(|m| sys_module.join(m).join("stats").is_dir())
    {
        return Ok((*m).to_string());
    }
    if let Some(m) = MODULES.iter().find(|m| sys_module.join(m).is_dir()) {
        return Err(StatsError::NotLoaded(format!(
            "module {m} is loaded but {} has no counters: NVIDIA's nvidia-peermem, or an nvidia-peermem-rs older than this tool (those have their counters in /sys/kernel/debug/nvidia_peermem_rs/stats only)",
            sys_module.join(m).display()
        )));
    }
    Err(StatsError::NotLoaded(format!(
        "no nvidia-peermem-rs module is loaded (neither {} nor {} exists): modprobe nvidia-peermem",
        sys_module.join(MODULES[0]).join("stats").display(),
        sys_module.join(MODULES[1]).join("stats").display()
    )))
}

/// Reads every counter of the loaded module under `root`.
pub fn read(root: &Path) -> Result<Snapshot, StatsError> {
    let module = find_module(root)?;
    let base: PathBuf = root.join("sys/module").join(&module);
    let version = fs::read_to_string(base.join("version"))
        .ok()
        .map(|v| v.trim().to_string());
    let stats_dir = base.join("stats");
    let mut stats = BTreeMap::new();
    let mut words = BTreeMap::new();
    for name in files(&stats_dir)? {
        let path = stats_dir.join(&name);
        let v = read_value(&path)?;
        if TEXT_FILES.contains(&name.as_str()) {
            words.insert(name, v);
        } else if HEX_FILES.contains(&name.as_str()) {
            stats.insert(name, parse_hex(&path, &v)?);
        } else {
            stats.insert(name, parse_count(&path, &v)?);
        }
    }
    let errors = counts(&stats_dir.join("errors"))?;
    let declines = counts(&stats_dir.join("declines"))?;
    let peers = base.join("memory_peers");
    let mut clients = BTreeMap::new();
    let entries = fs::read_dir(&peers)
        .map_err(|e| StatsError::Bad(format!("cannot list {}: {e}", peers.display())))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| StatsError::Bad(format!("cannot list {}: {e}", peers.display())))?;
        if !entry.path().is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        let mut counters = BTreeMap::new();
        let mut version = None;
        for file in files(&dir)? {
            let path = dir.join(&file);
            let v = read_value(&path)?;
            if file == "version" {
                version = Some(v);
            } else {
                counters.insert(file, parse_count(&path, &v)?);
            }
        }
        let version = version
            .ok_or_else(|| StatsError::Bad(format!("{}: no version file", dir.display())))?;
        clients.insert(name, Client { version, counters });
    }
    Ok(Snapshot {
        module,
        version,
        clients,
        stats,
        words,
        errors,
        declines,
    })
}

/// The text report.
pub fn text(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "module {} (version {})",
        s.module,
        s.version.as_deref().unwrap_or("unknown")
    );
    let width = s
        .stats
        .keys()
        .chain(s.words.keys())
        .chain(s.errors.keys())
        .chain(s.declines.keys())
        .chain(s.clients.values().flat_map(|c| c.counters.keys()))
        .map(|k| k.len())
        .max()
        .unwrap_or(0);
    for (name, c) in &s.clients {
        let _ = writeln!(out, "\nclient {name} (version {})", c.version);
        for (k, v) in &c.counters {
            let _ = writeln!(out, "  {k:width$}  {v}");
        }
    }
    let _ = writeln!(out, "\nmodule counters");
    for (k, v) in &s.stats {
        if HEX_FILES.contains(&k.as_str()) {
            let _ = writeln!(out, "  {k:width$}  {v:#010x}");
        } else {
            let _ = writeln!(out, "  {k:width$}  {v}");
        }
    }
    for (k, v) in &s.words {
        let _ = writeln!(out, "  {k:width$}  {v}");
    }
    let _ = writeln!(out, "\ndeclines by cause (acquire said \"not mine\")");
    for (k, v) in &s.declines {
        let _ = writeln!(out, "  {k:width$}  {v}");
    }
    let _ = writeln!(out, "\nerrors by kind");
    for (k, v) in &s.errors {
        let _ = writeln!(out, "  {k:width$}  {v}");
    }
    out
}

/// The JSON document.
pub fn to_json(s: &Snapshot) -> Value {
    let map = |m: &BTreeMap<String, u64>| -> Map<String, Value> {
        m.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
    };
    let clients: Map<String, Value> = s
        .clients
        .iter()
        .map(|(name, c)| {
            let mut o = map(&c.counters);
            o.insert("version".into(), json!(c.version));
            (name.clone(), Value::Object(o))
        })
        .collect();
    let mut stats = map(&s.stats);
    for (k, v) in &s.words {
        stats.insert(k.clone(), json!(v));
    }
    json!({
        "command": "stats",
        "module": s.module,
        "version": s.version,
        "clients": clients,
        "stats": stats,
        "errors": map(&s.errors),
        "declines": map(&s.declines),
    })
}

/// A label value escaped as the exposition format wants it.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric name part: what the format allows (`[a-zA-Z0-9_]`).
fn metric_part(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn help_of(name: &str) -> String {
    HELP.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| (*h).to_string())
        .unwrap_or_else(|| format!("nvidia-peermem-rs sysfs counter {name}"))
}

/// Prometheus' text exposition format (0.0.4): one HELP and TYPE line a
/// metric family, names prefixed `nvidia_peermem_`, counters ending in
/// `_total`; a `client` label on the per-client families, `kind` on the
/// errors and declines, `module` on everything.
pub fn prometheus(s: &Snapshot) -> String {
    let mut out = String::new();
    let module = label(&s.module);
    let _ = writeln!(
        out,
        "# HELP nvidia_peermem_info The loaded peer-memory module (value 1)."
    );
    let _ = writeln!(out, "# TYPE nvidia_peermem_info gauge");
    let mut info = format!(
        "module=\"{module}\",version=\"{}\"",
        label(s.version.as_deref().unwrap_or(""))
    );
    for (k, v) in &s.words {
        let _ = write!(info, ",{}=\"{}\"", metric_part(k), label(v));
    }
    let _ = writeln!(out, "nvidia_peermem_info{{{info}}} 1");

    // Per client: one family a file, one sample a client.
    let _ = writeln!(
        out,
        "# HELP nvidia_peermem_client_info A registered PeerDirect client and its version (value 1)."
    );
    let _ = writeln!(out, "# TYPE nvidia_peermem_client_info gauge");
    for (name, c) in &s.clients {
        let _ = writeln!(
            out,
            "nvidia_peermem_client_info{{module=\"{module}\",client=\"{}\",version=\"{}\"}} 1",
            label(name),
            label(&c.version)
        );
    }
    let mut families: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (name, c) in &s.clients {
        for (k, v) in &c.counters {
            families.entry(k).or_default().push((name, *v));
        }
    }
    for (k, samples) in families {
        let metric = format!("nvidia_peermem_{}_total", metric_part(k));
        let _ = writeln!(out, "# HELP {metric} {}.", help_of(k));
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (client, v) in samples {
            let _ = writeln!(
                out,
                "{metric}{{module=\"{module}\",client=\"{}\"}} {v}",
                label(client)
            );
        }
    }
    for (k, v) in &s.stats {
        let gauge = GAUGES.contains(&k.as_str());
        let metric = if gauge {
            format!("nvidia_peermem_{}", metric_part(k))
        } else {
            format!("nvidia_peermem_{}_total", metric_part(k))
        };
        let _ = writeln!(out, "# HELP {metric} {}.", help_of(k));
        let _ = writeln!(
            out,
            "# TYPE {metric} {}",
            if gauge { "gauge" } else { "counter" }
        );
        let _ = writeln!(out, "{metric}{{module=\"{module}\"}} {v}");
    }
    for (family, help, m) in [
        (
            "nvidia_peermem_declines_total",
            "Ranges acquire declined (not mine), by cause",
            &s.declines,
        ),
        (
            "nvidia_peermem_errors_total",
            "Errors of the module, by kind",
            &s.errors,
        ),
    ] {
        let _ = writeln!(out, "# HELP {family} {help}.");
        let _ = writeln!(out, "# TYPE {family} counter");
        for (k, v) in m {
            let _ = writeln!(
                out,
                "{family}{{module=\"{module}\",kind=\"{}\"}} {v}",
                label(k)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/sys/module/<module>` tree under a temporary root.
    fn fake(module: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("sys/module").join(module);
        let w = |rel: &str, v: &str| {
            let p = base.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, v).unwrap();
        };
        w("version", "0.2.0\n");
        w("stats/registrations_live", "1\n");
        w("stats/acquired", "5\n");
        w("stats/declined", "3\n");
        w("stats/pinned_bytes", "131072\n");
        w("stats/page_table_version", "0x00020000\n");
        w("stats/persistent_api", "get_pages_persistent\n");
        w("stats/errors/page_size", "2\n");
        w("stats/errors/dma_map", "0\n");
        w("stats/declines/not_gpu_memory", "3\n");
        w("stats/declines/range", "0\n");
        for (c, alloc) in [("nv_mem", "4"), ("nv_mem_nc", "1")] {
            w(&format!("memory_peers/{c}/version"), "0.2.0\n");
            w(
                &format!("memory_peers/{c}/num_alloc_mrs"),
                &format!("{alloc}\n"),
            );
            w(&format!("memory_peers/{c}/num_reg_bytes"), "65536\n");
        }
        root
    }

    #[test]
    fn reads_the_tree_of_either_module_name() {
        for m in MODULES {
            let root = fake(m);
            let s = read(root.path()).unwrap();
            assert_eq!(s.module, m);
            assert_eq!(s.version.as_deref(), Some("0.2.0"));
            assert_eq!(s.stats["acquired"], 5);
            assert_eq!(s.stats["page_table_version"], 0x20000);
            assert_eq!(s.words["persistent_api"], "get_pages_persistent");
            assert_eq!(s.errors["page_size"], 2);
            assert_eq!(s.declines["not_gpu_memory"], 3);
            assert_eq!(s.clients["nv_mem"].counters["num_alloc_mrs"], 4);
            assert_eq!(s.clients["nv_mem_nc"].version, "0.2.0");
        }
    }

    #[test]
    fn says_when_no_module_is_loaded() {
        let root = tempfile::tempdir().unwrap();
        let e = read(root.path()).unwrap_err();
        assert!(matches!(e, StatsError::NotLoaded(_)));
        assert!(e
            .to_string()
            .contains("no nvidia-peermem-rs module is loaded"));
        // NVIDIA's module: loaded, no counters.
        fs::create_dir_all(root.path().join("sys/module/nvidia_peermem")).unwrap();
        let e = read(root.path()).unwrap_err();
        assert!(e.to_string().contains("is loaded but"), "{e}");
    }

    #[test]
    fn a_garbled_file_is_an_error_naming_it() {
        for (rel, content, says) in [
            ("stats/acquired", "five\n", "not a count"),
            ("stats/acquired", "", "not one value"),
            ("stats/acquired", "1\n2\n", "not one value"),
            ("stats/page_table_version", "20000\n", "not a hexadecimal"),
            ("stats/declines/range", "-1\n", "not a count"),
            ("memory_peers/nv_mem/num_reg_bytes", "1 2\n", "not a count"),
        ] {
            let root = fake("nvidia_peermem");
            let p = root.path().join("sys/module/nvidia_peermem").join(rel);
            fs::write(&p, content).unwrap();
            let e = read(root.path()).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(rel), "{rel}: {e}");
        }
    }

    #[test]
    fn an_unreadable_directory_is_an_error() {
        let root = fake("nvidia_peermem");
        fs::remove_dir_all(root.path().join("sys/module/nvidia_peermem/memory_peers")).unwrap();
        let e = read(root.path()).unwrap_err().to_string();
        assert!(
            e.contains("cannot list") && e.contains("memory_peers"),
            "{e}"
        );
    }

    #[test]
    fn text_json_and_prometheus() {
        let root = fake("nvidia_peermem");
        let s = read(root.path()).unwrap();
        let t = text(&s);
        assert!(t.starts_with("module nvidia_peermem (version 0.2.0)\n"));
        assert!(t.contains("client nv_mem (version 0.2.0)"));
        assert!(t.contains("page_table_version"));
        assert!(t.contains("0x00020000"));
        let j = to_json(&s);
        assert_eq!(j["clients"]["nv_mem"]["num_alloc_mrs"], 4);
        assert_eq!(j["stats"]["persistent_api"], "get_pages_persistent");
        assert_eq!(j["declines"]["not_gpu_memory"], 3);
        let p = prometheus(&s);
        assert!(p.contains(
            "nvidia_peermem_num_alloc_mrs_total{module=\"nvidia_peermem\",client=\"nv_mem\"} 4\n"
        ));
        assert!(p.contains(
            "nvidia_peermem_num_alloc_mrs_total{module=\"nvidia_peermem\",client=\"nv_mem_nc\"} 1\n"
        ));
        assert!(p.contains("# TYPE nvidia_peermem_pinned_bytes gauge\n"));
        assert!(p.contains("nvidia_peermem_acquired_total{module=\"nvidia_peermem\"} 5\n"));
        assert!(p.contains(
            "nvidia_peermem_declines_total{module=\"nvidia_peermem\",kind=\"not_gpu_memory\"} 3\n"
        ));
        // The format: every sample's family has one HELP and one TYPE line
        // before it, and every line is a comment or `name{labels} value`.
        let mut typed = std::collections::HashSet::new();
        let mut helped = std::collections::HashSet::new();
        for line in p.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(helped.insert(name.to_string()), "two HELP for {name}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split(' ');
                let name = it.next().unwrap();
                assert!(matches!(it.next(), Some("counter" | "gauge")));
                assert!(typed.insert(name.to_string()), "two TYPE for {name}");
            } else {
                let name = line.split('{').next().unwrap();
                assert!(typed.contains(name) && helped.contains(name), "{line}");
                assert!(name.starts_with("nvidia_peermem_"));
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(metric_part("a-b.c"), "a_b_c");
    }
}
