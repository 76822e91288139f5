//! The closing summary of `make test`: host tests and every VM verdict
//! together, one `N passed, N failed, N skipped` line.

use crate::verdict::{Counts, SuiteVerdict, TestResult};
use std::collections::BTreeMap;

/// What a `cargo test --no-fail-fast` log says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CargoReport {
    /// Passed, failed and ignored (skipped) tests over every `test result:`
    /// line.
    pub counts: Counts,
    /// Test binaries (cargo's `Running ...` / `Doc-tests ...` lines) that
    /// printed no `test result:` line: they crashed, aborted or hung up
    /// before the end, and their tests were never counted.
    pub silent: Vec<String>,
    /// Test binaries cargo started.
    pub binaries: usize,
}

/// The counts of one `test result:` line (`ok. 12 passed; 0 failed; 1
/// ignored; 0 measured; 0 filtered out; finished in 0.01s`); ignored tests
/// did not run: skipped.
fn result_counts(rest: &str) -> Counts {
    let mut c = Counts::default();
    for part in rest.split(';') {
        let mut w = part.split_whitespace().rev();
        let (Some(label), Some(n)) = (w.next(), w.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        match label {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            "ignored" => c.skipped += n,
            _ => {}
        }
    }
    c
}

/// Reads a `cargo test` log: the counts, and every test binary that ended
/// without its `test result:` line.
pub fn cargo_report(log: &str) -> CargoReport {
    // Ends the binary that was running: silent unless it printed a result.
    fn close(current: &mut Option<(String, bool)>, r: &mut CargoReport) {
        if let Some((name, false)) = current.take() {
            r.silent.push(name);
        }
    }
    let mut r = CargoReport::default();
    // The binary running now, and whether it printed its result.
    let mut current: Option<(String, bool)> = None;
    for line in log.lines() {
        let t = line.trim();
        // Cargo's status lines are right-aligned in 12 columns; a test's
        // own output (shown for failures) starts at the margin.
        let status =
            line.starts_with(' ') && (t.starts_with("Running ") || t.starts_with("Doc-tests "));
        if status {
            close(&mut current, &mut r);
            r.binaries += 1;
            current = Some((t.to_string(), false));
            continue;
        }
        if let Some(rest) = t.strip_prefix("test result: ") {
            r.counts = r.counts + result_counts(rest);
            if let Some((_, seen)) = &mut current {
                *seen = true;
            }
        }
    }
    close(&mut current, &mut r);
    r
}

/// The host tests as a verdict: one test per test binary that printed no
/// result, per host test that reported a skip, and for cargo's exit status
/// when nothing else explains it. Its counts are added to the cargo
/// log's.
pub struct HostTests {
    /// The counts of the `test result:` lines, skips moved from passed.
    pub counts: Counts,
    /// The tests the counts above do not hold: the binaries that printed
    /// nothing, the skips, a failed cargo.
    pub verdict: SuiteVerdict,
}

fn host_test(name: String, failure: Option<String>, skipped: bool) -> TestResult {
    TestResult {
        name,
        passed: failure.is_none(),
        skipped,
        cut: false,
        reason: failure.unwrap_or_default(),
        figures: BTreeMap::new(),
        evidence: Vec::new(),
    }
}

/// Judges the host tests: `log` is cargo's output (`None`: there is none),
/// `status` its exit status as the runner wrote it, `skips` the lines host
/// tests appended to `$PEERMEM_HOST_SKIPS` (`test name: reason`), each
/// test a pass in cargo's count that is a skip.
pub fn host_tests(log: Option<&str>, status: Option<&str>, skips: &str) -> HostTests {
    let mut tests = Vec::new();
    let Some(log) = log else {
        tests.push(host_test(
            "host:cargo-test".into(),
            Some("no cargo test log: the host tests never ran".into()),
            false,
        ));
        return HostTests {
            counts: Counts::default(),
            verdict: SuiteVerdict {
                suite: "host-tests".into(),
                tests,
            },
        };
    };
    let r = cargo_report(log);
    let mut counts = r.counts;
    for b in &r.silent {
        tests.push(host_test(
            format!("host:{b}"),
            Some("the test binary printed no test result (crashed, aborted or killed)".into()),
            false,
        ));
    }
    for line in skips.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, reason) = line.split_once(": ").unwrap_or((line, "skipped"));
        // Reported by a test that then returned: cargo counted it passed.
        counts.passed = counts.passed.saturating_sub(1);
        tests.push(host_test(format!("host:{name}"), Some(reason.into()), true));
    }
    let status_failure = match status.map(str::trim) {
        Some("0") => None,
        Some(s) if s.parse::<i32>().is_ok() => Some(format!("cargo test exited {s}")),
        Some(s) => Some(format!("cargo test's exit status is unknown ('{s}')")),
        None => Some("cargo test's exit status was not recorded".into()),
    };
    match status_failure {
        // A failed test or a silent binary explains cargo's status already.
        Some(why) if counts.failed == 0 && r.silent.is_empty() => tests.push(host_test(
            "host:cargo-test".into(),
            Some(format!(
                "{why} with no failed test counted (a build or link failure?)"
            )),
            false,
        )),
        _ if r.binaries == 0 || counts.passed == 0 => tests.push(host_test(
            "host:cargo-test".into(),
            Some("cargo ran no test binary, or no test passed".into()),
            false,
        )),
        _ => {}
    }
    HostTests {
        counts,
        verdict: SuiteVerdict {
            suite: "host-tests".into(),
            tests,
        },
    }
}

