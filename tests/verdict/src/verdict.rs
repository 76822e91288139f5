//! The verdict: a suite's expectations held against what its log shows.

use crate::log::{KunitReport, LogFacts, Outcome, Splat};
use crate::suite::Suite;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One counted test of a VM run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestResult {
    /// `kunit:<suite>` (the suite reported all its cases),
    /// `kunit:<suite>:<case>`, `scenario:<id>`, `teeth:<id>`,
    /// `vm:<suite>:completed`, `vm:<suite>:splats` or
    /// `vm:<suite>:leak-scan`.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// It did not run, or not all of it (a KUnit `# SKIP`, a scenario's
    /// `skip`, no kmemleak): neither passed nor failed. Absent in the JSON
    /// of older writers: false.
    #[serde(default)]
    pub skipped: bool,
    /// A skip the cut for the kernel declared (`cut` line of the suite): a
    /// line this kernel cannot run, named with why. Absent in the JSON of
    /// older writers: false.
    #[serde(default)]
    pub cut: bool,
    /// Why it failed or was skipped (empty when it passed).
    pub reason: String,
    /// Figures a scenario reported.
    pub figures: BTreeMap<String, String>,
    /// Log lines that explain a failure.
    pub evidence: Vec<String>,
}

/// The whole verdict of one VM boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteVerdict {
    /// Suite name.
    pub suite: String,
    /// Every test, in suite order.
    pub tests: Vec<TestResult>,
}

/// Passed, failed and skipped tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Tests that ran and passed.
    pub passed: usize,
    /// Tests that failed.
    pub failed: usize,
    /// Tests that did not run, or not all of them.
    pub skipped: usize,
    /// Of the skipped, those the cut for a kernel declared: lines that
    /// kernel cannot run, not tests the harness lost.
    pub cut: usize,
}

impl Counts {
    /// Counts one test.
    pub fn add(&mut self, t: &TestResult) {
        if t.passed {
            self.passed += 1;
        } else if t.skipped {
            self.skipped += 1;
            self.cut += usize::from(t.cut);
        } else {
            self.failed += 1;
        }
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            passed: self.passed + o.passed,
            failed: self.failed + o.failed,
            skipped: self.skipped + o.skipped,
            cut: self.cut + o.cut,
        }
    }
}

impl Counts {
    /// Skips no cut declared: a test that could not do what it is for.
    pub fn lost(&self) -> usize {
        self.skipped - self.cut
    }

    /// Whether a run with these counts is green: nothing failed, and no
    /// skip other than the cut's unless `allow_skips` (PEERMEM_ALLOW_SKIPS=1).
    pub fn green(&self, allow_skips: bool) -> bool {
        self.failed == 0 && (self.lost() == 0 || allow_skips)
    }
}

impl std::fmt::Display for Counts {
    /// `N passed, N failed, N skipped`: the closing line's format.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

impl SuiteVerdict {
    /// Number of passed, failed and skipped tests.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for t in &self.tests {
            c.add(t);
        }
        c
    }
}

fn result(name: String, failure: Option<String>) -> TestResult {
    TestResult {
        name,
        passed: failure.is_none(),
        skipped: false,
        cut: false,
        reason: failure.unwrap_or_default(),
        figures: BTreeMap::new(),
        evidence: Vec::new(),
    }
}

fn skipped(name: String, reason: String) -> TestResult {
    TestResult {
        skipped: true,
        ..result(name, Some(reason))
    }
}

/// The `kunit:<suite>` test: the suite ran to its end and reported every
/// case its plan announced (each case is its own test).
fn kunit_complete(r: Option<&KunitReport>) -> Option<String> {
    let r = match r {
        None => return Some("no KTAP output for this suite".into()),
        Some(r) if r.missing => return Some("the guest found no results for this suite".into()),
        Some(r) => r,
    };
    let failed = r.with(Outcome::Fail);
    match (r.plan, r.suite_ok) {
        _ if r.cases.is_empty() => Some("no test case reported".into()),
        (None, _) => Some("no KTAP plan (1..N) for the suite".into()),
        (Some(n), _) if n != r.cases.len() => Some(format!(
            "the plan announced {n} cases, {} reported",
            r.cases.len()
        )),
        (_, None) => Some("no closing result line for the suite".into()),
        (_, Some(false)) if failed.is_empty() => {
            Some("the suite reported not ok, no case failed".into())
        }
        _ => None,
    }
}

