//! `vm-verdict`: the host side of the nvidia-peermem-rs VM test bed.
//!
//! - `vm-verdict check --suite FILE --log FILE [--timed-out] [--json OUT]`
//!   judges one VM boot; exit 0 only if no test failed and none was
//!   skipped but the lines the cut for the kernel declared (unless
//!   PEERMEM_ALLOW_SKIPS=1): `make vm-test` and `make soak` are green only
//!   when everything ran.
//! - `vm-verdict suite-field --suite FILE FIELD` prints `iommu`, `timeout`
//!   or `memory` for the runner script.
//! - `vm-verdict summary [--cargo-log FILE --cargo-status FILE
//!   [--host-skips FILE]] [--shrunk WHAT]... [--budget LINE]...
//!   VERDICT.json...` prints the table, each LINE (make test's wall time
//!   against its budget in K), and the closing `N passed, N failed, N
//!   skipped` line, which ends with each WHAT the run left out. Every VERDICT.json named is one
//!   the run started: a missing or unreadable one is a failed test (a suite
//!   whose runner died before its verdict does not vanish). Exit 0 only if
//!   nothing failed, something passed, and nothing was skipped but the
//!   lines a cut for a kernel declared (unless PEERMEM_ALLOW_SKIPS=1; see
//!   `tests/vm/README.md`).
//! - `vm-verdict reliability [--json OUT] VERDICT.json...` prints the
//!   reliability table (every `rel_*` scenario: configuration, result,
//!   figures) and the lock-order matrix, writes them as JSON to OUT; exit 0
//!   only if every `rel_*` scenario (and its boot) passed.
//! - `vm-verdict nvidia-vs-ours [--json OUT] VERDICT.json...` prints every
//!   scenario NVIDIA's own nvidia-peermem ran (`client=nvNNN`) beside our
//!   module's run of it (issue 33), writes it as JSON to OUT; exit 0 only
//!   if ours passed everywhere and NVIDIA's runs were as declared.
//! - `vm-verdict splat-regex` prints the splat signatures as one extended
//!   regular expression: the guest's scenarios check their own window for
//!   the same lines the verdict counts (`mkinitramfs.sh` puts it in the
//!   initramfs).
//! - `vm-verdict cut-suite --suite FILE --out FILE [--no-kasan]
//!   [--no-nvidia] [--not-primary]` writes the suite as a kernel without
//!   KASAN, without a build of NVIDIA's module, or other than the primary
//!   one can run it (`cut.rs`: each line it cannot
//!   run a `cut` line, a skipped test), and says on stderr what it cut.

mod cut;
mod ktap;
mod log;
mod nvidia;
mod reliability;
mod scenarios;
mod suite;
mod summary;
mod verdict;

use std::path::Path;
use std::process::ExitCode;

fn read(path: &str) -> Result<String, String> {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| format!("cannot read {path}: {e}"))
}

fn load_suite(path: &str) -> Result<suite::Suite, String> {
    let name = Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| format!("bad suite path {path}"))?;
    suite::Suite::parse(name, &read(path)?).map_err(|e| format!("{path}: {e}"))
}