/// Renders the table of tests and returns their counts.
pub fn render(verdicts: &[SuiteVerdict], out: &mut String) -> Counts {
    let mut counts = Counts::default();
    let width = verdicts
        .iter()
        .flat_map(|v| v.tests.iter().map(|t| t.name.len()))
        .max()
        .unwrap_or(10)
        .min(90);
    for v in verdicts {
        out.push_str(&format!("== suite {} ==\n", v.suite));
        for t in &v.tests {
            let figures: Vec<String> = t
                .figures
                .iter()
                .filter(|(k, _)| k.as_str() != "reason")
                .map(|(k, val)| format!("{k}={val}"))
                .collect();
            out.push_str(&format!(
                "  {:<width$}  {}  {}{}\n",
                t.name,
                if t.passed {
                    "PASS"
                } else if t.skipped {
                    "SKIP"
                } else {
                    "FAIL"
                },
                figures.join(" "),
                if t.passed {
                    String::new()
                } else {
                    format!("  ({})", t.reason)
                },
            ));
            for e in &t.evidence {
                out.push_str(&format!("      {e}\n"));
            }
            counts.add(t);
        }
    }
    counts
}

/// The host tests a `cargo test` log reports failed (`test NAME ... FAILED`),
/// as `host-tests / NAME`.
pub fn failed_cargo_tests(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(|name| format!("host-tests / {name}"))
        .collect()
}

/// The failed tests again (`suite / test: reason`, the reason cut to
/// `width` characters), each followed by its first [`EVIDENCE_LINES`]
/// evidence lines (a splat's log line, indented), for the end of the run:
/// a CI log that keeps only its last lines still names what failed and
/// what the kernel said.
pub fn failures(verdicts: &[SuiteVerdict], width: usize) -> Vec<String> {
    let cut = |text: &str| {
        let text = text.replace('\n', " ");
        match text.char_indices().nth(width) {
            Some((at, _)) => format!("{}...", &text[..at]),
            None => text,
        }
    };
    let mut lines = Vec::new();
    for v in verdicts {
        for t in v.tests.iter().filter(|t| !t.passed && !t.skipped) {
            lines.push(format!("{} / {}: {}", v.suite, t.name, cut(&t.reason)));
            for e in t.evidence.iter().take(EVIDENCE_LINES) {
                lines.push(format!("    {}", cut(e)));
            }
            if t.evidence.len() > EVIDENCE_LINES {
                lines.push(format!(
                    "    ... {} more in the suite's verdict.json",
                    t.evidence.len() - EVIDENCE_LINES
                ));
            }
        }
    }
    lines
}

