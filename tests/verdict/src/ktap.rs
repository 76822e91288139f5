//! A KTAP 1 reader (Documentation/dev-tools/ktap.rst): the one parser of
//! both documents a boot prints, KUnit's (the debugfs `results` file of
//! each suite) and the scenarios' (guest-init.sh's).
//!
//! A document is its version line, an optional plan (`1..N`), and its
//! result lines (`ok N name`, `not ok N name # DIRECTIVE data`); a subtest
//! is a whole document one indentation level deeper, ended by its result
//! line in the parent. Diagnostic lines (`# text`) directly before a result
//! line at its level belong to that test. Anything else is an unknown line,
//! which KTAP allows anywhere (kernel messages share the console) and which
//! never changes a result.

use std::collections::BTreeSet;

/// How a test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and passed.
    Pass,
    /// It ran and failed.
    Fail,
    /// It did not run (or not all of it): never a pass.
    Skip,
}

/// One result line, with what came before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestLine {
    /// Its number in the document.
    pub number: usize,
    /// Its description: the test's name.
    pub name: String,
    /// `not ok` is a failure, `ok ... # SKIP` a skip, any other `ok` a
    /// pass (a `# TODO` does not turn a failure into a pass).
    pub outcome: Outcome,
    /// The directive and its data, after the ` # ` (`SKIP`, `TODO reason`).
    pub directive: Option<String>,
    /// The diagnostic lines directly before it at its level, without the
    /// `# `.
    pub diagnostics: Vec<String>,
    /// Its subtests' document, when it has one.
    pub subtest: Option<Document>,
    /// 1-based number of the line among those read.
    pub line_no: usize,
}

/// One KTAP document (or subtest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// Its version line was seen.
    pub versioned: bool,
    /// The name a `# Subtest: NAME` line gave it.
    pub name: Option<String>,
    /// The number of tests its plan announced.
    pub plan: Option<usize>,
    /// Its result lines, in order.
    pub tests: Vec<TestLine>,
    /// A subtest whose result line never came (the output was cut off).
    pub unfinished: Option<Box<Document>>,
    /// Lines that break KTAP's rules: numbers repeated or out of order, a
    /// second plan, text after the document's end.
    pub errors: Vec<String>,
}

impl Document {
    /// The problems that make the document unusable as a complete record:
    /// its own errors, no plan, or a plan its result lines do not match.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.versioned {
            out.push("no KTAP version line".to_string());
        }
        match self.plan {
            None => out.push("no KTAP plan (1..N)".to_string()),
            Some(n) if n != self.tests.len() => out.push(format!(
                "the KTAP plan announced {n} tests, {} result lines came",
                self.tests.len()
            )),
            Some(_) => {}
        }
        out.extend(self.errors.iter().cloned());
        out
    }
}

/// What one line is, indentation aside.
enum Line<'a> {
    Version,
    Plan(usize),
    Subtest(&'a str),
    Result(usize, Outcome, String, Option<String>),
    Diagnostic(&'a str),
    Unknown,
}

fn classify(text: &str) -> Line<'_> {
    if text.starts_with("KTAP version ") || text.starts_with("TAP version ") {
        return Line::Version;
    }
    if let Some(n) = text.strip_prefix("1..").and_then(|n| n.trim().parse().ok()) {
        return Line::Plan(n);
    }
    if let Some(name) = text.strip_prefix("# Subtest: ") {
        return Line::Subtest(name.trim());
    }
    if let Some((number, outcome, name, directive)) = result_line(text) {
        return Line::Result(number, outcome, name, directive);
    }
    if let Some(d) = text.strip_prefix('#') {
        return Line::Diagnostic(d.strip_prefix(' ').unwrap_or(d));
    }
    Line::Unknown
}

/// `<ok|not ok> <number> [- ][<description>][ # <directive> [<data>]]`.
fn result_line(text: &str) -> Option<(usize, Outcome, String, Option<String>)> {
    let (ok, rest) = if let Some(r) = text.strip_prefix("not ok ") {
        (false, r)
    } else if let Some(r) = text.strip_prefix("ok ") {
        (true, r)
    } else {
        return None;
    };
    let (number, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let number = number.parse().ok()?;
    let (name, directive) = match rest.split_once('#') {
        Some((n, d)) => (n, Some(d.trim().to_string())),
        None => (rest, None),
    };
    let name = name.trim();
    let name = name.strip_prefix("- ").unwrap_or(name).trim().to_string();
    let skip = directive
        .as_deref()
        .is_some_and(|d| d.split_whitespace().next() == Some("SKIP"));
    let outcome = match (ok, skip) {
        (false, _) => Outcome::Fail,
        (true, true) => Outcome::Skip,
        (true, false) => Outcome::Pass,
    };
    Some((number, outcome, name, directive))
}

/// A line to read: its number and its text, log prefixes removed.
struct Input<'a> {
    line_no: usize,
    indent: usize,
    text: &'a str,
}

