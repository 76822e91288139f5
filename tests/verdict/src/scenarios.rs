//! The scenarios' KTAP document (guest-init.sh's): each scenario's result
//! line and, before it, one `# report: WORD [key=value ...] [reason=TEXT]`
//! diagnostic per `pass`, `fail` or `skip` the scenario called (lib.sh).

use crate::ktap::{Document, Outcome};
use std::collections::BTreeMap;

/// The prefix of every line of the scenarios' document on the console:
/// what tells it apart from the kernel's own KTAP there.
pub const PREFIX: &str = "PEERMEM-KTAP ";

/// The diagnostic that carries one report of a scenario.
const REPORT: &str = "report: ";

/// What a scenario reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioReport {
    /// `pass`, `skip`, or anything else (a failure); of several reports,
    /// the worst.
    pub outcome: Outcome,
    /// The `key=value` figures of its last report, and its `reason`.
    pub figures: BTreeMap<String, String>,
    /// How many reports it made (more than one is a failure).
    pub count: usize,
}

/// One report's outcome and figures (`reason=` takes the rest of the
/// line, spaces included).
fn report(body: &str) -> (Outcome, BTreeMap<String, String>) {
    let (body, reason) = match body.find(" reason=") {
        Some(r) => (&body[..r], Some(body[r + " reason=".len()..].trim())),
        None => (body, None),
    };
    let mut words = body.split_whitespace();
    let outcome = match words.next() {
        Some("pass") => Outcome::Pass,
        Some("skip") => Outcome::Skip,
        _ => Outcome::Fail,
    };
    let mut figures: BTreeMap<String, String> = words
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(reason) = reason {
        figures.insert("reason".into(), reason.to_string());
    }
    (outcome, figures)
}

/// The result line guest-init writes for these reports: `ok` for one
/// pass, `ok # SKIP` for one skip, `not ok` otherwise.
fn due_outcome(reports: &[(Outcome, BTreeMap<String, String>)]) -> Outcome {
    match reports {
        [(Outcome::Pass, _)] => Outcome::Pass,
        [(Outcome::Skip, _)] => Outcome::Skip,
        _ => Outcome::Fail,
    }
}

/// The scenarios of a document, by id, and what is wrong with it: a
/// malformed document, a result line its reports contradict, a scenario
/// that started (`started`: its id and log line) and has no result line.
/// A scenario whose result line carries no report is left out: it made
/// none (killed by its timeout, or the guest died).
pub fn read(
    doc: Option<&Document>,
    started: &[(String, usize)],
) -> (BTreeMap<String, ScenarioReport>, Vec<String>) {
    let mut scenarios: BTreeMap<String, ScenarioReport> = BTreeMap::new();
    let Some(doc) = doc else {
        let problems = started
            .first()
            .map(|(id, line)| {
                format!(
                    "scenario {id} started (log line {line}), and no scenario printed a \
                     KTAP line ({PREFIX}...)"
                )
            })
            .into_iter()
            .collect();
        return (scenarios, problems);
    };
    let mut problems = doc.problems();
    for t in &doc.tests {
        let reports: Vec<_> = t
            .diagnostics
            .iter()
            .filter_map(|d| d.strip_prefix(REPORT))
            .map(report)
            .collect();
        if !reports.is_empty() && t.outcome != due_outcome(&reports) {
            problems.push(format!(
                "scenario {}: its KTAP line says {:?}, its reports {:?}",
                t.name,
                t.outcome,
                reports.iter().map(|(o, _)| *o).collect::<Vec<_>>()
            ));
        }
        for (outcome, figures) in reports {
            let entry = scenarios.entry(t.name.clone()).or_insert(ScenarioReport {
                outcome,
                figures: BTreeMap::new(),
                count: 0,
            });
            entry.count += 1;
            if outcome == Outcome::Fail || entry.outcome == Outcome::Pass {
                entry.outcome = outcome;
            }
            entry.figures = figures;
        }
    }
    for (id, line) in started {
        if !doc.tests.iter().any(|t| t.name == *id) {
            problems.push(format!(
                "scenario {id} started (log line {line}) and has no KTAP result line"
            ));
        }
    }
    (scenarios, problems)
}