/// How many evidence lines of a failed test the closing list repeats.
pub const EVIDENCE_LINES: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "   Compiling x v0.1.0\n\
        \x20    Running unittests src/main.rs (target/release/deps/a-1)\n\n\
        running 13 tests\n\
        test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured\n\
        \x20    Running tests/cli.rs (target/release/deps/cli-2)\n\
        test result: FAILED. 3 passed; 2 failed; 0 ignored\n\
        \x20  Doc-tests x\n\
        test result: ok. 0 passed; 0 failed; 0 ignored\n";

    #[test]
    fn sums_every_cargo_binary() {
        let r = cargo_report(OK);
        assert_eq!(
            r.counts,
            Counts {
                passed: 15,
                failed: 2,
                skipped: 1,
                cut: 0
            }
        );
        assert_eq!(r.binaries, 3);
        let log = "test a::ok ... ok\ntest b::broken ... FAILED\ntest result: FAILED.\n";
        assert_eq!(failed_cargo_tests(log), vec!["host-tests / b::broken"]);
        assert!(r.silent.is_empty());
        assert_eq!(cargo_report("nothing"), CargoReport::default());
    }

    #[test]
    fn a_binary_without_a_result_fails_by_name() {
        // Aborted after its first test: no result line; the next binary ran
        // (--no-fail-fast).
        let log = OK.replace(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored\n",
            "running 5 tests\nerror: test failed, to rerun pass `-p x --test cli`\n",
        );
        let r = cargo_report(&log);
        assert_eq!(
            r.silent,
            vec!["Running tests/cli.rs (target/release/deps/cli-2)"]
        );
        let h = host_tests(Some(&log), Some("101"), "");
        assert_eq!(h.verdict.counts().failed, 1, "{:#?}", h.verdict);
        assert!(h.verdict.tests[0].name.contains("tests/cli.rs"));
        // The last binary silent too.
        let log = OK.replace("test result: ok. 0 passed; 0 failed; 0 ignored\n", "");
        assert_eq!(cargo_report(&log).silent, vec!["Doc-tests x"]);
    }

    #[test]
    fn cargo_status_counts_when_nothing_else_explains_it() {
        let green = OK.replace("FAILED. 3 passed; 2 failed", "ok. 5 passed; 0 failed");
        let h = host_tests(Some(&green), Some("0"), "");
        assert_eq!(h.verdict.counts(), Counts::default());
        assert_eq!(h.counts.failed, 0);
        // A link failure: cargo fails, no test binary runs.
        let h = host_tests(Some("error: linking with `cc` failed\n"), Some("101"), "");
        assert_eq!(h.verdict.counts().failed, 1);
        // Every count fine but cargo failed: still red.
        assert_eq!(
            host_tests(Some(&green), Some("101"), "")
                .verdict
                .counts()
                .failed,
            1
        );
        // No status, no log: red.
        assert_eq!(
            host_tests(Some(&green), None, "").verdict.counts().failed,
            1
        );
        assert_eq!(host_tests(None, Some("0"), "").verdict.counts().failed, 1);
        // A failed test explains a failed cargo: counted once.
        let h = host_tests(Some(OK), Some("101"), "");
        assert_eq!(h.counts.failed + h.verdict.counts().failed, 2);
    }

    #[test]
    fn host_skips_move_from_passed_to_skipped() {
        let green = OK.replace("FAILED. 3 passed; 2 failed", "ok. 5 passed; 0 failed");
        let h = host_tests(
            Some(&green),
            Some("0"),
            "cli::binary_starts_without_libibverbs: no readelf\n",
        );
        assert_eq!(h.counts.passed, 16);
        let t = &h.verdict.tests[0];
        assert!(t.skipped && !t.passed);
        assert_eq!(t.name, "host:cli::binary_starts_without_libibverbs");
        assert_eq!(t.reason, "no readelf");
    }

    #[test]
    fn failures_are_named_again_with_their_suite() {
        let pass = TestResult {
            name: "scenario:a".into(),
            passed: true,
            skipped: false,
            cut: false,
            reason: String::new(),
            figures: BTreeMap::new(),
            evidence: Vec::new(),
        };
        let fail = TestResult {
            name: "scenario:b".into(),
            passed: false,
            reason: "window missed\nafter 3 tries".into(),
            ..pass.clone()
        };
        let splat = TestResult {
            name: "vm:rel-races:splats".into(),
            passed: false,
            reason: "5 unexpected kernel splat line(s)".into(),
            evidence: (1..=5)
                .map(|i| format!("log line {i}: [bug] BUG: {i}"))
                .collect(),
            ..pass.clone()
        };
        let skip = TestResult {
            name: "scenario:c".into(),
            skipped: true,
            cut: true,
            ..fail.clone()
        };
        let v = vec![SuiteVerdict {
            suite: "rel-races (kernel 7.1-ubuntu)".into(),
            tests: vec![pass, fail, skip, splat],
        }];
        assert_eq!(
            failures(&v, 200),
            vec![
                "rel-races (kernel 7.1-ubuntu) / scenario:b: window missed after 3 tries",
                "rel-races (kernel 7.1-ubuntu) / vm:rel-races:splats: 5 unexpected kernel splat line(s)",
                "    log line 1: [bug] BUG: 1",
                "    log line 2: [bug] BUG: 2",
                "    log line 3: [bug] BUG: 3",
                "    ... 2 more in the suite's verdict.json",
            ]
        );
        assert_eq!(
            failures(&v, 6)[..3],
            [
                "rel-races (kernel 7.1-ubuntu) / scenario:b: window...",
                "rel-races (kernel 7.1-ubuntu) / vm:rel-races:splats: 5 unex...",
                "    log li...",
            ]
        );
    }
}
