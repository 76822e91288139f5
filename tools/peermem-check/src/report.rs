// SPDX-License-Identifier: GPL-2.0
//! The result model shared by every command: checks and steps with a
//! verdict, a one-line detail and a one-line fix, printed for humans or as
//! JSON.

use serde::Serialize;
use serde_json::Value;

/// Outcome of one check or step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Not applicable here, or could not be examined (says why).
    Skip,
    Pass,
    Warn,
    Fail,
}

impl Verdict {
    /// Fixed-width tag for human output.
    pub fn tag(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One check (doctor) or step (validate, bench).
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable identifier, e.g. `peer_memory_client`.
    pub id: &'static str,
    /// Human title.
    pub title: String,
    pub verdict: Verdict,
    /// What was found, one line.
    pub detail: String,
    /// What to do about it, one line (absent on pass).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Structured findings for scripts.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

impl Check {
    pub fn new(
        id: &'static str,
        title: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            id,
            title: title.into(),
            verdict,
            detail: detail.into(),
            fix: None,
            data: Value::Null,
        }
    }

    pub fn pass(id: &'static str, title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(id, title, Verdict::Pass, detail)
    }

    pub fn warn(id: &'static str, title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(id, title, Verdict::Warn, detail)
    }

    pub fn fail(id: &'static str, title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(id, title, Verdict::Fail, detail)
    }

    pub fn skip(id: &'static str, title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(id, title, Verdict::Skip, detail)
    }

    /// Adds the one-line fix.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Attaches structured data.
    pub fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }
}

/// Counts of each verdict.
/// A step that failed, as the check that says why: the run goes no
/// further. Boxed, as a check is large beside what a step returns.
pub type Stop = Box<Check>;

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
}

impl Summary {
    pub fn of(checks: &[Check]) -> Self {
        let mut s = Summary::default();
        for c in checks {
            match c.verdict {
                Verdict::Pass => s.pass += 1,
                Verdict::Warn => s.warn += 1,
                Verdict::Fail => s.fail += 1,
                Verdict::Skip => s.skip += 1,
            }
        }
        s
    }

    /// The worst verdict that occurred (skip counts as pass).
    pub fn overall(&self) -> Verdict {
        if self.fail > 0 {
            Verdict::Fail
        } else if self.warn > 0 {
            Verdict::Warn
        } else {
            Verdict::Pass
        }
    }
}

/// Checks for humans: `[PASS] title: detail` and `       fix: ...` lines.
pub fn human(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "[{}] {}: {}\n",
            c.verdict.tag(),
            c.title,
            c.detail
        ));
        if let Some(f) = &c.fix {
            if c.verdict != Verdict::Pass {
                out.push_str(&format!("       fix: {f}\n"));
            }
        }
    }
    out
}

/// Prints checks for humans (see [`human`]).
pub fn print_human(checks: &[Check]) {
    print!("{}", human(checks));
}

/// Prints a JSON value, pretty.
pub fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("peermem-check: cannot encode JSON: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_overall() {
        let checks = vec![
            Check::pass("a", "A", "ok"),
            Check::warn("b", "B", "meh").fix("do x"),
            Check::skip("c", "C", "n/a"),
        ];
        let s = Summary::of(&checks);
        assert_eq!(
            s,
            Summary {
                pass: 1,
                warn: 1,
                fail: 0,
                skip: 1
            }
        );
        assert_eq!(s.overall(), Verdict::Warn);
        let mut f = checks.clone();
        f.push(Check::fail("d", "D", "bad"));
        assert_eq!(Summary::of(&f).overall(), Verdict::Fail);
        assert_eq!(Summary::of(&[]).overall(), Verdict::Pass);
    }

    #[test]
    fn json_shape() {
        let c = Check::warn("x", "X", "detail")
            .fix("fix it")
            .data(serde_json::json!({"k": 1}));
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["id"], "x");
        assert_eq!(v["verdict"], "warn");
        assert_eq!(v["fix"], "fix it");
        assert_eq!(v["data"]["k"], 1);
        let p = serde_json::to_value(Check::pass("y", "Y", "d")).unwrap();
        assert!(p.get("fix").is_none() && p.get("data").is_none());
    }
}
