//! Reading a VM's serial console log: markers, KTAP, scenario results and
//! kernel splats.

use std::collections::BTreeMap;

/// Headlines of kernel splats. Any line containing one of these fails a run
/// unless its suite declared it with `expect_splat`.
pub const SPLAT_SIGNATURES: &[(&str, &str)] = &[
    ("BUG:", "bug"),
    ("kernel BUG at", "bug"),
    ("Oops:", "oops"),
    ("general protection fault", "oops"),
    ("WARNING:", "warning"),
    ("KASAN:", "kasan"),
    ("UBSAN:", "ubsan"),
    ("possible circular locking dependency", "lockdep"),
    ("possible recursive locking", "lockdep"),
    ("inconsistent lock state", "lockdep"),
    ("lock held when returning to user space", "lockdep"),
    ("suspicious RCU usage", "lockdep"),
    ("unreferenced object 0x", "kmemleak"),
    ("blocked for more than", "hung_task"),
    ("soft lockup", "soft_lockup"),
    ("hard LOCKUP", "hard_lockup"),
    ("rcu_preempt detected stalls", "rcu_stall"),
    ("rcu_sched detected stalls", "rcu_stall"),
    ("self-detected stall on CPU", "rcu_stall"),
    ("Kernel panic", "panic"),
    ("list_add corruption", "list_debug"),
    ("list_del corruption", "list_debug"),
];

/// Lines printed by the test bed itself; never counted as splats, whatever
/// they quote.
const HARNESS_PREFIXES: &[&str] = &["SCENARIO-RESULT ", "PEERMEM-", "SCENARIO-LOG "];

/// One kernel splat line found in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splat {
    /// 1-based line number in the log.
    pub line_no: usize,
    /// Category from [`SPLAT_SIGNATURES`].
    pub kind: &'static str,
    /// The line, timestamps removed.
    pub text: String,
    /// The scenario that was running (between its `PEERMEM-SCENARIO-BEGIN`
    /// and `-END` lines), if any.
    pub scenario: Option<String>,
    /// A lockdep cycle's lock classes, from the `-> #N (CLASS){...}` lines
    /// of its dependency chain; empty for any other splat.
    pub classes: Vec<String>,
}

/// The lock class of a lockdep dependency-chain line (`-> #1 (&x->lock){+.+.}-{4:4}:`).
fn chain_class(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("-> #")?;
    let (n, rest) = rest.split_once(' ')?;
    n.parse::<u32>().ok()?;
    let rest = rest.strip_prefix('(')?;
    // The name may hold parentheses ("(work_completion)(&x->w)"): it ends
    // at the last ")" before the "{" of the usage bits.
    let end = rest.rfind("){").or_else(|| rest.rfind(')'))?;
    Some(rest[..end].to_string())
}

/// How a test ended: a KUnit case (`ok`, `not ok`, `ok ... # SKIP`) or a
/// scenario (`pass`, `skip`, anything else is a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and passed.
    Pass,
    /// It ran and failed.
    Fail,
    /// It did not run (or not all of it): never a pass.
    Skip,
}

/// What a KUnit suite reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KunitReport {
    /// Every case line at the suite's case level, in order: its name and
    /// outcome (the lines of a parameterised case's parameters, one level
    /// deeper, are its evidence, not cases).
    pub cases: Vec<(String, Outcome)>,
    /// The number of cases the suite's plan (`1..N` after its
    /// `# Subtest:` line) announced.
    pub plan: Option<usize>,
    /// The suite's own closing line: `Some(true)` for `ok N suite`.
    pub suite_ok: Option<bool>,
    /// The guest said the suite's results were missing.
    pub missing: bool,
}

impl KunitReport {
    /// The names of the cases that ended with `outcome`.
    pub fn with(&self, outcome: Outcome) -> Vec<&str> {
        self.cases
            .iter()
            .filter(|(_, o)| *o == outcome)
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

/// A scenario's one result line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioReport {
    /// `pass`, `skip`, or anything else (a failure); of several lines, the
    /// worst.
    pub outcome: Outcome,
    /// The `key=value` figures that followed.
    pub figures: BTreeMap<String, String>,
    /// How many result lines this id printed (more than one is a failure).
    pub count: usize,
}

/// Everything the verdict needs from one log.
#[derive(Debug, Clone, Default)]
pub struct LogFacts {
    /// Suite names whose `PEERMEM-SUITE-DONE` marker was seen.
    pub done: Vec<String>,
    /// KUnit reports by suite name.
    pub kunit: BTreeMap<String, KunitReport>,
    /// Scenario reports by id.
    pub scenarios: BTreeMap<String, ScenarioReport>,
    /// Every splat line.
    pub splats: Vec<Splat>,
    /// What the guest's final kmemleak scan said (`PEERMEM-KMEMLEAK
    /// scanned|unavailable`), if it got that far.
    pub kmemleak: Option<String>,
}

/// Removes a leading printk timestamp (`[   12.345678] `) and CRs.
pub fn clean_line(raw: &str) -> &str {
    let line = raw.trim_end_matches(['\r', '\n']);
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let stamp = &rest[..end];
            if !stamp.is_empty() && stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
                return rest[end + 1..]
                    .strip_prefix(' ')
                    .unwrap_or(&rest[end + 1..]);
            }
        }
    }
    line
}

