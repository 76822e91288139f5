// SPDX-License-Identifier: GPL-2.0
//! `peermem-check`: does GPUDirect RDMA work on this node?
//!
//! - `doctor`: the prerequisites, each check pass/warn/fail with a fix;
//! - `validate`: registers GPU memory, moves a pattern through it by RDMA,
//!   reads it back through the GPU and compares (real NIC+GPU, or the
//!   simulated stack with `--backend sim`);
//! - `bench`: registration latency by size, direct vs bounce bandwidth.
//!
//! Exit codes: 0 ok (doctor: no failure; validate: bytes matched), 1 a check
//! or the validation failed, 2 usage error.

mod bench;
mod causes;
mod doctor;
mod error;
mod gpuinfo;
mod plot;
#[cfg(feature = "real")]
mod real;
mod report;
mod sim;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;

use report::{Summary, Verdict};

#[derive(Parser, Debug)]
#[command(
    name = "peermem-check",
    version,
    about = "Does GPUDirect RDMA work on this node? doctor, validate, bench"
)]
struct Cli {
    /// Machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Check the node's GPUDirect RDMA prerequisites.
    Doctor(DoctorArgs),
    /// Prove that data written by RDMA lands in GPU memory.
    Validate(ValidateArgs),
    /// Measure registration latency and direct vs bounce bandwidth.
    Bench(BenchArgs),
    /// Render a bench JSON file as a PNG plot.
    Plot(PlotArgs),
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// Read /sys, /proc (and dmesg.txt, ofed_info.txt, cuda.json) under DIR
    /// instead of the live system.
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Do not load libcuda to query GPU attributes.
    #[arg(long)]
    no_cuda: bool,
    /// Also write a diagnostics bundle to FILE ("-": stdout): doctor's
    /// report with the versions, module state, configuration, DKMS and
    /// systemd state and kernel log lines behind it, for a bug report.
    #[arg(long, value_name = "FILE")]
    bundle: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A real NVIDIA GPU (CUDA driver API) and RDMA NIC (libibverbs).
    Real,
    /// The simulated stack of the test VM (/dev/peermem_sim).
    Sim,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegPath {
    /// ibv_reg_mr on the GPU pointer (the peer-memory client).
    Peermem,
    /// ibv_reg_dmabuf_mr on a dma-buf of the GPU range.
    Dmabuf,
    /// Both, dma-buf where the GPU supports it.
    Both,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// GPU memory from cuMemAlloc (what GPUDirect RDMA is about).
    Gpu,
    /// Page-aligned host memory instead: the same verbs flow with no GPU or
    /// libcuda (proves the RDMA side alone, e.g. on soft-RoCE).
    Host,
}

/// A deliberate mistake on the verbs side, to show each is caught with a
/// named cause (the test bed's suite verbs runs them against rxe).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsFault {
    /// Post the RDMA WRITE with an lkey that was never registered.
    BadLkey,
    /// Register the target MR shorter than the RDMA length.
    ShortMr,
    /// Move the QP back to RESET before the first post.
    QpReset,
    /// Hold the run once the QP is ready (before any transfer): create the
    /// file `--hold-file` and wait, at most `HOLD_LIMIT`, until someone
    /// removes it (the test bed removes the device meanwhile).
    Hold,
}

/// The longest `--fault hold` waits for its file to go.
pub const HOLD_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimEngine {
    /// CPU copy through the DMA translation.
    Cpu,
    /// QEMU edu device DMA (real emulated PCI DMA; slow).
    Edu,
}

/// The GPU and the RDMA NIC of a real run, named as perftest names them.
#[derive(Args, Debug, Clone)]
pub struct HwArgs {
    /// CUDA device ordinal (real backend; perftest's --use_cuda).
    #[arg(long, alias = "use_cuda", default_value_t = 0)]
    pub gpu: i32,
    /// RDMA device name, e.g. mlx5_0 (real backend; default: the one nearest
    /// to the GPU in the PCIe topology).
    #[arg(short = 'd', long, alias = "ib-dev")]
    pub device: Option<String>,
    /// RDMA port (real backend).
    #[arg(short = 'i', long, alias = "ib-port", default_value_t = 1)]
    pub port: u8,
    /// GID index for RoCE (real backend; default: first usable).
    #[arg(short = 'x', long)]
    pub gid_index: Option<u8>,
}

