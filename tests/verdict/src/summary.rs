//! The closing summary of `make test`: host tests and every VM verdict
//! together, one `N passed, N failed` line.

use crate::verdict::SuiteVerdict;

/// Counts from a `cargo test` log (`test result: ok. 12 passed; 0 failed; ...`).
pub fn cargo_counts(log: &str) -> (usize, usize) {
    let mut passed = 0;
    let mut failed = 0;
    for line in log.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(';') {
            let mut w = part.split_whitespace().rev();
            let (Some(label), Some(n)) = (w.next(), w.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<usize>() else { continue };
            match label {
                "passed" => passed += n,
                "failed" => failed += n,
                _ => {}
            }
        }
    }
    (passed, failed)
}

/// Renders the table of VM tests and returns (passed, failed) over them.
pub fn render(verdicts: &[SuiteVerdict], out: &mut String) -> (usize, usize) {
    let mut passed = 0;
    let mut failed = 0;
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
                if t.passed { "PASS" } else { "FAIL" },
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
            if t.passed {
                passed += 1;
            } else {
                failed += 1;
            }
        }
    }
    (passed, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_cargo_binary() {
        let log = "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured\n\
                   test result: FAILED. 3 passed; 2 failed; 0 ignored\n";
        assert_eq!(cargo_counts(log), (15, 2));
        assert_eq!(cargo_counts("nothing"), (0, 0));
    }
}