fn splat_kind(line: &str) -> Option<&'static str> {
    if HARNESS_PREFIXES.iter().any(|p| line.starts_with(p)) {
        return None;
    }
    SPLAT_SIGNATURES
        .iter()
        .find(|(sig, _)| line.contains(sig))
        .map(|(_, kind)| *kind)
}

/// Parses a KTAP result line (`ok 1 name`, `not ok 2 name`, `ok 3 name #
/// SKIP`): its indentation, outcome and name.
fn ktap_case(line: &str) -> Option<(usize, Outcome, String)> {
    let t = line.trim_start();
    let indent = line.len() - t.len();
    let (ok, rest) = if let Some(r) = t.strip_prefix("not ok ") {
        (false, r)
    } else if let Some(r) = t.strip_prefix("ok ") {
        (true, r)
    } else {
        return None;
    };
    let mut parts = rest.splitn(2, ' ');
    parts.next()?.parse::<u32>().ok()?;
    let name_part = parts.next().unwrap_or("").trim();
    let skip = name_part.contains("# SKIP");
    let name = name_part
        .split(" #")
        .next()
        .unwrap_or("")
        .trim_start_matches("- ")
        .trim()
        .to_string();
    let outcome = match (ok, skip) {
        (false, _) => Outcome::Fail,
        (true, true) => Outcome::Skip,
        (true, false) => Outcome::Pass,
    };
    Some((indent, outcome, name))
}

/// One KUnit suite's block (between `PEERMEM-KUNIT-BEGIN` and `-END`)
/// while it is read.
#[derive(Default)]
struct KtapBlock {
    /// Result lines other than the suite's own: indentation, outcome, name.
    lines: Vec<(usize, Outcome, String)>,
    /// The `# Subtest: SUITE` line was seen; the next plan is the suite's.
    in_header: bool,
}

/// The cases of a finished block: the result lines at the shallowest
/// indentation (KUnit's debugfs file puts the suite's own line at 0, its
/// cases one level in, a parameterised case's parameters one more).
fn ktap_cases(block: &KtapBlock) -> Vec<(String, Outcome)> {
    let Some(level) = block.lines.iter().map(|(i, _, _)| *i).min() else {
        return Vec::new();
    };
    block
        .lines
        .iter()
        .filter(|(i, _, _)| *i == level)
        .map(|(_, o, n)| (n.clone(), *o))
        .collect()
}