/// Reads one document whose lines are indented by `indent`, from `*at`
/// on, up to the first result line less indented (its parent's) or the
/// end. Deeper version, plan, header and result lines start a subtest.
fn read_document(lines: &[Input], at: &mut usize, indent: usize) -> Document {
    let mut doc = Document::default();
    let mut diagnostics = Vec::new();
    let mut subtest: Option<Document> = None;
    let mut seen = BTreeSet::new();
    while let Some(line) = lines.get(*at) {
        let kind = classify(line.text);
        if line.indent > indent {
            if matches!(
                kind,
                Line::Version | Line::Plan(_) | Line::Subtest(_) | Line::Result(..)
            ) {
                if let Some(lost) = subtest.take() {
                    doc.errors.push(format!(
                        "line {}: a subtest{} ended without its result line",
                        line.line_no,
                        lost.name.map(|n| format!(" ({n})")).unwrap_or_default()
                    ));
                }
                subtest = Some(read_document(lines, at, line.indent));
            } else {
                *at += 1;
            }
            continue;
        }
        if line.indent < indent {
            match kind {
                Line::Result(..) | Line::Version => break,
                _ => {
                    *at += 1;
                    continue;
                }
            }
        }
        match kind {
            Line::Version if !doc.versioned && doc.plan.is_none() && doc.tests.is_empty() => {
                doc.versioned = true;
            }
            // Another document at this level: this one ended.
            Line::Version => break,
            Line::Plan(n) => {
                if doc.plan.is_some() {
                    doc.errors
                        .push(format!("line {}: a second plan (1..{n})", line.line_no));
                } else {
                    doc.plan = Some(n);
                }
            }
            Line::Subtest(name) => doc.name = Some(name.to_string()),
            Line::Diagnostic(d) => diagnostics.push(d.to_string()),
            Line::Unknown => {}
            Line::Result(number, outcome, name, directive) => {
                let expected = doc.tests.last().map_or(1, |t| t.number + 1);
                if !seen.insert(number) {
                    doc.errors.push(format!(
                        "line {}: test number {number} twice ({name})",
                        line.line_no
                    ));
                } else if number != expected {
                    doc.errors.push(format!(
                        "line {}: test number {number} where {expected} was due ({name})",
                        line.line_no
                    ));
                }
                doc.tests.push(TestLine {
                    number,
                    name,
                    outcome,
                    directive,
                    diagnostics: std::mem::take(&mut diagnostics),
                    subtest: subtest.take(),
                    line_no: line.line_no,
                });
            }
        }
        *at += 1;
    }
    doc.unfinished = subtest.map(Box::new);
    doc
}

