//! NVIDIA's nvidia-peermem against ours (issue 33): every scenario NVIDIA's
//! own module ran (`client=nv535`, `nv550`, `nv555`, suite
//! `nvidia-vs-ours`) beside our module's run of the same scenario, wherever
//! in the run's verdicts that one is.
//!
//! The join key of a run is its scenario name and arguments less those
//! that say who ran it or how long: `client`, `rounds`, `quick` and
//! `rm_lockdep` (see `tests/vm/suites/nvidia-vs-ours.suite`). Our side is the
//! run with no `client` (or `client=rs`) and no planted defect.
//!
//! NVIDIA's side reads, per release: `green` (the scenario passed), `red`
//! (it failed for the reason its suite declares with a `caught` line: the
//! verdict's `teeth:` test passed), or what went wrong with the declaration:
//! `UNDECLARED RED` (it failed, no `caught` line), `DECLARED RED DID NOT
//! SHOW` (a `caught` line, and it passed or failed for another reason).
//! The report passes only if our side passed everywhere it ran and every
//! NVIDIA run matched its declaration; the summary of `make test` counts the
//! same tests, so the report only shows them side by side.

use crate::verdict::{SuiteVerdict, TestResult};
use serde::Serialize;
use std::collections::BTreeMap;

/// Arguments that say who ran a scenario or for how long, not what it tests.
const HARNESS_KEYS: &[&str] = &["client", "rounds", "quick", "rm_lockdep"];

/// One NVIDIA release's result of one scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvidiaRun {
    /// `green`, `red`, `UNDECLARED RED`, `DECLARED RED DID NOT SHOW`.
    pub result: String,
    /// What the run said: its failure reason (a red), or why the
    /// declaration did not hold.
    pub reason: String,
    /// Whether the run matched its suite's declaration.
    pub as_declared: bool,
}

/// One scenario, both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// Scenario name and its arguments less the harness keys.
    pub scenario: String,
    /// Our module: `pass`, `fail` (with the reason), or `not run` (no
    /// suite of this run has our side of it).
    pub ours: String,
    /// Why ours failed (empty otherwise).
    pub ours_reason: String,
    /// The suite our run is in.
    pub ours_suite: String,
    /// NVIDIA's, per release (`nv535`, ...).
    pub nvidia: BTreeMap<String, NvidiaRun>,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every scenario NVIDIA's module ran, in suite order.
    pub rows: Vec<Row>,
    /// The NVIDIA releases seen, in order.
    pub releases: Vec<String>,
    /// Our runs that failed.
    pub ours_failed: usize,
    /// NVIDIA runs that did not match their declaration.
    pub nvidia_undeclared: usize,
    /// NVIDIA's declared reds that showed.
    pub nvidia_red: usize,
    /// NVIDIA's greens.
    pub nvidia_green: usize,
}

/// Splits `name[a=1,b=2]` into the name and its arguments.
fn split_id(id: &str) -> (&str, Vec<&str>) {
    match id.split_once('[') {
        Some((name, rest)) => (
            name,
            rest.trim_end_matches(']')
                .split(',')
                .filter(|a| !a.is_empty())
                .collect(),
        ),
        None => (id, Vec::new()),
    }
}

/// (join key, client, planted defect) of a scenario id.
fn key_of(id: &str) -> (String, String, bool) {
    let (name, args) = split_id(id);
    let mut client = "rs".to_string();
    let mut planted = false;
    let mut kept = Vec::new();
    for a in args {
        let (k, v) = a.split_once('=').unwrap_or((a, ""));
        if k == "client" {
            client = v.to_string();
        }
        if k == "defects" {
            planted = true;
        }
        if !HARNESS_KEYS.contains(&k) {
            kept.push(a);
        }
    }
    let key = if kept.is_empty() {
        name.to_string()
    } else {
        format!("{name} {}", kept.join(" "))
    };
    (key, client, planted)
}

/// A scenario test of a verdict: (id, whether it carried a `caught` line).
fn scenario_of(t: &TestResult) -> Option<(&str, bool)> {
    if let Some(id) = t.name.strip_prefix("scenario:") {
        Some((id, false))
    } else {
        t.name.strip_prefix("teeth:").map(|id| (id, true))
    }
}

