//! The verdict: a suite's expectations held against what its log shows.

use crate::log::{LogFacts, Splat};
use crate::suite::Suite;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One counted test of a VM run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestResult {
    /// `kunit:<suite>`, `scenario:<id>`, `vm:<suite>:completed` or
    /// `vm:<suite>:splats`.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed (empty when it passed).
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

impl SuiteVerdict {
    /// Number of passed and failed tests.
    pub fn counts(&self) -> (usize, usize) {
        let passed = self.tests.iter().filter(|t| t.passed).count();
        (passed, self.tests.len() - passed)
    }
}

fn result(name: String, failure: Option<String>) -> TestResult {
    TestResult {
        name,
        passed: failure.is_none(),
        reason: failure.unwrap_or_default(),
        figures: BTreeMap::new(),
        evidence: Vec::new(),
    }
}

fn splat_evidence(s: &Splat) -> String {
    if s.classes.is_empty() {
        format!("log line {}: [{}] {}", s.line_no, s.kind, s.text)
    } else {
        format!(
            "log line {}: [{}] {} (lock classes: {})",
            s.line_no,
            s.kind,
            s.text,
            s.classes.join(", ")
        )
    }
}

/// Turns the result of a scenario run against a planted defect into its
/// `teeth:` test: it passes when the scenario reported one result, `fail`,
/// for the reason `pattern` names.
fn judge_teeth(mut t: TestResult, results: Option<usize>, pattern: &str) -> TestResult {
    let id = t.name.trim_start_matches("scenario:").to_string();
    let failure = match results {
        None | Some(0) => Some("no result line".to_string()),
        Some(n) if n != 1 => Some(format!("{n} result lines instead of one")),
        _ if t.passed => Some(format!(
            "the planted defect went uncaught: the scenario passed (wanted a failure with '{pattern}')"
        )),
        _ if !t.reason.contains(pattern) => Some(format!(
            "red for another reason than the planted defect (wanted '{pattern}'): {}",
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
    t.reason = failure.unwrap_or_default();
    t.figures
        .insert("caught".into(), if caught { "yes" } else { "no" }.into());
    t
}

/// Judges one boot. `timed_out` is the host's word that it had to kill QEMU.
pub fn judge(suite: &Suite, facts: &LogFacts, timed_out: bool) -> SuiteVerdict {
    let mut tests = Vec::new();

    for (_, name) in &suite.kunit {
        let failure = match facts.kunit.get(name) {
            None => Some("no KTAP output for this suite".to_string()),
            Some(r) if r.missing => Some("the guest found no results for this suite".into()),
            Some(r) if !r.failed.is_empty() => Some(format!("failed: {}", r.failed.join(", "))),
            Some(r) if r.passed.is_empty() => Some("no test case passed".into()),
            Some(_) => None,
        };
        tests.push(result(format!("kunit:{name}"), failure));
    }

    for id in &suite.scenarios {
        let mut t = match facts.scenarios.get(id) {
            None => result(format!("scenario:{id}"), Some("no result line".into())),
            Some(r) => {
                let failure = if r.count != 1 {
                    Some(format!("{} result lines instead of one", r.count))
                } else if !r.passed {
                    Some(
                        r.figures
                            .get("reason")
                            .cloned()
                            .unwrap_or_else(|| "reported fail".into()),
                    )
                } else {
                    None
                };
                let mut t = result(format!("scenario:{id}"), failure);
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

    let unknown: Vec<&String> = facts
        .scenarios
        .keys()
        .filter(|id| !suite.scenarios.contains(id))
        .collect();

    let completed = if timed_out {
        Some("the VM did not finish before the timeout and was killed".to_string())
    } else if !facts.done.contains(&suite.name) {
        Some("the VM never printed PEERMEM-SUITE-DONE (crash, hang or early exit)".into())
    } else if !unknown.is_empty() {
        Some(format!(
            "result lines for scenarios the suite does not list: {}",
            unknown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        None
    };
    tests.push(result(format!("vm:{}:completed", suite.name), completed));

    let mut unexpected = Vec::new();
    let mut seen = vec![false; suite.expected_splats.len()];
    for s in &facts.splats {
        // A planted defect's splats are its scenario's evidence.
        if s.scenario
            .as_deref()
            .is_some_and(|id| suite.teeth_of(id).is_some())
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

    SuiteVerdict {
        suite: suite.name.clone(),
        tests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::analyse;

    fn suite(text: &str) -> Suite {
        Suite::parse("s", text).unwrap()
    }

    const GOOD: &str = "PEERMEM-KUNIT-BEGIN k\n    ok 1 a\nok 1 k\nPEERMEM-KUNIT-END k\n\
                        SCENARIO-RESULT sc pass ops=3\nPEERMEM-SUITE-DONE s\n";

    #[test]
    fn green_run_is_green() {
        let v = judge(&suite("kunit k.ko k\nscenario sc\n"), &analyse(GOOD), false);
        assert_eq!(v.counts(), (4, 0), "{v:#?}");
        assert_eq!(v.tests[1].figures["ops"], "3");
    }

    #[test]
    fn each_planted_failure_is_red() {
        let s = suite("kunit k.ko k\nscenario sc\n");
        // failing KUnit case
        let log = GOOD.replace("    ok 1 a", "    not ok 1 a");
        assert_eq!(judge(&s, &analyse(&log), false).counts().1, 1);
        // a WARN anywhere
        let log = format!("[ 1.0] WARNING: CPU: 0 PID: 1 at x.c:9 f\n{GOOD}");
        let v = judge(&s, &analyse(&log), false);
        assert_eq!(v.counts().1, 1);
        assert!(v.tests[3].evidence[0].contains("x.c:9"));
        // a timeout
        assert_eq!(judge(&s, &analyse(GOOD), true).counts().1, 1);
        // no done marker
        let log = GOOD.replace("PEERMEM-SUITE-DONE s", "");
        assert_eq!(judge(&s, &analyse(&log), false).counts().1, 1);
        // missing scenario and missing suite
        let v = judge(&s, &analyse("PEERMEM-SUITE-DONE s\n"), false);
        assert_eq!(v.counts(), (2, 2));
        // scenario failure, and a duplicate result line
        let log = GOOD.replace("sc pass", "sc fail");
        assert_eq!(judge(&s, &analyse(&log), false).counts().1, 1);
        let log = format!("{GOOD}SCENARIO-RESULT sc pass\n");
        assert_eq!(judge(&s, &analyse(&log), false).counts().1, 1);
        // a scenario the suite does not list
        let log = format!("{GOOD}SCENARIO-RESULT other pass\n");
        assert_eq!(judge(&s, &analyse(&log), false).counts().1, 1);
    }

    #[test]
    fn teeth_must_fail_for_the_planted_reason() {
        let s = suite("scenario a\ncaught \"KASAN: slab-use-after-free\"\nscenario b\n");
        let ok = "PEERMEM-SCENARIO-BEGIN a\nBUG: KASAN: slab-use-after-free in f\n\
                  SCENARIO-RESULT a fail reason=1 splat line(s), first: BUG: KASAN: slab-use-after-free in f\n\
                  PEERMEM-SCENARIO-END a rc=1\nPEERMEM-SCENARIO-BEGIN b\nSCENARIO-RESULT b pass\n\
                  PEERMEM-SCENARIO-END b rc=0\nPEERMEM-SUITE-DONE s\n";
        let v = judge(&s, &analyse(ok), false);
        assert_eq!(v.counts(), (4, 0), "{v:?}");
        assert_eq!(v.tests[0].name, "teeth:a");
        assert_eq!(v.tests[0].figures["caught"], "yes");
        // Green against the defect: not caught.
        let green = ok.replace(
            "SCENARIO-RESULT a fail reason=1 splat",
            "SCENARIO-RESULT a pass x=1 splat",
        );
        let v = judge(&s, &analyse(&green), false);
        assert!(!v.tests[0].passed);
        assert!(v.tests[0].reason.contains("uncaught"));
        // Red for something else: not caught either.
        let other = ok.replace("first: BUG: KASAN", "first: WARNING: x");
        assert!(!judge(&s, &analyse(&other), false).tests[0].passed);
        // The same splat outside the planted scenario is unexpected.
        let outside = ok.replace(
            "PEERMEM-SCENARIO-BEGIN b\n",
            "PEERMEM-SCENARIO-BEGIN b\nBUG: KASAN: slab-use-after-free in g\n",
        );
        let v = judge(&s, &analyse(&outside), false);
        assert_eq!(v.counts().1, 1);
        assert!(!v.tests.last().unwrap().passed);
    }

    #[test]
    fn expected_splat_must_appear_and_hides_nothing_else() {
        let s = suite("scenario sc\nexpect_splat lockdep \"circular locking\"\n");
        let base = "SCENARIO-RESULT sc pass\nPEERMEM-SUITE-DONE s\n";
        assert_eq!(judge(&s, &analyse(base), false).counts().1, 1);
        let with = format!("WARNING: possible circular locking dependency detected\n{base}");
        assert_eq!(judge(&s, &analyse(&with), false).counts(), (3, 0));
        let extra = format!("{with}BUG: KASAN: use-after-free in x\n");
        assert_eq!(judge(&s, &analyse(&extra), false).counts().1, 1);
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
                 SCENARIO-RESULT sc pass\nPEERMEM-SUITE-DONE s\n"
            )
        };
        let good = report("&psim.driver_lock", "&mr->mapping_lock");
        assert_eq!(judge(&s, &analyse(&good), false).counts(), (3, 0));
        // another cycle: unexpected, and the documented one did not happen
        let other = report("&psim.driver_lock", "&pd.reg_mutex");
        let v = judge(&s, &analyse(&other), false);
        assert_eq!(v.counts().1, 1);
        let t = v.tests.last().unwrap();
        assert!(t.reason.contains("unexpected"), "{t:?}");
        assert!(t.evidence[0].contains("&pd.reg_mutex"), "{t:?}");
        // a report whose chain could not be read is not the documented one
        let bare = "WARNING: possible circular locking dependency detected\n\
                    SCENARIO-RESULT sc pass\nPEERMEM-SUITE-DONE s\n";
        assert_eq!(judge(&s, &analyse(bare), false).counts().1, 1);
    }
}