/// Reads one KTAP document from its lines (log prefixes such as printk
/// timestamps already removed); the indentation of its first version line
/// is its top level.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Document {
    let lines: Vec<Input> = lines
        .into_iter()
        .enumerate()
        .map(|(i, raw)| {
            let text = raw.trim_end();
            let body = text.trim_start();
            Input {
                line_no: i + 1,
                indent: text.len() - body.len(),
                text: body,
            }
        })
        .collect();
    let top = lines
        .iter()
        .find(|l| matches!(classify(l.text), Line::Version))
        .map_or(0, |l| l.indent);
    let mut at = 0;
    let mut doc = read_document(&lines, &mut at, top);
    if let Some(rest) = lines[at..]
        .iter()
        .find(|l| !matches!(classify(l.text), Line::Unknown))
    {
        doc.errors.push(format!(
            "line {}: KTAP after the document's end: {}",
            rest.line_no, rest.text
        ));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        parse(text.lines())
    }

    #[test]
    fn reads_result_lines() {
        let d = doc(
            "KTAP version 1\n1..4\nok 1 a\nnot ok 2 - b\nok 3 c # SKIP no x\n\
                     not ok 4 d[k=v,z=1] # TODO must fail\n",
        );
        assert!(d.problems().is_empty(), "{:?}", d.problems());
        let got: Vec<_> = d
            .tests
            .iter()
            .map(|t| (t.number, t.name.as_str(), t.outcome, t.directive.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (1, "a", Outcome::Pass, None),
                (2, "b", Outcome::Fail, None),
                (3, "c", Outcome::Skip, Some("SKIP no x")),
                (4, "d[k=v,z=1]", Outcome::Fail, Some("TODO must fail")),
            ]
        );
    }

    #[test]
    fn diagnostics_belong_to_the_next_result_at_their_level() {
        let d = doc(
            "KTAP version 1\n1..2\n# report: pass ops=3\nnoise\nok 1 a\n\
                     # one\n# two\nnot ok 2 b\n# after the last\n",
        );
        assert_eq!(d.tests[0].diagnostics, ["report: pass ops=3"]);
        assert_eq!(d.tests[1].diagnostics, ["one", "two"]);
    }

    /// The layout of KUnit's debugfs `results` file (6.12, 7.2): the
    /// suite a subtest one level in, a parameterised case's parameters
    /// two levels in, and unknown lines (an expectation's message) at any
    /// indentation.
    #[test]
    fn reads_kunit_s_nested_subtests() {
        let d = doc(
            "KTAP version 1\n1..1\n    KTAP version 1\n    # Subtest: s\n\
                     \x20   # module: s_kunit\n    1..3\n    ok 1 first\n\
                     \x20       KTAP version 1\n        # Subtest: param\n        ok 1 p-0\n\
                     \x20       not ok 2 p-1\n    not ok 2 param\n\
                     \x20       2 + 2 == 4 (0x4)\nthis case fails on purpose\n    ok 3 third\n\
                     # s: pass:2 fail:1 skip:0 total:3\nnot ok 1 s\n",
        );
        assert!(d.problems().is_empty(), "{:?}", d.problems());
        assert_eq!(d.tests.len(), 1);
        let s = d.tests[0].subtest.as_ref().unwrap();
        assert_eq!(s.name.as_deref(), Some("s"));
        assert_eq!(s.plan, Some(3));
        let cases: Vec<_> = s
            .tests
            .iter()
            .map(|t| (t.name.as_str(), t.outcome))
            .collect();
        assert_eq!(
            cases,
            [
                ("first", Outcome::Pass),
                ("param", Outcome::Fail),
                ("third", Outcome::Pass)
            ]
        );
        let param = s.tests[1].subtest.as_ref().unwrap();
        assert_eq!(param.tests.len(), 2);
        assert!(s.problems().is_empty());
    }

    #[test]
    fn a_cut_off_subtest_is_kept_unfinished() {
        let d = doc(
            "KTAP version 1\n1..1\n    KTAP version 1\n    # Subtest: s\n    1..3\n\
                     \x20   ok 1 a\n    ok 2 b\n",
        );
        assert!(d.tests.is_empty());
        let s = d.unfinished.as_ref().unwrap();
        assert_eq!(s.tests.len(), 2);
        assert_eq!(
            s.problems(),
            ["the KTAP plan announced 3 tests, 2 result lines came"]
        );
    }

    #[test]
    fn no_plan_is_a_problem() {
        let d = doc("KTAP version 1\nok 1 a\n");
        assert_eq!(d.problems(), ["no KTAP plan (1..N)"]);
        assert_eq!(doc("1..1\nok 1 a\n").problems(), ["no KTAP version line"]);
    }

    #[test]
    fn a_count_that_does_not_match_the_plan_is_a_problem() {
        let d = doc("KTAP version 1\n1..3\nok 1 a\nok 2 b\n");
        assert_eq!(
            d.problems(),
            ["the KTAP plan announced 3 tests, 2 result lines came"]
        );
        let d = doc("KTAP version 1\n1..1\nok 1 a\nok 2 b\n");
        assert_eq!(
            d.problems(),
            ["the KTAP plan announced 1 tests, 2 result lines came"]
        );
    }

    #[test]
    fn repeated_and_skipped_numbers_are_problems() {
        let d = doc("KTAP version 1\n1..3\nok 1 a\nok 1 b\nok 2 c\n");
        assert_eq!(d.problems(), ["line 4: test number 1 twice (b)"]);
        let d = doc("KTAP version 1\n1..2\nok 1 a\nok 3 b\n");
        assert_eq!(d.problems(), ["line 4: test number 3 where 2 was due (b)"]);
    }

    #[test]
    fn a_second_plan_or_document_is_a_problem() {
        let d = doc("KTAP version 1\n1..1\n1..2\nok 1 a\n");
        assert_eq!(d.problems(), ["line 3: a second plan (1..2)"]);
        let d = doc("KTAP version 1\n1..1\nok 1 a\nKTAP version 1\n1..1\nok 1 b\n");
        assert_eq!(
            d.problems(),
            ["line 4: KTAP after the document's end: KTAP version 1"]
        );
    }
}