/// The simulated stack of the test VM.
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// DMA engine of the simulated HCA (sim backend).
    #[arg(long, value_enum, default_value = "cpu")]
    pub engine: SimEngine,
    /// Control device of the simulated stack (sim backend).
    #[arg(long, default_value = "/dev/peermem_sim")]
    pub sim_dev: String,
}

#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    #[arg(long, value_enum, default_value = "real")]
    pub backend: Backend,
    /// Buffer sizes to validate (K/M/G suffixes), comma-separated or repeated.
    #[arg(long = "size", value_name = "SIZE", value_delimiter = ',', default_value = "1M", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Byte offsets of the registered range inside the GPU allocation
    /// (unaligned ones test the first/last page trimming).
    #[arg(long = "offset", value_name = "BYTES", value_delimiter = ',', default_value = "0", value_parser = parse_size)]
    pub offsets: Vec<u64>,
    /// Transfers per size and offset, each with a new pattern.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iterations: u64,
    /// Pattern seed (default: from the clock; printed for replay).
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Registration path (real backend).
    #[arg(long, value_enum, default_value = "both")]
    pub path: RegPath,
    /// The memory registered as the RDMA target (real backend).
    #[arg(long, value_enum, default_value = "gpu")]
    pub memory: Memory,
    /// Plant a verbs-side mistake; validate must fail naming it (testing).
    #[arg(long, value_enum, hide = true)]
    pub fault: Option<VerbsFault>,
    /// The file `--fault hold` creates and waits on (testing).
    #[arg(
        long,
        value_name = "FILE",
        hide = true,
        default_value = "/tmp/peermem-check.hold"
    )]
    pub hold_file: PathBuf,
    #[command(flatten)]
    pub sim: SimArgs,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "real")]
    pub backend: Backend,
    /// Sizes (K/M/G suffixes), comma-separated.
    #[arg(long = "sizes", value_name = "SIZES", value_delimiter = ',', default_value = "64K,256K,1M,4M,16M", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Repetitions per size.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iterations: u64,
    /// Where to write bench.json and bench.png.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Do not render the PNG.
    #[arg(long)]
    pub no_plot: bool,
    #[command(flatten)]
    pub hw: HwArgs,
    /// The memory registered and written (real backend; host: no GPU).
    #[arg(long, value_enum, default_value = "gpu")]
    pub memory: Memory,
    #[command(flatten)]
    pub sim: SimArgs,
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// A bench.json written by `peermem-check bench`.
    input: PathBuf,
    /// Output PNG.
    #[arg(short, long, default_value = "bench.png")]
    output: PathBuf,
}