/// Test logs written the short way: each `REPORT ID WORD ...` line is a
/// report of scenario ID, turned into the document guest-init prints (a
/// run of reports of one ID is one result line; the header goes first).
#[cfg(test)]
pub fn console(text: &str) -> String {
    let mut body = String::new();
    let mut n = 0;
    let mut pending: Option<(String, Vec<String>)> = None;
    let flush = |body: &mut String, n: &mut usize, p: Option<(String, Vec<String>)>| {
        let Some((id, reports)) = p else { return };
        *n += 1;
        let parsed: Vec<_> = reports.iter().map(|r| report(r)).collect();
        for r in &reports {
            body.push_str(&format!("{PREFIX}# {REPORT}{r}\n"));
        }
        let line = match due_outcome(&parsed) {
            Outcome::Pass => format!("ok {n} {id}"),
            Outcome::Skip => format!("ok {n} {id} # SKIP"),
            Outcome::Fail => format!("not ok {n} {id}"),
        };
        body.push_str(&format!("{PREFIX}{line}\n"));
    };
    for line in text.lines() {
        if let Some((id, rest)) = line.strip_prefix("REPORT ").and_then(|r| r.split_once(' ')) {
            match &mut pending {
                Some((p, reports)) if p == id => reports.push(rest.to_string()),
                _ => {
                    flush(&mut body, &mut n, pending.take());
                    pending = Some((id.to_string(), vec![rest.to_string()]));
                }
            }
            continue;
        }
        flush(&mut body, &mut n, pending.take());
        body.push_str(line);
        body.push('\n');
    }
    flush(&mut body, &mut n, pending.take());
    format!("{PREFIX}KTAP version 1\n{PREFIX}1..{n}\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ktap;

    fn read_text(text: &str, started: &[&str]) -> (BTreeMap<String, ScenarioReport>, Vec<String>) {
        let doc = ktap::parse(text.lines());
        let started: Vec<_> = started.iter().map(|s| (s.to_string(), 7)).collect();
        read(Some(&doc), &started)
    }

    #[test]
    fn reports_with_figures_and_reasons() {
        let (s, problems) = read_text(
            "KTAP version 1\n1..5\n# report: pass ops=10 leaks=0\nok 1 a[x=1]\n\
             # report: fail x=1 reason=it went boom\nnot ok 2 b # TODO must fail\n\
             # report: pass\n# report: pass\nnot ok 3 c\n\
             # report: skip reason=no simtest\nok 4 d # SKIP\n\
             # report: pass\n# report: skip\n# report: fail\nnot ok 5 e\n",
            &["a[x=1]", "b"],
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(s["a[x=1]"].outcome, Outcome::Pass);
        assert_eq!(s["a[x=1]"].figures["ops"], "10");
        assert_eq!(s["b"].outcome, Outcome::Fail);
        assert_eq!(s["b"].figures["reason"], "it went boom");
        assert_eq!(s["b"].figures["x"], "1");
        assert_eq!(s["c"].count, 2);
        assert_eq!(s["d"].outcome, Outcome::Skip);
        assert_eq!(s["d"].figures["reason"], "no simtest");
        assert_eq!(s["e"].outcome, Outcome::Fail);
        assert_eq!(s["e"].count, 3);
    }

    #[test]
    fn a_result_line_without_reports_is_no_result() {
        let (s, problems) = read_text("KTAP version 1\n1..1\nnot ok 1 a\n", &["a"]);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(s.is_empty());
    }

    #[test]
    fn a_started_scenario_without_a_result_line_is_a_problem() {
        let (_, problems) = read_text(
            "KTAP version 1\n1..2\n# report: pass\nok 1 a\n",
            &["a", "b"],
        );
        assert_eq!(
            problems,
            [
                "the KTAP plan announced 2 tests, 1 result lines came",
                "scenario b started (log line 7) and has no KTAP result line"
            ]
        );
        let (_, problems) = read(None, &[("a".to_string(), 3)]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("scenario a started (log line 3)"));
    }

    #[test]
    fn a_result_line_its_reports_contradict_is_a_problem() {
        let (_, problems) = read_text("KTAP version 1\n1..1\n# report: fail\nok 1 a\n", &[]);
        assert_eq!(
            problems,
            ["scenario a: its KTAP line says Pass, its reports [Fail]"]
        );
    }
}