fn splat_evidence(s: &Splat) -> String {
    let mut e = format!("log line {}: [{}] {}", s.line_no, s.kind, s.text);
    if !s.classes.is_empty() {
        e += &format!(" (lock classes: {})", s.classes.join(", "));
    }
    if !s.modules.is_empty() {
        e += &format!(" (modules in its report: {})", s.modules.join(", "));
    }
    let when = match (&s.scenario, &s.allocated_during) {
        (Some(scenario), _) => format!("during {scenario}"),
        (None, Some(scenario)) => {
            format!("printed after the last scenario; the object was allocated during {scenario}")
        }
        (None, None) => "in no scenario: between two, or after the last".to_string(),
    };
    e + &format!(" ({when})")
}

/// Turns the result of a scenario run against a planted defect into its
/// `teeth:` test: it passes when the scenario reported one result, `fail`,
/// for the reason `pattern` names.
fn judge_teeth(mut t: TestResult, results: Option<usize>, pattern: &str) -> TestResult {
    let id = t.name.trim_start_matches("scenario:").to_string();
    // A run of NVIDIA's own module (issue 33, suite nvidia-vs-ours): its
    // `caught` line declares a red of NVIDIA's code, not a planted defect.
    let (what, missed) = if id.contains("client=nv") {
        (
            "NVIDIA's declared red",
            "NVIDIA's declared red did not show",
        )
    } else {
        ("the planted defect", "the planted defect went uncaught")
    };
    let failure = match results {
        None | Some(0) => Some("no report (pass, fail or skip)".to_string()),
        Some(n) if n != 1 => Some(format!("{n} reports instead of one")),
        _ if t.skipped => Some(format!(
            "the scenario skipped, {what} went untested: {}",
            t.reason
        )),
        _ if t.passed => Some(format!(
            "{missed}: the scenario passed (wanted a failure with '{pattern}')"
        )),
        _ if !t.reason.contains(pattern) => Some(format!(
            "red for another reason than {what} (wanted '{pattern}'): {}",
            t.reason
        )),
        _ => None,
    };
    let caught = failure.is_none();
    if caught {
        t.evidence.push(format!("failed as planted: {}", t.reason));
    }
    t.name = format!("teeth:{id}");
    t.passed = caught;
    t.skipped = false;
    t.reason = failure.unwrap_or_default();
    t.figures
        .insert("caught".into(), if caught { "yes" } else { "no" }.into());
    t
}

/// The modules a run against a planted defect loads with the defect in
/// them, by its scenario's `client=`: the C reference client (and its
/// second copy), or NVIDIA's own module of that release
/// (`nvidia_peermem_<major>`, tests/nvidia/build-nvidia-peermem.sh). None
/// for any other tooth: only its pattern excuses a splat.
fn planted_modules(scenario: &str) -> Vec<String> {
    let client = scenario
        .trim_end_matches(']')
        .split(['[', ','])
        .find_map(|w| w.strip_prefix("client="));
    match client {
        Some("ref") => vec!["peermem_refclient".into(), "peermem_refclient2".into()],
        Some(c) => match c.strip_prefix("nv") {
            Some(major) if !major.is_empty() && major.chars().all(|d| d.is_ascii_digit()) => {
                vec![format!("nvidia_peermem_{major}")]
            }
            _ => Vec::new(),
        },
        None => Vec::new(),
    }
}

/// Whether splat `s`, printed during the planted run `t`, is that run's:
/// its headline holds the tooth's pattern, or its report names a module
/// that carries the planted defect.
fn planted_splat(t: &crate::suite::Teeth, s: &Splat) -> bool {
    let planted = planted_modules(&t.scenario);
    s.text.contains(&t.pattern) || s.modules.iter().any(|m| planted.contains(m))
}