fn nvidia_run(t: &TestResult, declared: bool) -> NvidiaRun {
    let planted_reason = || {
        t.evidence
            .iter()
            .find_map(|e| e.strip_prefix("failed as planted: "))
            .unwrap_or("")
            .to_string()
    };
    match (declared, t.passed) {
        (false, true) => NvidiaRun {
            result: "green".into(),
            reason: String::new(),
            as_declared: true,
        },
        (false, false) => NvidiaRun {
            result: "UNDECLARED RED".into(),
            reason: t.reason.clone(),
            as_declared: false,
        },
        (true, true) => NvidiaRun {
            result: "red".into(),
            reason: planted_reason(),
            as_declared: true,
        },
        (true, false) => NvidiaRun {
            result: "DECLARED RED DID NOT SHOW".into(),
            reason: t.reason.clone(),
            as_declared: false,
        },
    }
}

/// Builds the report from the run's verdicts.
pub fn build(verdicts: &[SuiteVerdict]) -> Report {
    // Our side: every run of ours, by key (the first one found; a failing
    // one wins, so a red of ours is never hidden by a green elsewhere).
    let mut ours: BTreeMap<String, (bool, String, String)> = BTreeMap::new();
    for v in verdicts {
        for t in &v.tests {
            let Some((id, declared)) = scenario_of(t) else {
                continue;
            };
            let (key, client, planted) = key_of(id);
            if client != "rs" || planted || declared {
                continue;
            }
            let entry = ours
                .entry(key)
                .or_insert((true, String::new(), v.suite.clone()));
            if !t.passed && entry.0 {
                *entry = (false, t.reason.clone(), v.suite.clone());
            }
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut releases: Vec<String> = Vec::new();
    for v in verdicts {
        for t in &v.tests {
            let Some((id, declared)) = scenario_of(t) else {
                continue;
            };
            let (key, client, _) = key_of(id);
            if !client.starts_with("nv") {
                continue;
            }
            if !releases.contains(&client) {
                releases.push(client.clone());
            }
            let run = nvidia_run(t, declared);
            if let Some(r) = rows.iter_mut().find(|r| r.scenario == key) {
                r.nvidia.insert(client, run);
                continue;
            }
            let (ours_result, ours_reason, ours_suite) = match ours.get(&key) {
                Some((true, _, s)) => ("pass".to_string(), String::new(), s.clone()),
                Some((false, why, s)) => ("fail".to_string(), why.clone(), s.clone()),
                None => ("not run".to_string(), String::new(), String::new()),
            };
            rows.push(Row {
                scenario: key,
                ours: ours_result,
                ours_reason,
                ours_suite,
                nvidia: BTreeMap::from([(client, run)]),
            });
        }
    }
    releases.sort();
    let runs = || rows.iter().flat_map(|r| r.nvidia.values());
    Report {
        ours_failed: rows.iter().filter(|r| r.ours == "fail").count(),
        nvidia_undeclared: runs().filter(|n| !n.as_declared).count(),
        nvidia_red: runs().filter(|n| n.result == "red").count(),
        nvidia_green: runs().filter(|n| n.result == "green").count(),
        rows,
        releases,
    }
}

/// Cuts a reason to its first `n` characters (on a char boundary).
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

/// Renders the report: one line per scenario, ours and each release, then
/// the reason of every red and every mismatch.
pub fn render(r: &Report) -> String {
    let mut out = String::from("== NVIDIA's nvidia-peermem vs ours (issue 33) ==\n");
    let w = r
        .rows
        .iter()
        .map(|row| row.scenario.len())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!("{:<w$}  {:<8}", "scenario", "ours"));
    for rel in &r.releases {
        out.push_str(&format!("  {rel:<10}"));
    }
    out.push('\n');
    for row in &r.rows {
        out.push_str(&format!(
            "{:<w$}  {:<8}",
            row.scenario,
            row.ours.to_uppercase()
        ));
        for rel in &r.releases {
            let cell = row
                .nvidia
                .get(rel)
                .map_or("-", |n| match n.result.as_str() {
                    "green" => "green",
                    "red" => "RED",
                    _ => "MISMATCH",
                });
            out.push_str(&format!("  {cell:<10}"));
        }
        out.push('\n');
    }
    out.push_str("-- why NVIDIA's module is red (declared in the suite), and every mismatch:\n");
    for row in &r.rows {
        for (rel, n) in &row.nvidia {
            if n.result != "green" {
                out.push_str(&format!(
                    "{rel} {}: {}: {}\n",
                    row.scenario,
                    n.result,
                    cut(&n.reason, 240)
                ));
            }
        }
        if row.ours == "fail" {
            out.push_str(&format!(
                "ours {}: FAIL ({}): {}\n",
                row.scenario,
                row.ours_suite,
                cut(&row.ours_reason, 240)
            ));
        }
    }
    out.push_str(&format!(
        "ours: {} failed; NVIDIA: {} green, {} red as declared, {} not as declared\n",
        r.ours_failed, r.nvidia_green, r.nvidia_red, r.nvidia_undeclared
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, passed: bool, reason: &str, evidence: &[&str]) -> TestResult {
        TestResult {
            name: name.into(),
            passed,
            skipped: false,
            cut: false,
            reason: reason.into(),
            figures: BTreeMap::new(),
            evidence: evidence.iter().map(|e| e.to_string()).collect(),
        }
    }

    fn v(suite: &str, tests: Vec<TestResult>) -> SuiteVerdict {
        SuiteVerdict {
            suite: suite.into(),
            tests,
        }
    }

    #[test]
    fn joins_nvidia_runs_with_ours_across_suites() {
        let races = v(
            "rel-races",
            vec![
                t(
                    "scenario:rel_race[window=w,generation=modern,peerdirect_support=0,persistent_api_support=0,rounds=2]",
                    true,
                    "",
                    &[],
                ),
                t("teeth:rel_field[bug=b,client=ref,defects=b]", true, "", &[]),
            ],
        );
        let nv = v(
            "nvidia-vs-ours",
            vec![
                t(
                    "teeth:rel_race[window=w,generation=modern,peerdirect_support=0,persistent_api_support=0,rounds=1,client=nv555]",
                    true,
                    "",
                    &["failed as planted: KASAN: slab-use-after-free in nv_dma_map"],
                ),
                t(
                    "scenario:rel_race[window=w,generation=modern,peerdirect_support=0,persistent_api_support=0,rounds=1,client=nv535]",
                    true,
                    "",
                    &[],
                ),
                t(
                    "scenario:rel_field[bug=b,client=nv555]",
                    false,
                    "it hung",
                    &[],
                ),
                t(
                    "teeth:rel_field[bug=c,client=nv555]",
                    false,
                    "the planted defect went uncaught",
                    &[],
                ),
            ],
        );
        let r = build(&[races, nv]);
        assert_eq!(r.rows.len(), 3);
        let w = &r.rows[0];
        assert_eq!(
            w.scenario,
            "rel_race window=w generation=modern peerdirect_support=0 persistent_api_support=0"
        );
        assert_eq!(
            (w.ours.as_str(), w.ours_suite.as_str()),
            ("pass", "rel-races")
        );
        assert_eq!(w.nvidia["nv555"].result, "red");
        assert!(w.nvidia["nv555"].reason.contains("nv_dma_map"));
        assert_eq!(w.nvidia["nv535"].result, "green");
        // the planted run of the reference client is not ours
        assert_eq!(r.rows[1].ours, "not run");
        assert_eq!(r.rows[1].nvidia["nv555"].result, "UNDECLARED RED");
        assert_eq!(
            r.rows[2].nvidia["nv555"].result,
            "DECLARED RED DID NOT SHOW"
        );
        assert_eq!(
            (r.nvidia_red, r.nvidia_green, r.nvidia_undeclared),
            (1, 1, 2)
        );
        assert_eq!(r.releases, vec!["nv535", "nv555"]);
        let text = render(&r);
        assert!(text.contains("MISMATCH"), "{text}");
        assert!(text.contains("nv555 rel_race window=w"), "{text}");
    }

    #[test]
    fn a_red_of_ours_anywhere_shows() {
        let a = v("a", vec![t("scenario:x[k=1]", true, "", &[])]);
        let b = v(
            "b",
            vec![t("scenario:x[k=1,client=rs,quick=1]", false, "boom", &[])],
        );
        let n = v("n", vec![t("scenario:x[k=1,client=nv555]", true, "", &[])]);
        let r = build(&[a, b, n]);
        assert_eq!(r.rows[0].ours, "fail");
        assert_eq!(r.rows[0].ours_reason, "boom");
        assert_eq!(r.ours_failed, 1);
    }
}