/// Parses `65536`, `0x10000`, `64K`, `2MiB`...
pub fn parse_size(s: &str) -> Result<u64, String> {
    peermem_sim::parse::size(s)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match cli.cmd {
        Cmd::Doctor(a) => doctor_cmd(&a, json),
        Cmd::Validate(a) => {
            let outcome = match a.backend {
                Backend::Sim => sim::validate(&a),
                Backend::Real => real_validate(&a),
            };
            finish(outcome, json, target_name(a.backend, a.memory))
        }
        Cmd::Bench(a) => {
            let outcome = match a.backend {
                Backend::Sim => sim::bench(&a, json),
                Backend::Real => real_bench(&a, json),
            };
            finish(outcome, json, target_name(a.backend, a.memory))
        }
        Cmd::Plot(a) => match bench::load(&a.input).and_then(|b| plot::render(&b, &a.output)) {
            Ok(()) => {
                if json {
                    report::print_json(&json!({"command": "plot", "output": a.output}));
                } else {
                    println!("wrote {}", a.output.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("peermem-check plot: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// What validate and bench return: the steps and the JSON document.
pub struct Outcome {
    pub command: &'static str,
    pub backend: Backend,
    pub checks: Vec<report::Check>,
    /// Extra JSON fields (runs, results).
    pub extra: serde_json::Value,
    /// Lines printed after the checks in human mode.
    pub notes: Vec<String>,
}

/// What memory the RDMA target of a run is, in words.
fn target_name(backend: Backend, memory: Memory) -> &'static str {
    match (backend, memory) {
        (Backend::Sim, _) => "simulated GPU memory",
        (Backend::Real, Memory::Gpu) => "GPU memory",
        (Backend::Real, Memory::Host) => "host memory",
    }
}

/// The closing line's explanation for `o` with `verdict`; `target` is the
/// memory the run wrote into (`target_name`).
fn closing_line(o: &Outcome, verdict: Verdict, target: &str) -> String {
    let gpu = target.ends_with("GPU memory");
    match (o.command, verdict) {
        ("validate", Verdict::Fail)
            if o.checks
                .iter()
                .any(|c| c.id == "compare" && c.verdict == Verdict::Fail) =>
        {
            if gpu {
                format!("the data did not make it through GPUDirect RDMA into {target} (see the mismatch above)")
            } else {
                format!(
                    "the data did not make it through RDMA into {target} (see the mismatch above)"
                )
            }
        }
        ("validate", Verdict::Fail) => {
            format!("the transfer into {target} could not be set up or did not finish (see the failures above)")
        }
        ("validate", _) => {
            format!("every byte written by RDMA landed in {target} and read back intact")
        }
        (_, Verdict::Fail) => "see the failures above".into(),
        _ => format!("figures above (target: {target})"),
    }
}

fn finish(o: Outcome, json: bool, target: &str) -> ExitCode {
    let s = Summary::of(&o.checks);
    let verdict = s.overall();
    // A transfer that works proves the data path, not that NCCL and UCX
    // will take it: they decide by file tests of their own. Said beside
    // the verdict, which it does not change.
    let visibility = (o.command == "validate")
        .then(|| doctor::gpudirect_visibility(&doctor::SysRoot::new(std::path::Path::new("/"))));
    if json {
        let mut doc = json!({
            "tool": "peermem-check",
            "version": env!("CARGO_PKG_VERSION"),
            "command": o.command,
            "backend": match o.backend { Backend::Real => "real", Backend::Sim => "sim" },
            "target": target,
            "verdict": verdict,
            "summary": s,
            "checks": o.checks,
        });
        if let (Some(d), Some(e)) = (doc.as_object_mut(), o.extra.as_object()) {
            for (k, v) in e {
                d.insert(k.clone(), v.clone());
            }
            if let Some(v) = &visibility {
                d.insert("gpudirect_visibility".into(), json!(v));
            }
        }
        report::print_json(&doc);
    } else {
        report::print_human(&o.checks);
        for n in &o.notes {
            println!("{n}");
        }
        if let Some(v) = &visibility {
            print!("{}", report::human(std::slice::from_ref(v)));
        }
        println!(
            "{} {}: {}",
            o.command,
            match verdict {
                Verdict::Fail => "FAILED",
                Verdict::Warn => "passed with warnings",
                _ => "PASSED",
            },
            closing_line(&o, verdict, target)
        );
    }
    if verdict == Verdict::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn doctor_cmd(a: &DoctorArgs, json: bool) -> ExitCode {
    let root = doctor::SysRoot::new(&a.root);
    let cuda = if a.no_cuda {
        None
    } else if root.is_live() {
        live_cuda_view()
    } else {
        // Fixture trees may carry what CUDA would have said.
        root.read("/cuda.json")
            .and_then(|s| serde_json::from_str::<gpuinfo::CudaView>(&s).ok())
    };
    let checks = doctor::run(&doctor::Inputs {
        root: root.clone(),
        cuda,
    });
    let s = Summary::of(&checks);
    let doc = json!({
        "tool": "peermem-check",
        "version": env!("CARGO_PKG_VERSION"),
        "command": "doctor",
        "root": a.root,
        "verdict": s.overall(),
        "summary": s,
        "checks": checks,
    });
    if let Some(file) = &a.bundle {
        let text = doctor::bundle::bundle(
            &root,
            &checks,
            &serde_json::to_string_pretty(&doc).unwrap_or_default(),
        );
        let written = if file.as_os_str() == "-" {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())
        } else {
            std::fs::write(file, &text)
        };
        match written {
            Ok(()) if file.as_os_str() == "-" => return exit_of(s.overall()),
            Ok(()) => eprintln!(
                "peermem-check: diagnostics bundle written to {} ({} bytes): read it, then attach it to the report",
                file.display(),
                text.len()
            ),
            Err(e) => {
                eprintln!("peermem-check: cannot write {}: {e}", file.display());
                return ExitCode::from(1);
            }
        }
    }
    if json {
        report::print_json(&doc);
    } else {
        report::print_human(&checks);
        println!(
            "doctor: {} pass, {} warn, {} fail, {} skip. {}",
            s.pass,
            s.warn,
            s.fail,
            s.skip,
            doctor::verdict_line(s.overall())
        );
    }
    exit_of(s.overall())
}

/// doctor's exit status: 1 when a check failed.
fn exit_of(v: Verdict) -> ExitCode {
    if v == Verdict::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `f`, turning a panic inside a dependency (cudarc panics on a
/// missing libcuda symbol) into an error message instead of a crash.
#[cfg(feature = "real")]
fn guarded<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, error::Error> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(prev);
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown internal error".into());
        error::Error::Msg(msg)
    })
}

#[cfg(feature = "real")]
fn internal_error(command: &'static str, e: error::Error) -> Outcome {
    Outcome {
        command,
        backend: Backend::Real,
        checks: vec![report::Check::fail(
            "internal",
            "CUDA/verbs library",
            format!("a library call failed inside its binding: {e}"),
        )
        .fix("the installed libcuda/libibverbs lacks an entry point this tool needs: update the driver or rdma-core")],
        extra: json!({}),
        notes: vec![],
    }
}

#[cfg(feature = "real")]
fn live_cuda_view() -> Option<gpuinfo::CudaView> {
    Some(
        guarded(real::cuda::probe).unwrap_or_else(|m| gpuinfo::CudaView {
            error: Some(format!("CUDA probe failed: {m}")),
            ..Default::default()
        }),
    )
}

#[cfg(not(feature = "real"))]
fn live_cuda_view() -> Option<gpuinfo::CudaView> {
    Some(gpuinfo::CudaView {
        error: Some("this peermem-check was built without the real (CUDA) backend".into()),
        ..Default::default()
    })
}

#[cfg(feature = "real")]
fn real_validate(a: &ValidateArgs) -> Outcome {
    guarded(|| real::validate::run(a)).unwrap_or_else(|m| internal_error("validate", m))
}

#[cfg(not(feature = "real"))]
fn real_validate(_a: &ValidateArgs) -> Outcome {
    not_built("validate")
}

#[cfg(feature = "real")]
fn real_bench(a: &BenchArgs, json: bool) -> Outcome {
    guarded(|| real::bench::run(a, json)).unwrap_or_else(|m| internal_error("bench", m))
}

#[cfg(not(feature = "real"))]
fn real_bench(_a: &BenchArgs, _json: bool) -> Outcome {
    not_built("bench")
}

#[cfg(not(feature = "real"))]
fn not_built(command: &'static str) -> Outcome {
    Outcome {
        command,
        backend: Backend::Real,
        checks: vec![report::Check::fail(
            "backend",
            "Real backend",
            "this peermem-check was built without the real backend (--no-default-features)",
        )
        .fix("use --backend sim here, or a build with the default features on a GPU node")],
        extra: json!({}),
        notes: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use report::Check;

    fn outcome(command: &'static str, checks: Vec<Check>) -> Outcome {
        Outcome {
            command,
            backend: Backend::Real,
            checks,
            extra: json!({}),
            notes: vec![],
        }
    }

    #[test]
    fn the_closing_line_names_the_memory_used() {
        let ok = outcome("validate", vec![Check::pass("peermem_path", "P", "ok")]);
        let host = target_name(Backend::Real, Memory::Host);
        let line = closing_line(&ok, Verdict::Pass, host);
        assert_eq!(
            line,
            "every byte written by RDMA landed in host memory and read back intact"
        );
        let gpu = target_name(Backend::Real, Memory::Gpu);
        assert!(closing_line(&ok, Verdict::Pass, gpu).contains("landed in GPU memory"));
        let sim = target_name(Backend::Sim, Memory::Host);
        assert!(closing_line(&ok, Verdict::Pass, sim).contains("in simulated GPU memory"));

        let mismatch = outcome("validate", vec![Check::fail("compare", "C", "differ")]);
        let line = closing_line(&mismatch, Verdict::Fail, host);
        assert!(line.contains("into host memory"), "{line}");
        assert!(!line.contains("GPU"), "{line}");
        assert!(
            closing_line(&mismatch, Verdict::Fail, gpu).contains("GPUDirect RDMA into GPU memory")
        );

        let setup = outcome("validate", vec![Check::fail("rdma_device", "D", "gone")]);
        let line = closing_line(&setup, Verdict::Fail, host);
        assert!(
            line.contains("into host memory") && !line.contains("GPU"),
            "{line}"
        );

        let bench = outcome("bench", vec![Check::pass("x", "X", "ok")]);
        assert!(closing_line(&bench, Verdict::Pass, host).contains("host memory"));
    }
}