/// Judges one boot. `timed_out` is the host's word that it had to kill QEMU.
pub fn judge(suite: &Suite, facts: &LogFacts, timed_out: bool) -> SuiteVerdict {
    let mut tests = Vec::new();

    for (_, name) in &suite.kunit {
        let report = facts.kunit.get(name);
        let mut t = result(format!("kunit:{name}"), kunit_complete(report));
        if let Some(r) = report {
            t.figures.insert("cases".into(), r.cases.len().to_string());
            if let Some(n) = r.plan {
                t.figures.insert("plan".into(), n.to_string());
            }
        }
        tests.push(t);
        for (case, outcome) in report.map(|r| r.cases.as_slice()).unwrap_or_default() {
            let case_name = format!("kunit:{name}:{case}");
            tests.push(match outcome {
                Outcome::Pass => result(case_name, None),
                Outcome::Fail => result(case_name, Some("KTAP: not ok".into())),
                Outcome::Skip => skipped(case_name, "KTAP: # SKIP".into()),
            });
        }
    }

    for id in &suite.scenarios {
        let mut t = match facts.scenarios.get(id) {
            None => result(
                format!("scenario:{id}"),
                Some("no report (pass, fail or skip)".into()),
            ),
            Some(r) => {
                let reason = |default: &str| {
                    r.figures
                        .get("reason")
                        .cloned()
                        .unwrap_or_else(|| default.into())
                };
                let mut t = if r.count != 1 {
                    result(
                        format!("scenario:{id}"),
                        Some(format!("{} reports instead of one", r.count)),
                    )
                } else {
                    match r.outcome {
                        Outcome::Pass => result(format!("scenario:{id}"), None),
                        Outcome::Fail => {
                            result(format!("scenario:{id}"), Some(reason("reported fail")))
                        }
                        Outcome::Skip => skipped(format!("scenario:{id}"), reason("skipped")),
                    }
                };
                t.figures = r.figures.clone();
                t
            }
        };
        t.name = format!("scenario:{id}");
        if let Some(teeth) = suite.teeth_of(id) {
            t = judge_teeth(t, facts.scenarios.get(id).map(|r| r.count), &teeth.pattern);
        }
        tests.push(t);
    }

    // The lines the cut for this kernel left out: not run, so skipped, and
    // counted, so a cut suite never looks whole.
    for c in &suite.cut {
        let kind = if c.teeth { "teeth" } else { "scenario" };
        let mut t = skipped(
            format!("{kind}:{}", c.scenario),
            format!("cut for this kernel: {}", c.why),
        );
        t.cut = true;
        tests.push(t);
    }

    let unknown: Vec<&String> = facts
        .scenarios
        .keys()
        .filter(|id| !suite.scenarios.contains(id))
        .collect();

    let mut incomplete = Vec::new();
    if timed_out {
        incomplete.push("the VM did not finish before the timeout and was killed".to_string());
    } else if !facts.done.contains(&suite.name) {
        incomplete
            .push("the VM never printed PEERMEM-SUITE-DONE (crash, hang or early exit)".into());
    } else if !unknown.is_empty() {
        incomplete.push(format!(
            "KTAP result lines for scenarios the suite does not list: {}",
            unknown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // A scenario document that breaks KTAP's rules is not a record to
    // trust, whatever its lines say.
    if !facts.scenario_problems.is_empty() {
        incomplete.push(format!(
            "the scenarios' KTAP document: {}",
            facts.scenario_problems.join("; ")
        ));
    }
    let completed = (!incomplete.is_empty()).then(|| incomplete.join("; "));
    tests.push(result(format!("vm:{}:completed", suite.name), completed));

    let mut unexpected = Vec::new();
    let mut seen = vec![false; suite.expected_splats.len()];
    for s in &facts.splats {
        // A planted defect's splats are its scenario's evidence, but only
        // those that are its: a splat of another cause (a late report of
        // the run before, a bug of ours the planted run reached) counts.
        if s.scenario
            .as_deref()
            .and_then(|id| suite.teeth_of(id))
            .is_some_and(|t| planted_splat(t, s))
        {
            continue;
        }
        match suite
            .expected_splats
            .iter()
            .position(|e| s.text.contains(&e.pattern) && e.accepts(&s.classes))
        {
            Some(i) => seen[i] = true,
            None => unexpected.push(s),
        }
    }
    let mut splat_test = if !unexpected.is_empty() {
        let mut t = result(
            format!("vm:{}:splats", suite.name),
            Some(format!(
                "{} unexpected kernel splat line(s)",
                unexpected.len()
            )),
        );
        t.evidence = unexpected.iter().map(|s| splat_evidence(s)).collect();
        t
    } else if let Some(i) = seen.iter().position(|s| !s) {
        result(
            format!("vm:{}:splats", suite.name),
            Some(format!(
                "the expected {} splat ('{}') did not happen",
                suite.expected_splats[i].kind, suite.expected_splats[i].pattern
            )),
        )
    } else {
        result(format!("vm:{}:splats", suite.name), None)
    };
    splat_test
        .figures
        .insert("splats".into(), unexpected.len().to_string());
    splat_test.figures.insert(
        "expected_splats".into(),
        (facts.splats.len() - unexpected.len()).to_string(),
    );
    tests.push(splat_test);

    // The guest's final kmemleak scan (guest-init.sh's finish): the one leak
    // check most scenarios have. Without kmemleak it is a skip, not a pass.
    let leak_scan = format!("vm:{}:leak-scan", suite.name);
    tests.push(match facts.kmemleak.as_deref() {
        Some("scanned") => result(leak_scan, None),
        Some(other) => skipped(
            leak_scan,
            format!("kmemleak {other} in the guest: no leak check at the end of the boot"),
        ),
        None => result(
            leak_scan,
            Some("no PEERMEM-KMEMLEAK line: the final leak scan did not run".into()),
        ),
    });

    SuiteVerdict {
        suite: suite.name.clone(),
        tests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::analyse;
    use crate::scenarios::console;

    /// The facts of a test log whose `REPORT` lines are scenario reports.
    fn facts(log: &str) -> LogFacts {
        analyse(&console(log)).unwrap()
    }

    fn suite(text: &str) -> Suite {
        Suite::parse("s", text).unwrap()
    }

    const GOOD: &str = "PEERMEM-KUNIT-BEGIN k\nKTAP version 1\n1..1\n    KTAP version 1\n\
                        \x20   # Subtest: k\n    1..1\n    ok 1 a\nok 1 k\n\
                        PEERMEM-KUNIT-END k\nREPORT sc pass ops=3\n\
                        PEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n";

    fn counts(v: &SuiteVerdict) -> (usize, usize, usize) {
        let c = v.counts();
        (c.passed, c.failed, c.skipped)
    }

    fn named<'a>(v: &'a SuiteVerdict, name: &str) -> &'a TestResult {
        v.tests
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no test {name} in {v:#?}"))
    }

    #[test]
    fn green_run_is_green() {
        let v = judge(&suite("kunit k.ko k\nscenario sc\n"), &facts(GOOD), false);
        assert_eq!(counts(&v), (6, 0, 0), "{v:#?}");
        let names: Vec<&str> = v.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kunit:k",
                "kunit:k:a",
                "scenario:sc",
                "vm:s:completed",
                "vm:s:splats",
                "vm:s:leak-scan"
            ]
        );
        assert_eq!(v.tests[2].figures["ops"], "3");
        assert_eq!(v.counts().to_string(), "6 passed, 0 failed, 0 skipped");
    }

    #[test]
    fn a_cut_line_is_a_skip_by_name_and_only_it_is_green() {
        let s = suite(&format!(
            "kunit k.ko k\nscenario sc\ncut teeth \"{}\" rel_field bug=x client=ref\n",
            crate::cut::WHY_KASAN
        ));
        let v = judge(&s, &facts(GOOD), false);
        assert_eq!(counts(&v), (6, 0, 1), "{v:#?}");
        let t = named(&v, "teeth:rel_field[bug=x,client=ref]");
        assert!(t.skipped && t.cut && !t.passed);
        assert!(t
            .reason
            .starts_with("cut for this kernel: this kernel has no KASAN"));
        let c = v.counts();
        assert_eq!((c.cut, c.lost()), (1, 0));
        assert!(c.green(false));
        // A scenario that skipped is a lost test: not green unless asked.
        let skip = GOOD.replace("REPORT sc pass ops=3", "REPORT sc skip reason=no-simtest");
        let c = judge(&s, &facts(&skip), false).counts();
        assert_eq!((c.skipped, c.cut, c.lost()), (2, 1, 1));
        assert!(!c.green(false) && c.green(true));
        // A cut line whose scenario reports anyway is a report the suite
        // does not list.
        let v = judge(
            &suite("scenario sc\ncut scenario \"w\" other\n"),
            &facts(&GOOD.replace("REPORT sc pass ops=3", "REPORT sc pass\nREPORT other pass")),
            false,
        );
        assert!(!named(&v, "vm:s:completed").passed);
    }

    #[test]
    fn each_kunit_case_counts_and_a_missing_one_fails() {
        let s = suite("kunit k.ko k\nscenario sc\n");
        let three = GOOD
            .replace("1..1\n", "1..3\n")
            .replace(
                "    ok 1 a\n",
                "    ok 1 a\n    not ok 2 b\n    ok 3 c # SKIP no x\n",
            )
            .replace("ok 1 k\n", "not ok 1 k\n");
        let v = judge(&s, &facts(&three), false);
        assert_eq!(counts(&v), (6, 1, 1), "{v:#?}");
        assert!(named(&v, "kunit:k").passed);
        assert!(named(&v, "kunit:k:a").passed);
        let b = named(&v, "kunit:k:b");
        assert!(!b.passed && !b.skipped, "{b:?}");
        assert!(named(&v, "kunit:k:c").skipped);
        // A case the plan announced that never reported (the suite died
        // in it): the suite's test fails.
        let short = three.replace("    ok 3 c # SKIP no x\n", "");
        let v = judge(&s, &facts(&short), false);
        assert!(named(&v, "kunit:k")
            .reason
            .contains("plan announced 3 cases, 2"));
        // No plan, no closing line, an unexplained `not ok`: all red.
        let v = judge(&s, &facts(&GOOD.replace("1..1\n", "")), false);
        assert!(!named(&v, "kunit:k").passed);
        let v = judge(&s, &facts(&GOOD.replace("ok 1 k\n", "")), false);
        assert!(!named(&v, "kunit:k").passed);
        let v = judge(&s, &facts(&GOOD.replace("ok 1 k\n", "not ok 1 k\n")), false);
        assert!(!named(&v, "kunit:k").passed);
    }

    #[test]
    fn a_skip_is_neither_pass_nor_fail() {
        let s = suite("kunit k.ko k\nscenario sc\n");
        let log = GOOD.replace("sc pass ops=3", "sc skip ops=3 reason=no simtest in the VM");
        let v = judge(&s, &facts(&log), false);
        assert_eq!(counts(&v), (5, 0, 1), "{v:#?}");
        let t = named(&v, "scenario:sc");
        assert!(t.skipped && !t.passed);
        assert_eq!(t.reason, "no simtest in the VM");
        // No kmemleak in the guest: the final leak scan is a skip; no
        // marker at all (it never got there) a failure.
        let log = GOOD.replace("KMEMLEAK scanned", "KMEMLEAK unavailable");
        let v = judge(&s, &facts(&log), false);
        assert_eq!(counts(&v), (5, 0, 1));
        assert!(named(&v, "vm:s:leak-scan").skipped);
        let log = GOOD.replace("PEERMEM-KMEMLEAK scanned\n", "");
        assert_eq!(counts(&judge(&s, &facts(&log), false)), (5, 1, 0));
        // The JSON of writers that know no skips still reads.
        let t: TestResult = serde_json::from_str(
            r#"{"name":"x","passed":true,"reason":"","figures":{},"evidence":[]}"#,
        )
        .unwrap();
        assert!(t.passed && !t.skipped);
    }

    #[test]
    fn a_splat_is_named_with_its_modules_and_scenario() {
        let s = suite("scenario sc\n");
        let log = GOOD.replace(
            "REPORT sc pass ops=3\n",
            "PEERMEM-SCENARIO-BEGIN sc\n\
             [ 9.0] unreferenced object 0xffff8880 (size 64):\n\
             [ 9.0]   backtrace (crc 0):\n\
             [ 9.0]     [<ffffffff8>] __kmalloc+0x1/0x2\n\
             [ 9.0]     [<ffffffffa>] psim_pin+0x3/0x4 [nvidia_p2p_sim]\n\
             REPORT sc pass ops=3\nPEERMEM-SCENARIO-END sc rc=0\n",
        );
        let v = judge(&s, &facts(&log), false);
        let e = &named(&v, "vm:s:splats").evidence[0];
        assert!(
            e.contains("[kmemleak] unreferenced object 0xffff8880"),
            "{e}"
        );
        assert!(e.contains("(modules in its report: nvidia_p2p_sim)"), "{e}");
        assert!(e.ends_with("(during sc)"), "{e}");
        // the final kmemleak scan's report comes after every scenario
        let log = GOOD.replace(
            "PEERMEM-KMEMLEAK scanned",
            "unreferenced object 0xffff8880 (size 64):\nPEERMEM-KMEMLEAK scanned",
        );
        let v = judge(&s, &facts(&log), false);
        let e = &named(&v, "vm:s:splats").evidence[0];
        assert!(
            e.ends_with("(in no scenario: between two, or after the last)"),
            "{e}"
        );
    }

    #[test]
    fn each_planted_failure_is_red() {
        let s = suite("kunit k.ko k\nscenario sc\n");
        // failing KUnit case
        let log = GOOD.replace("    ok 1 a", "    not ok 1 a");
        assert_eq!(judge(&s, &facts(&log), false).counts().failed, 1);
        // a WARN anywhere
        let log = format!("[ 1.0] WARNING: CPU: 0 PID: 1 at x.c:9 f\n{GOOD}");
        let v = judge(&s, &facts(&log), false);
        assert_eq!(v.counts().failed, 1);
        assert!(named(&v, "vm:s:splats").evidence[0].contains("x.c:9"));
        // a timeout
        assert_eq!(judge(&s, &facts(GOOD), true).counts().failed, 1);
        // no done marker
        let log = GOOD.replace("PEERMEM-SUITE-DONE s", "");
        assert_eq!(judge(&s, &facts(&log), false).counts().failed, 1);
        // missing scenario and missing suite
        let v = judge(
            &s,
            &facts("PEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n"),
            false,
        );
        assert_eq!(counts(&v), (3, 2, 0));
        // scenario failure, and a second report
        let log = GOOD.replace("sc pass", "sc fail");
        assert_eq!(judge(&s, &facts(&log), false).counts().failed, 1);
        let log = format!("{GOOD}REPORT sc pass\n");
        assert_eq!(judge(&s, &facts(&log), false).counts().failed, 1);
        // a scenario the suite does not list
        let log = format!("{GOOD}REPORT other pass\n");
        assert_eq!(judge(&s, &facts(&log), false).counts().failed, 1);
    }

    /// A scenario document that breaks KTAP's rules fails the boot's
    /// `completed` test, whatever its result lines say.
    #[test]
    fn a_malformed_scenario_document_fails_the_boot() {
        let s = suite("scenario sc\n");
        let good = "PEERMEM-KTAP KTAP version 1\nPEERMEM-KTAP 1..1\nPEERMEM-SCENARIO-BEGIN sc\n\
                    PEERMEM-KTAP # report: pass\nPEERMEM-KTAP ok 1 sc\n\
                    PEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n";
        assert_eq!(
            counts(&judge(&s, &analyse(good).unwrap(), false)),
            (4, 0, 0)
        );
        for (broken, why) in [
            (good.replace("PEERMEM-KTAP 1..1\n", ""), "no KTAP plan"),
            (
                good.replace("1..1", "1..2"),
                "announced 2 tests, 1 result lines",
            ),
            (
                good.replace("ok 1 sc\n", "ok 1 sc\nPEERMEM-KTAP ok 1 sc\n"),
                "test number 1 twice",
            ),
            (
                good.replace("PEERMEM-KTAP ok 1 sc\n", "PEERMEM-KTAP ok 1 other\n"),
                "scenario sc started (log line 3) and has no KTAP result line",
            ),
        ] {
            let v = judge(&s, &analyse(&broken).unwrap(), false);
            let t = named(&v, "vm:s:completed");
            assert!(!t.passed && t.reason.contains(why), "{why}: {t:?}");
        }
    }

    #[test]
    fn teeth_must_fail_for_the_planted_reason() {
        let s = suite("scenario a\ncaught \"KASAN: slab-use-after-free\"\nscenario b\n");
        let ok = "PEERMEM-SCENARIO-BEGIN a\nBUG: KASAN: slab-use-after-free in f\n\
                  REPORT a fail reason=1 splat line(s), first: BUG: KASAN: slab-use-after-free in f\n\
                  PEERMEM-SCENARIO-END a rc=1\nPEERMEM-SCENARIO-BEGIN b\nREPORT b pass\n\
                  PEERMEM-SCENARIO-END b rc=0\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n";
        let v = judge(&s, &facts(ok), false);
        assert_eq!(counts(&v), (5, 0, 0), "{v:?}");
        assert_eq!(v.tests[0].name, "teeth:a");
        assert_eq!(v.tests[0].figures["caught"], "yes");
        // Green against the defect: not caught.
        let green = ok.replace("REPORT a fail reason=1 splat", "REPORT a pass x=1 splat");
        let v = judge(&s, &facts(&green), false);
        assert!(!v.tests[0].passed);
        assert!(v.tests[0].reason.contains("uncaught"));
        // Red for something else: not caught either.
        let other = ok.replace("first: BUG: KASAN", "first: WARNING: x");
        assert!(!judge(&s, &facts(&other), false).tests[0].passed);
        // Skipped: untested, not caught (and not a skip of the run).
        let skip = ok.replace("REPORT a fail reason=1", "REPORT a skip reason=1");
        let v = judge(&s, &facts(&skip), false);
        assert!(!v.tests[0].passed && !v.tests[0].skipped);
        assert!(v.tests[0].reason.contains("untested"), "{:?}", v.tests[0]);
        // The same splat outside the planted scenario is unexpected.
        let outside = ok.replace(
            "PEERMEM-SCENARIO-BEGIN b\n",
            "PEERMEM-SCENARIO-BEGIN b\nBUG: KASAN: slab-use-after-free in g\n",
        );
        let v = judge(&s, &facts(&outside), false);
        assert_eq!(v.counts().failed, 1);
        assert!(!named(&v, "vm:s:splats").passed);
    }

    /// A planted run excuses only its own splats: those whose headline has
    /// the tooth's pattern or whose report names the module with the
    /// defect. Anything else inside its window (a late report of the run
    /// before it, the audit's `echo "BUG: planted" >/dev/kmsg` three
    /// seconds after our lock_inversion run) fails the boot.
    #[test]
    fn a_planted_run_excuses_only_its_own_splats() {
        let s = suite(
            "scenario ours\nscenario rel_field bug=lock_inversion client=ref defects=lock_inversion\n\
             caught \"deadlock: cudaFree in phase dereg\"\n",
        );
        let id = "rel_field[bug=lock_inversion,client=ref,defects=lock_inversion]";
        let log = |inside: &str| {
            format!(
                "PEERMEM-SCENARIO-BEGIN ours\nREPORT ours pass\nPEERMEM-SCENARIO-END ours rc=0\n\
                 PEERMEM-SCENARIO-BEGIN {id}\n{inside}\
                 REPORT {id} fail reason=deadlock: cudaFree in phase dereg\n\
                 PEERMEM-SCENARIO-END {id} rc=1\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n"
            )
        };
        // The planted client's hung tasks: their traces name it.
        let hung = "[   40.1] INFO: task simtest:210 blocked for more than 8 seconds.\n\
                    [   40.1]       Tainted: G           O       6.12.0 #1\n\
                    [   40.1] Call Trace:\n\
                    [   40.1]  <TASK>\n\
                    [   40.1]  __schedule+0x3c1/0xb30\n\
                    [   40.1]  ref_put_pages+0x2f/0x90 [peermem_refclient]\n\
                    [   40.1]  pd_dereg+0x51/0x120 [peerdirect_sim]\n\
                    [   40.1]  </TASK>\n";
        let v = judge(&s, &facts(&log(hung)), false);
        assert_eq!(v.counts().failed, 0, "{v:#?}");
        assert_eq!(named(&v, "vm:s:splats").figures["expected_splats"], "1");
        // The audit's mutation: a splat of no planted module, in the window.
        let v = judge(&s, &facts(&log("[   41.0] BUG: planted\n")), false);
        let t = named(&v, "vm:s:splats");
        assert!(!t.passed, "{v:#?}");
        assert!(t.evidence[0].contains("BUG: planted"), "{t:?}");
        // A late report of our module's, in the window: its trace names
        // ours, not the planted client.
        let ours = hung.replace("[peermem_refclient]", "[nvidia_peermem_rs]");
        assert!(!named(&judge(&s, &facts(&log(&ours)), false), "vm:s:splats").passed);
        // A report ends at its end line: a module named after it is not
        // the report's.
        let after = "[   41.0] WARNING: CPU: 0 PID: 9 at x.c:1 f+0x1/0x2\n\
                     [   41.0] ---[ end trace 0000000000000000 ]---\n\
                     [   41.1]  ref_put_pages+0x2f/0x90 [peermem_refclient]\n";
        assert!(!named(&judge(&s, &facts(&log(after)), false), "vm:s:splats").passed);
        // NVIDIA's run: its module is that release's build.
        assert_eq!(planted_modules("r[client=nv555]"), ["nvidia_peermem_555"]);
        assert_eq!(
            planted_modules("r[client=ref,defects=x]")[0],
            "peermem_refclient"
        );
        assert!(planted_modules("r[client=nvx]").is_empty());
        assert!(planted_modules("r[k=v]").is_empty());
    }

    #[test]
    fn nvidia_reds_must_be_declared_and_a_declared_one_must_show() {
        // issue 33: a run of NVIDIA's module (client=nvNNN) with a caught
        // line must fail for that reason; one without must pass; ours
        // must pass.
        let s = suite(
            "scenario r client=nv555\ncaught \"KASAN: x in nv_dma_map\"\n\
             scenario g client=nv555\nscenario r\n",
        );
        let log = |r_nv: &str, g_nv: &str, ours: &str| {
            format!(
                "REPORT r[client=nv555] {r_nv}\nREPORT g[client=nv555] {g_nv}\n\
                 REPORT r {ours}\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n"
            )
        };
        let red = "fail reason=first: BUG: KASAN: x in nv_dma_map+0x10";
        let v = judge(&s, &facts(&log(red, "pass", "pass")), false);
        assert_eq!(v.counts().failed, 0, "{v:?}");
        // the declared red did not show
        let v = judge(&s, &facts(&log("pass", "pass", "pass")), false);
        let t = named(&v, "teeth:r[client=nv555]");
        assert!(
            !t.passed && t.reason.contains("NVIDIA's declared red did not show"),
            "{t:?}"
        );
        // an undeclared red of NVIDIA's
        let v = judge(&s, &facts(&log(red, "fail reason=hung", "pass")), false);
        assert!(!named(&v, "scenario:g[client=nv555]").passed);
        // ours red
        let v = judge(&s, &facts(&log(red, "pass", "fail reason=boom")), false);
        assert!(!named(&v, "scenario:r").passed);
    }

    #[test]
    fn expected_splat_must_appear_and_hides_nothing_else() {
        let s = suite("scenario sc\nexpect_splat lockdep \"circular locking\"\n");
        let base = "REPORT sc pass\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n";
        assert_eq!(judge(&s, &facts(base), false).counts().failed, 1);
        let with = format!("WARNING: possible circular locking dependency detected\n{base}");
        assert_eq!(counts(&judge(&s, &facts(&with), false)), (4, 0, 0));
        let extra = format!("{with}BUG: KASAN: use-after-free in x\n");
        assert_eq!(judge(&s, &facts(&extra), false).counts().failed, 1);
    }

    #[test]
    fn expected_lockdep_cycle_must_be_the_documented_one() {
        let s = suite(
            "scenario sc\nexpect_splat lockdep \"circular locking\" \
             classes=&mr->mapping_lock,&psim.driver_lock\n",
        );
        let report = |a: &str, b: &str| {
            format!(
                "WARNING: possible circular locking dependency detected\n\
                 -> #1 ({a}){{+.+.}}-{{4:4}}:\n-> #0 ({b}){{+.+.}}-{{4:4}}:\n\
                 other info that might help us debug this:\n\
                 REPORT sc pass\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n"
            )
        };
        let good = report("&psim.driver_lock", "&mr->mapping_lock");
        assert_eq!(counts(&judge(&s, &facts(&good), false)), (4, 0, 0));
        // another cycle: unexpected, and the documented one did not happen
        let other = report("&psim.driver_lock", "&pd.reg_mutex");
        let v = judge(&s, &facts(&other), false);
        assert_eq!(v.counts().failed, 1);
        let t = v.tests.iter().find(|t| !t.passed).unwrap();
        assert!(t.reason.contains("unexpected"), "{t:?}");
        assert!(t.evidence[0].contains("&pd.reg_mutex"), "{t:?}");
        // a report whose chain could not be read is not the documented one
        let bare = "WARNING: possible circular locking dependency detected\n\
                    REPORT sc pass\nPEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE s\n";
        assert_eq!(judge(&s, &facts(bare), false).counts().failed, 1);
    }
}
