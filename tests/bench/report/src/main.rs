// SPDX-License-Identifier: GPL-2.0
//! `bench-report`: the host side of `make bench`.
//!
//!     bench-report RAW.jsonl OUTDIR [--meta META.json]
//!
//! Reads the `BENCH-RESULT {json}` lines the VM printed (raw samples),
//! prints the table, and writes OUTDIR/summary.json (medians, spreads,
//! ratios against the reference client, targets) and OUTDIR/bench.png
//! (cost against size, log-log). Exit 1 when there is no result at all;
//! targets are reported, never turned into an exit status.

mod analysis;
mod plot;
mod results;
mod stats;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use analysis::Analysis;
use results::Results;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut pos = Vec::new();
    let mut meta_path = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--meta" => meta_path = it.next().cloned(),
            "-h" | "--help" => {
                println!("usage: bench-report RAW.jsonl OUTDIR [--meta META.json]");
                return ExitCode::SUCCESS;
            }
            _ => pos.push(a.clone()),
        }
    }
    let [raw, out] = pos.as_slice() else {
        eprintln!("usage: bench-report RAW.jsonl OUTDIR [--meta META.json]");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(raw) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bench-report: {raw}: {e}");
            return ExitCode::from(1);
        }
    };
    let results = Results::parse(&text);
    let a = Analysis::new(&results);
    if a.labels.is_empty() {
        eprintln!("bench-report: no benchmark result in {raw}");
        return ExitCode::from(1);
    }
    let meta = meta_path
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);

    if let Some(m) = meta.as_object() {
        let get = |k: &str| m.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        println!(
            "Measured {} at {} ({} profile), kernel {} [{}], host load {} before / {} after on {} CPUs.",
            get("date"),
            get("git"),
            get("profile"),
            get("kernel"),
            get("kernel_debug"),
            get("host_load_before"),
            get("host_load_after"),
            m.get("host_cpus").map_or("?".into(), |v| v.to_string()),
        );
        println!(
            "Provider cost model: {} (tests/fixtures/README.md; off: the fixture's own code only).",
            get("provider_cost"),
        );
    }
    let clock = meta.get("clock").and_then(|v| v.as_str()).unwrap_or("");
    let kernel = table::kernel_kind(meta.get("kernel_debug").and_then(|v| v.as_str()));
    print!("{}", table::render(&a, clock, &kernel));

    let out = PathBuf::from(out);
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("bench-report: {}: {e}", out.display());
        return ExitCode::from(1);
    }
    let summary = out.join("summary.json");
    let json = serde_json::to_string_pretty(&a.to_json(meta)).unwrap_or_default();
    if let Err(e) = std::fs::write(&summary, json + "\n") {
        eprintln!("bench-report: {}: {e}", summary.display());
        return ExitCode::from(1);
    }
    let png = out.join("bench.png");
    let font = plot::load_font();
    if font.is_none() {
        eprintln!(
            "bench-report: no TrueType font found (install fonts-dejavu-core or set BENCH_FONT): \
             the plot has no text"
        );
    }
    match plot::draw(&a, &png, font.is_some()) {
        Ok(()) => println!(
            "\nsummary: {}\nplot:    {}",
            summary.display(),
            png.display()
        ),
        Err(e) => {
            eprintln!("bench-report: plot {}: {e}", png.display());
            println!("\nsummary: {}", summary.display());
        }
    }
    ExitCode::SUCCESS
}