fn opt(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

fn check(args: &[String]) -> Result<bool, String> {
    let suite_path = opt(args, "--suite").ok_or("check: --suite FILE is required")?;
    let log_path = opt(args, "--log").ok_or("check: --log FILE is required")?;
    let timed_out = args.iter().any(|a| a == "--timed-out");
    let suite = load_suite(&suite_path)?;
    let facts = log::analyse(&read(&log_path)?).map_err(|e| format!("{log_path}: {e}"))?;
    let v = verdict::judge(&suite, &facts, timed_out);
    let mut out = String::new();
    summary::render(std::slice::from_ref(&v), &mut out);
    let counts = v.counts();
    print!("{out}");
    println!("suite {}: {counts} (log: {log_path})", suite.name);
    if let Some(json) = opt(args, "--json") {
        let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(&json, text).map_err(|e| format!("cannot write {json}: {e}"))?;
    }
    let allow_skips = allow_skips();
    if counts.cut > 0 {
        println!(
            "suite {}: {} skipped by the cut for this kernel (lines it cannot run, SKIP above)",
            suite.name, counts.cut
        );
    }
    if counts.lost() > 0 {
        println!(
            "suite {}: {} skipped (SKIP above): a skipped test did not run; {}",
            suite.name,
            counts.lost(),
            if allow_skips {
                "accepted (PEERMEM_ALLOW_SKIPS=1)"
            } else {
                "the boot is not green (PEERMEM_ALLOW_SKIPS=1 accepts them)"
            }
        );
    }
    Ok(counts.green(allow_skips))
}

/// PEERMEM_ALLOW_SKIPS=1: a run that skipped tests (other than the lines a
/// cut for the kernel declared) may still be green.
fn allow_skips() -> bool {
    std::env::var("PEERMEM_ALLOW_SKIPS").is_ok_and(|v| v == "1")
}

fn suite_field(args: &[String]) -> Result<bool, String> {
    let suite = load_suite(&opt(args, "--suite").ok_or("suite-field: --suite FILE is required")?)?;
    match args.last().map(String::as_str) {
        Some("iommu") => println!("{}", if suite.iommu { "on" } else { "off" }),
        Some("timeout") => println!("{}", suite.timeout_s),
        Some("memory") => println!("{}", suite.memory_mib),
        Some("cpus") => println!("{}", suite.cpus),
        other => return Err(format!("suite-field: unknown field {other:?}")),
    }
    Ok(true)
}

/// A verdict the run started that is not there or not readable: a failed
/// test in its place.
fn lost_verdict(path: &str, why: String) -> verdict::SuiteVerdict {
    verdict::SuiteVerdict {
        suite: format!("lost: {path}"),
        tests: vec![verdict::TestResult {
            name: format!("verdict:{path}"),
            passed: false,
            skipped: false,
            cut: false,
            reason: format!("{why}: the run started it, its runner died before judging it"),
            figures: Default::default(),
            evidence: Vec::new(),
        }],
    }
}

fn summary_cmd(args: &[String]) -> Result<bool, String> {
    let mut verdicts = Vec::new();
    let (mut cargo_log, mut cargo_status, mut host_skips) = (None, None, None);
    // What the caller left out of the run (`--shrunk WHAT`, make test's
    // SUITES, PEERMEM_SKIP_SELFTEST, PEERMEM_MATRIX_KERNELS): the closing
    // line says so.
    let mut shrunk: Vec<String> = Vec::new();
    // Lines printed just before the failures and the closing line: the
    // run's wall time against its budget (tests/run-tests.sh).
    let mut budget: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let value = |flag: &str| args.get(i + 1).ok_or(format!("{flag} needs a file"));
        match args[i].as_str() {
            "--cargo-log" => cargo_log = Some(value("--cargo-log")?.clone()),
            "--cargo-status" => cargo_status = Some(value("--cargo-status")?.clone()),
            "--host-skips" => host_skips = Some(value("--host-skips")?.clone()),
            "--shrunk" => shrunk.push(value("--shrunk")?.clone()),
            "--budget" => budget.push(value("--budget")?.clone()),
            path => {
                verdicts.push(match read(path) {
                    Err(e) => lost_verdict(path, e),
                    Ok(text) => serde_json::from_str::<verdict::SuiteVerdict>(&text)
                        .unwrap_or_else(|e| lost_verdict(path, format!("not a verdict: {e}"))),
                });
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let mut host = verdict::Counts::default();
    let mut failed_host_tests = Vec::new();
    if let Some(log) = &cargo_log {
        let log = read(log).ok();
        failed_host_tests = summary::failed_cargo_tests(log.as_deref().unwrap_or_default());
        let status = cargo_status.as_deref().and_then(|f| read(f).ok());
        let skips = host_skips
            .as_deref()
            .and_then(|f| read(f).ok())
            .unwrap_or_default();
        let h = summary::host_tests(log.as_deref(), status.as_deref(), &skips);
        host = h.counts;
        if !h.verdict.tests.is_empty() {
            verdicts.insert(0, h.verdict);
        }
    }
    let mut out = String::new();
    let table = summary::render(&verdicts, &mut out);
    print!("{out}");
    println!("host tests (cargo): {host}");
    println!("tests listed above: {table}");
    let total = host + table;
    let allow_skips = allow_skips();
    if total.cut > 0 {
        println!(
            "{} skipped by the cut for a kernel (SKIP above, `cut for this kernel: ...`): lines that kernel cannot run; accepted",
            total.cut
        );
    }
    if total.lost() > 0 {
        println!(
            "{} skipped (SKIP above): a skipped test did not run; {}",
            total.lost(),
            if allow_skips {
                "accepted (PEERMEM_ALLOW_SKIPS=1)"
            } else {
                "the run fails (a reference machine has none; PEERMEM_ALLOW_SKIPS=1 accepts them)"
            }
        );
    }
    for line in &budget {
        println!("{line}");
    }
    let mut failed = failed_host_tests;
    failed.extend(summary::failures(&verdicts, 240));
    if !failed.is_empty() {
        println!("failed ({}):", failed.len());
        for line in &failed {
            println!("  {line}");
        }
    }
    if shrunk.is_empty() {
        println!("{total}");
    } else {
        println!("{total} (not all of make test: {})", shrunk.join("; "));
    }
    Ok(total.passed > 0 && total.green(allow_skips))
}

/// Reads the verdict files of a report command's arguments, and the file
/// its `--json FILE` names, if any.
fn report_args(args: &[String]) -> Result<(Vec<verdict::SuiteVerdict>, Option<String>), String> {
    let mut verdicts = Vec::new();
    let mut json = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--json" {
            json = Some(args.get(i + 1).ok_or("--json needs a file")?.clone());
            i += 2;
            continue;
        }
        let v: verdict::SuiteVerdict = serde_json::from_str(&read(&args[i])?)
            .map_err(|e| format!("{}: not a verdict: {e}", args[i]))?;
        verdicts.push(v);
        i += 1;
    }
    Ok((verdicts, json))
}

/// Writes a report as pretty JSON where `--json` asked for it.
fn write_report<T: serde::Serialize>(json: Option<String>, report: &T) -> Result<(), String> {
    if let Some(json) = json {
        let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
        std::fs::write(&json, text).map_err(|e| format!("cannot write {json}: {e}"))?;
    }
    Ok(())
}

fn reliability_cmd(args: &[String]) -> Result<bool, String> {
    let (verdicts, json) = report_args(args)?;
    let report = reliability::build(&verdicts);
    print!("{}", reliability::render(&report));
    write_report(json, &report)?;
    Ok(report.failed == 0 && report.passed > 0)
}

fn nvidia_cmd(args: &[String]) -> Result<bool, String> {
    let (verdicts, json) = report_args(args)?;
    let report = nvidia::build(&verdicts);
    print!("{}", nvidia::render(&report));
    write_report(json, &report)?;
    Ok(report.ours_failed == 0 && report.nvidia_undeclared == 0 && !report.rows.is_empty())
}

fn cut_suite(args: &[String]) -> Result<bool, String> {
    let path = opt(args, "--suite").ok_or("cut-suite: --suite FILE is required")?;
    let out = opt(args, "--out").ok_or("cut-suite: --out FILE is required")?;
    // The suite must parse before and after: a cut never hides a bad line.
    let name = load_suite(&path)?.name;
    let kernel = cut::Kernel {
        kasan: !args.iter().any(|a| a == "--no-kasan"),
        nvidia: !args.iter().any(|a| a == "--no-nvidia"),
        primary: !args.iter().any(|a| a == "--not-primary"),
    };
    let c = cut::cut(&read(&path)?, kernel);
    suite::Suite::parse(&name, &c.text).map_err(|e| format!("{path}, cut: {e}"))?;
    std::fs::write(&out, &c.text).map_err(|e| format!("cannot write {out}: {e}"))?;
    if c.kasan_only > 0 {
        eprintln!(
            "{name}: {} lines whose only detector is KASAN skipped (this kernel has no KASAN; counted as skipped)",
            c.kasan_only
        );
    }
    if c.nvidia_runs > 0 {
        eprintln!(
            "{name}: {} runs of NVIDIA's module skipped (built for the primary kernel only; counted as skipped)",
            c.nvidia_runs
        );
    }
    if c.fixture_checks > 0 {
        eprintln!(
            "{name}: {} checks of the simulator with the C reference client skipped (the primary kernel runs them; counted as skipped)",
            c.fixture_checks
        );
    }
    Ok(true)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("check") => check(&args[1..]),
        Some("suite-field") => suite_field(&args[1..]),
        Some("summary") => summary_cmd(&args[1..]),
        Some("reliability") => reliability_cmd(&args[1..]),
        Some("nvidia-vs-ours") => nvidia_cmd(&args[1..]),
        Some("cut-suite") => cut_suite(&args[1..]),
        Some("splat-regex") if args.len() == 1 => {
            println!("{}", log::splat_regex());
            Ok(true)
        }
        _ => Err(
            "usage: vm-verdict check|suite-field|summary|reliability|nvidia-vs-ours|cut-suite|splat-regex ... (see src/main.rs)"
                .into(),
        ),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("vm-verdict: {e}");
            ExitCode::from(2)
        }
    }
}