/// Reads a whole log.
pub fn analyse(text: &str) -> LogFacts {
    let mut facts = LogFacts::default();
    let mut in_kunit: Option<(String, KtapBlock)> = None;
    let mut in_scenario: Option<String> = None;
    // The lockdep cycle report whose chain lines are being read.
    let mut in_cycle: Option<usize> = None;
    for (idx, raw) in text.lines().enumerate() {
        let line = clean_line(raw);
        if let Some(kind) = splat_kind(line) {
            in_cycle = line
                .contains("possible circular locking dependency")
                .then_some(facts.splats.len());
            facts.splats.push(Splat {
                line_no: idx + 1,
                kind,
                text: line.to_string(),
                scenario: in_scenario.clone(),
                classes: Vec::new(),
            });
        } else if let Some(i) = in_cycle {
            if line.contains("other info that might help us debug this") {
                in_cycle = None;
            } else if let Some(class) = chain_class(line) {
                facts.splats[i].classes.push(class);
            }
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-SCENARIO-BEGIN ") {
            in_scenario = Some(rest.trim().to_string());
            continue;
        }
        if line.starts_with("PEERMEM-SCENARIO-END ") {
            in_scenario = None;
            continue;
        }
        if let Some(pos) = line.find("SCENARIO-RESULT ") {
            let body = &line[pos + "SCENARIO-RESULT ".len()..];
            // `reason=` takes the rest of the line, spaces included.
            let (body, reason) = match body.find(" reason=") {
                Some(r) => (&body[..r], Some(body[r + " reason=".len()..].trim())),
                None => (body, None),
            };
            let mut it = body.split_whitespace();
            if let (Some(id), Some(result)) = (it.next(), it.next()) {
                let outcome = match result {
                    "pass" => Outcome::Pass,
                    "skip" => Outcome::Skip,
                    _ => Outcome::Fail,
                };
                let mut figures: BTreeMap<String, String> = it
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                if let Some(reason) = reason {
                    figures.insert("reason".into(), reason.to_string());
                }
                let entry = facts
                    .scenarios
                    .entry(id.to_string())
                    .or_insert(ScenarioReport {
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
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-SUITE-DONE ") {
            facts.done.push(rest.trim().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-KMEMLEAK ") {
            facts.kmemleak = Some(rest.trim().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-KUNIT-BEGIN ") {
            let suite = rest.trim().to_string();
            facts.kunit.entry(suite.clone()).or_default();
            in_kunit = Some((suite, KtapBlock::default()));
            continue;
        }
        if line.starts_with("PEERMEM-KUNIT-END ") {
            if let Some((suite, block)) = in_kunit.take() {
                facts.kunit.entry(suite).or_default().cases = ktap_cases(&block);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-KUNIT-MISSING ") {
            facts
                .kunit
                .entry(rest.trim().to_string())
                .or_default()
                .missing = true;
            continue;
        }
        if let Some((suite, block)) = &mut in_kunit {
            let t = line.trim();
            if let Some(name) = t.strip_prefix("# Subtest: ") {
                block.in_header = name.trim() == suite.as_str();
                continue;
            }
            if let Some(n) = t.strip_prefix("1..") {
                if block.in_header {
                    block.in_header = false;
                    facts.kunit.entry(suite.clone()).or_default().plan = n.trim().parse().ok();
                }
                continue;
            }
            if let Some((indent, outcome, name)) = ktap_case(line) {
                // The suite's own closing line names the suite: not a case.
                if name == *suite {
                    facts.kunit.entry(suite.clone()).or_default().suite_ok =
                        Some(outcome != Outcome::Fail);
                    continue;
                }
                block.lines.push((indent, outcome, name));
            }
        }
    }
    // A block the log cut off (the guest died inside it): its cases so far.
    if let Some((suite, block)) = in_kunit {
        facts.kunit.entry(suite).or_default().cases = ktap_cases(&block);
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_timestamps() {
        assert_eq!(clean_line("[    1.234567] hello\r"), "hello");
        assert_eq!(clean_line("[abc] x"), "[abc] x");
        assert_eq!(clean_line("plain"), "plain");
    }

    #[test]
    fn finds_every_kind_of_splat() {
        let log = "\
[    1.0] WARNING: CPU: 0 PID: 1 at x.c:1 f+0x1/0x2
[    1.1] BUG: KASAN: slab-use-after-free in f+0x1/0x2
[    1.2] WARNING: possible circular locking dependency detected
unreferenced object 0xffff888001234567 (size 64):
[    2.0] INFO: task a:1 blocked for more than 30 seconds.
[    2.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s!
[    2.2] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[    2.3] Oops: general protection fault, probably for non-canonical address
SCENARIO-RESULT quoted pass note=WARNING:
";
        let facts = analyse(log);
        let kinds: Vec<_> = facts.splats.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            vec![
                "warning",
                "bug",
                "warning",
                "kmemleak",
                "hung_task",
                "bug",
                "rcu_stall",
                "oops"
            ]
        );
        assert_eq!(facts.scenarios["quoted"].outcome, Outcome::Pass);
    }

    #[test]
    fn reads_a_lockdep_cycle_s_classes() {
        let log = "\
[   10.1] ======================================================
[   10.1] WARNING: possible circular locking dependency detected
[   10.1] 6.12.0 #1 Not tainted
[   10.1] simtest/99 is trying to acquire lock:
[   10.1] ffff8880 (&mr->mapping_lock){+.+.}-{4:4}, at: pd_invalidate+0x1/0x2
[   10.1] the existing dependency chain (in reverse order) is:
[   10.1] -> #1 (&psim.driver_lock){+.+.}-{4:4}:
[   10.1]        lock_acquire+0x1/0x2
[   10.2] -> #0 (&mr->mapping_lock){+.+.}-{4:4}:
[   10.2] other info that might help us debug this:
[   10.2] -> #5 (not_a_chain_line){+.+.}-{4:4}:
[   11.0] WARNING: CPU: 0 PID: 1 at x.c:1 f
[   11.1] -> #0 ((work_completion)(&w->work)){+.+.}-{0:0}:
";
        let facts = analyse(log);
        assert_eq!(facts.splats.len(), 2);
        assert_eq!(
            facts.splats[0].classes,
            vec!["&psim.driver_lock", "&mr->mapping_lock"]
        );
        assert!(facts.splats[1].classes.is_empty());
        assert_eq!(
            chain_class("-> #0 ((work_completion)(&w->work)){+.+.}-{0:0}:").as_deref(),
            Some("(work_completion)(&w->work)")
        );
        assert_eq!(chain_class("-> #x (a){"), None);
    }

    #[test]
    fn reads_ktap_between_markers() {
        let log = "\
PEERMEM-KUNIT-BEGIN s
KTAP version 1
# Subtest: s
1..3
    ok 1 a
    not ok 2 b
    ok 3 c # SKIP not here
# s: pass:1 fail:1 skip:1 total:3
not ok 1 s
PEERMEM-KUNIT-END s
ok 1 outside
PEERMEM-KUNIT-MISSING t
";
        let facts = analyse(log);
        let s = &facts.kunit["s"];
        assert_eq!(s.with(Outcome::Pass), vec!["a"]);
        assert_eq!(s.with(Outcome::Fail), vec!["b"]);
        assert_eq!(s.with(Outcome::Skip), vec!["c"]);
        assert_eq!(s.plan, Some(3));
        assert_eq!(s.suite_ok, Some(false));
        assert!(facts.kunit["t"].missing);
    }

    /// The layout of 6.12's debugfs `results` file: a one-suite KTAP
    /// document, the suite's header, plan and cases one level in, a
    /// parameterised case's parameters two levels in.
    #[test]
    fn reads_debugfs_ktap_cases_at_their_level() {
        let log = "\
[    9.1] PEERMEM-KUNIT-BEGIN s
KTAP version 1
1..1
    KTAP version 1
    # Subtest: s
    # module: s_kunit
    1..3
    ok 1 first
        KTAP version 1
        # Subtest: param
        ok 1 p-0
        not ok 2 p-1
    not ok 2 param
    ok 3 third
    # s: pass:2 fail:1 skip:0 total:3
ok 1 s
PEERMEM-KUNIT-END s
";
        let s = &analyse(log).kunit["s"];
        assert_eq!(
            s.cases,
            vec![
                ("first".to_string(), Outcome::Pass),
                ("param".to_string(), Outcome::Fail),
                ("third".to_string(), Outcome::Pass),
            ]
        );
        assert_eq!(s.plan, Some(3));
        assert_eq!(s.suite_ok, Some(true));
        // Cut off in the middle (the guest died): the cases so far.
        let cut = &log[..log.find("    ok 3 third").unwrap()];
        let s = &analyse(cut).kunit["s"];
        assert_eq!(s.cases.len(), 2);
        assert_eq!(s.suite_ok, None);
    }

    #[test]
    fn scenario_lines_with_figures_and_noise() {
        let log = "junk SCENARIO-RESULT a[x=1] pass ops=10 leaks=0\n\
                   SCENARIO-RESULT b fail x=1 reason=it went boom\n\
                   SCENARIO-RESULT c pass\nSCENARIO-RESULT c pass\n\
                   SCENARIO-RESULT d skip reason=no simtest\n\
                   SCENARIO-RESULT e pass\nSCENARIO-RESULT e skip\nSCENARIO-RESULT e fail\n\
                   PEERMEM-KMEMLEAK scanned\nPEERMEM-SUITE-DONE demo\n";
        let facts = analyse(log);
        assert_eq!(facts.scenarios["a[x=1]"].outcome, Outcome::Pass);
        assert_eq!(facts.scenarios["a[x=1]"].figures["ops"], "10");
        assert_eq!(facts.scenarios["b"].outcome, Outcome::Fail);
        assert_eq!(facts.scenarios["b"].figures["reason"], "it went boom");
        assert_eq!(facts.scenarios["b"].figures["x"], "1");
        assert_eq!(facts.scenarios["c"].count, 2);
        assert_eq!(facts.scenarios["d"].outcome, Outcome::Skip);
        assert_eq!(facts.scenarios["d"].figures["reason"], "no simtest");
        assert_eq!(facts.scenarios["e"].outcome, Outcome::Fail);
        assert_eq!(facts.done, vec!["demo"]);
        assert_eq!(facts.kmemleak.as_deref(), Some("scanned"));
    }
}
