//! Reading a VM's serial console log: markers, the KTAP documents of
//! KUnit's suites and of the scenarios, and kernel splats.

use crate::ktap;
pub use crate::ktap::Outcome;
use crate::scenarios;
pub use crate::scenarios::ScenarioReport;
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
const HARNESS_PREFIXES: &[&str] = &["PEERMEM-", "SCENARIO-LOG "];

/// The scenario result line of the guests that printed no KTAP document
/// for the scenarios: a log of theirs is refused, not misread.
const LEGACY_RESULT: &str = "SCENARIO-RESULT ";

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
    /// The modules its report names: each `[module]` of its headline and of
    /// the lines after it (stack frames, `RIP:`), up to the report's end,
    /// the next splat or a line of the test bed.
    pub modules: Vec<String>,
    /// A kmemleak report printed outside every scenario (the final scan):
    /// the scenario that was running when the object was allocated, by the
    /// `jiffies` of its `comm` line and the boot's `PEERMEM-CLOCK` samples.
    pub allocated_during: Option<String>,
}

/// A `PEERMEM-CLOCK uptime=U jiffies=J` sample of the guest: two of them
/// map kmemleak's allocation jiffies to the uptime the scenarios' markers
/// carry.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ClockSample {
    uptime: f64,
    jiffies: u64,
}

/// The value of `key=` among a marker line's words.
fn word_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The allocation jiffies of a kmemleak report's `comm "x", pid N, jiffies J` line.
fn kmemleak_jiffies(line: &str) -> Option<u64> {
    let rest = line.trim_start().strip_prefix("comm ")?;
    rest.rsplit_once("jiffies ")?.1.trim().parse().ok()
}

/// The scenario whose [begin, end] uptime holds the allocation jiffies
/// `j`, by the line through the first and last clock samples.
fn scenario_at_jiffies(
    j: u64,
    clock: &[ClockSample],
    spans: &[(String, f64, Option<f64>)],
) -> Option<String> {
    let (a, b) = (clock.first()?, clock.last()?);
    if b.jiffies <= a.jiffies || b.uptime <= a.uptime {
        return None;
    }
    let hz = (b.jiffies - a.jiffies) as f64 / (b.uptime - a.uptime);
    let t = a.uptime + (j as f64 - a.jiffies as f64) / hz;
    spans
        .iter()
        .find(|(_, begin, end)| t >= *begin && end.is_none_or(|e| t <= e))
        .map(|(id, _, _)| id.clone())
}

/// Lines of a report read after its headline for the modules it names, at
/// most: a hung task's trace ends well before, a lockdep cycle's chain of
/// stacks about then.
const REPORT_LINES: usize = 200;

/// The `[module]` names of a report line (`ref_free_cb+0x1c/0x40
/// [peermem_refclient]`).
fn frame_modules(line: &str) -> impl Iterator<Item = &str> {
    line.split('[').skip(1).filter_map(|rest| {
        let name = rest.split(']').next()?;
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .then_some(name)
    })
}

/// Whether a line ends a kernel report (KASAN's rule, the end of a WARN's
/// or an Oops's trace) or starts another dump that is no splat (a sysrq
/// request's task list).
fn ends_report(line: &str) -> bool {
    line.starts_with("==========")
        || line.starts_with("---[ end trace")
        || line.starts_with("sysrq: ")
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

/// Everything the verdict needs from one log.
#[derive(Debug, Clone, Default)]
pub struct LogFacts {
    /// Suite names whose `PEERMEM-SUITE-DONE` marker was seen.
    pub done: Vec<String>,
    /// KUnit reports by suite name.
    pub kunit: BTreeMap<String, KunitReport>,
    /// Scenario reports by id.
    pub scenarios: BTreeMap<String, ScenarioReport>,
    /// What is wrong with the scenarios' KTAP document (a boot's result is
    /// incomplete with any).
    pub scenario_problems: Vec<String>,
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

/// [`SPLAT_SIGNATURES`] as one POSIX extended regular expression, for the
/// guest's own checks (busybox grep -E): the guest and the verdict look for
/// the same lines. Each signature is matched literally.
pub fn splat_regex() -> String {
    SPLAT_SIGNATURES
        .iter()
        .map(|(sig, _)| {
            sig.chars()
                .map(|c| {
                    if "\\.[]()*+?{}|^$".contains(c) {
                        format!("\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("|")
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

/// What one suite's KTAP document (its debugfs `results` file) reports:
/// the top-level document holds one test, the suite, whose subtest has the
/// cases; a parameterised case's parameters, a level deeper, are its
/// evidence, not cases.
fn kunit_report(suite: &str, doc: &ktap::Document) -> KunitReport {
    let closed = doc
        .tests
        .iter()
        .find(|t| t.name == suite && t.subtest.is_some());
    let cases = closed
        .and_then(|t| t.subtest.as_ref())
        .or(doc.unfinished.as_deref());
    KunitReport {
        cases: cases
            .map(|c| {
                c.tests
                    .iter()
                    .map(|t| (t.name.clone(), t.outcome))
                    .collect()
            })
            .unwrap_or_default(),
        plan: cases.and_then(|c| c.plan),
        suite_ok: closed.map(|t| t.outcome != Outcome::Fail),
        missing: false,
    }
}

/// Reads a whole log. A log of a guest that printed its scenarios' results
/// only as `SCENARIO-RESULT` lines is refused.
pub fn analyse(text: &str) -> Result<LogFacts, String> {
    let mut facts = LogFacts::default();
    let mut in_kunit: Option<(String, Vec<&str>)> = None;
    let mut in_scenario: Option<String> = None;
    let mut scenario_ktap: Vec<&str> = Vec::new();
    let mut started: Vec<(String, usize)> = Vec::new();
    let mut legacy = false;
    // The lockdep cycle report whose chain lines are being read.
    let mut in_cycle: Option<usize> = None;
    // The splat whose report is being read, and how many of its lines.
    let mut in_report: Option<(usize, usize)> = None;
    // The guest's clock samples, each scenario's uptime span, and the
    // allocation jiffies of each kmemleak report outside every scenario.
    let mut clock: Vec<ClockSample> = Vec::new();
    let mut spans: Vec<(String, f64, Option<f64>)> = Vec::new();
    let mut leak_jiffies: Vec<(usize, u64)> = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = clean_line(raw);
        if let Some(kind) = splat_kind(line) {
            in_cycle = line
                .contains("possible circular locking dependency")
                .then_some(facts.splats.len());
            in_report = Some((facts.splats.len(), 0));
            facts.splats.push(Splat {
                line_no: idx + 1,
                kind,
                text: line.to_string(),
                scenario: in_scenario.clone(),
                classes: Vec::new(),
                modules: frame_modules(line).map(String::from).collect(),
                allocated_during: None,
            });
        } else if let Some((i, n)) = in_report {
            if n >= REPORT_LINES
                || ends_report(line)
                || HARNESS_PREFIXES.iter().any(|p| line.starts_with(p))
                || line.starts_with(scenarios::PREFIX)
            {
                in_report = None;
            } else {
                in_report = Some((i, n + 1));
                if let Some(j) = kmemleak_jiffies(line) {
                    if facts.splats[i].kind == "kmemleak" && facts.splats[i].scenario.is_none() {
                        leak_jiffies.push((i, j));
                    }
                }
                for m in frame_modules(line) {
                    if !facts.splats[i].modules.iter().any(|k| k == m) {
                        facts.splats[i].modules.push(m.to_string());
                    }
                }
            }
        }
        if let (Some(i), None) = (in_cycle, splat_kind(line)) {
            if line.contains("other info that might help us debug this") {
                in_cycle = None;
            } else if let Some(class) = chain_class(line) {
                facts.splats[i].classes.push(class);
            }
        }
        if let Some(ktap_line) = line.strip_prefix(scenarios::PREFIX) {
            scenario_ktap.push(ktap_line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-SCENARIO-BEGIN ") {
            // "ID uptime=U": the id is the first word (ids hold no space)
            let id = rest.split_whitespace().next().unwrap_or("").to_string();
            if let Some(u) = word_value(rest, "uptime").and_then(|u| u.parse().ok()) {
                spans.push((id.clone(), u, None));
            }
            started.push((id.clone(), idx + 1));
            in_scenario = Some(id);
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-SCENARIO-END ") {
            let u = word_value(rest, "uptime").and_then(|u| u.parse::<f64>().ok());
            if let (Some(u), Some(last)) = (u, spans.last_mut()) {
                if Some(&last.0) == in_scenario.as_ref() {
                    last.2 = Some(u);
                }
            }
            in_scenario = None;
            continue;
        }
        if let Some(rest) = line.strip_prefix("PEERMEM-CLOCK ") {
            let u = word_value(rest, "uptime").and_then(|u| u.parse().ok());
            let j = word_value(rest, "jiffies").and_then(|j| j.parse().ok());
            if let (Some(uptime), Some(jiffies)) = (u, j) {
                clock.push(ClockSample { uptime, jiffies });
            }
            continue;
        }
        legacy |= line.contains(LEGACY_RESULT);
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
            in_kunit = Some((suite, Vec::new()));
            continue;
        }
        if line.starts_with("PEERMEM-KUNIT-END ") {
            if let Some((suite, lines)) = in_kunit.take() {
                let report = kunit_report(&suite, &ktap::parse(lines));
                facts.kunit.insert(suite, report);
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
        // The suite's debugfs file, not the kernel's printk copy of the
        // same KTAP (timestamped), which a console printing from its own
        // thread may still be writing out.
        if let Some((_, lines)) = &mut in_kunit {
            if line.len() == raw.trim_end_matches(['\r', '\n']).len() {
                lines.push(line);
            }
        }
    }
    // A block the log cut off (the guest died inside it): its cases so far.
    if let Some((suite, lines)) = in_kunit {
        let report = kunit_report(&suite, &ktap::parse(lines));
        facts.kunit.insert(suite, report);
    }
    for (i, j) in leak_jiffies {
        facts.splats[i].allocated_during = scenario_at_jiffies(j, &clock, &spans);
    }
    if scenario_ktap.is_empty() && legacy {
        return Err(format!(
            "the log has {LEGACY_RESULT}lines and no scenario KTAP document ({}...): \
             a guest-init older than the KTAP reader wrote it; judge it with the vm-verdict \
             of its own tree",
            scenarios::PREFIX
        ));
    }
    let doc = (!scenario_ktap.is_empty()).then(|| ktap::parse(scenario_ktap));
    (facts.scenarios, facts.scenario_problems) = scenarios::read(doc.as_ref(), &started);
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::console;

    /// A leak the final scan reports is charged to the scenario that was
    /// running when the object was allocated (HZ from the two samples).
    #[test]
    fn attributes_a_final_leak_to_the_scenario_that_allocated_it() {
        let log = "\
PEERMEM-CLOCK uptime=10.00 jiffies=4294893796
PEERMEM-SCENARIO-BEGIN a[k=1] uptime=11.00
PEERMEM-SCENARIO-END a[k=1] rc=0 secs=2 uptime=13.00
PEERMEM-SCENARIO-BEGIN b uptime=14.00
PEERMEM-SCENARIO-END b rc=0 secs=6 uptime=20.00
PEERMEM-CLOCK uptime=30.00 jiffies=4294898796
[   35.0] kmemleak: 2 new suspected memory leaks
unreferenced object 0xffff888001234567 (size 64):
  comm \"simtest\", pid 90, jiffies 4294896296
unreferenced object 0xffff888001234000 (size 64):
  comm \"insmod\", pid 91, jiffies 4294897546
";
        let facts = analyse(&console(log)).unwrap();
        let leaks: Vec<_> = facts
            .splats
            .iter()
            .filter(|s| s.kind == "kmemleak")
            .collect();
        assert_eq!(leaks.len(), 2);
        // 250 Hz: jiffies 4294896296 is uptime 20.0 (b's end), 4294897546 is 25.0
        assert_eq!(leaks[0].allocated_during.as_deref(), Some("b"));
        assert_eq!(leaks[0].scenario, None);
        assert_eq!(leaks[1].allocated_during, None);
        assert_eq!(facts.scenarios.len(), 0);
    }

    #[test]
    fn strips_timestamps() {
        assert_eq!(clean_line("[    1.234567] hello\r"), "hello");
        assert_eq!(clean_line("[abc] x"), "[abc] x");
        assert_eq!(clean_line("plain"), "plain");
    }

    /// The guest greps with the regex the verdict hands it: each signature
    /// (an RCU self-detected stall too) matches, a quiet line does not,
    /// and a character special to ERE stays literal.
    #[test]
    fn splat_regex_matches_what_the_verdict_counts() {
        let re = splat_regex();
        let mut lines: Vec<String> = SPLAT_SIGNATURES
            .iter()
            .map(|(sig, _)| format!("[ 1.0] x {sig} y"))
            .collect();
        lines.push("[ 2.0] rcu: INFO: rcu_preempt self-detected stall on CPU".into());
        let grep = |input: &str| {
            let mut child = std::process::Command::new("grep")
                .args(["-c", "-E", "--", &re])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("grep runs");
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write");
            let out = child.wait_with_output().expect("grep ends");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        for line in &lines {
            assert_eq!(
                grep(&format!("{line}\n")),
                "1",
                "{line} not matched by {re}"
            );
        }
        assert_eq!(
            grep("[ 3.0] quiet: BUG fixed, Oops-free, lockdep on\n"),
            "0"
        );
        assert_eq!(
            grep("kernel BUG_at\n"),
            "0",
            "a literal space stays literal"
        );
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
REPORT quoted pass note=WARNING:
";
        let facts = analyse(&console(log)).unwrap();
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
        let facts = analyse(log).unwrap();
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
    fn a_suite_without_results_is_missing() {
        let facts = analyse("PEERMEM-KUNIT-MISSING t\n").unwrap();
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
        let s = &analyse(log).unwrap().kunit["s"];
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
        let s = &analyse(cut).unwrap().kunit["s"];
        assert_eq!(s.cases.len(), 2);
        assert_eq!(s.suite_ok, None);
    }

    /// The kernel's own KTAP (KUnit's, printed when a test module loads)
    /// shares the console with the scenarios' document: only the lines
    /// with the scenarios' prefix are read as scenario results, only the
    /// debugfs file between the markers (no printk timestamp) as a suite's.
    #[test]
    fn the_kernel_s_ktap_is_kept_apart_from_the_scenarios() {
        let log = "\
[    8.1] KTAP version 1
[    8.1] 1..0
PEERMEM-KTAP KTAP version 1
PEERMEM-KTAP 1..2
[   10.8] KTAP version 1
[   10.8] 1..1
[   10.8]     KTAP version 1
[   10.8]     # Subtest: s
[   10.8]     1..1
[   10.8]     ok 1 case
[   10.8] ok 1 s
PEERMEM-KUNIT-BEGIN s
KTAP version 1
1..1
    KTAP version 1
    # Subtest: s
[   10.9] ok 2 s
    1..1
    not ok 1 case
not ok 1 s
PEERMEM-KUNIT-END s
PEERMEM-SCENARIO-BEGIN a
PEERMEM-SCENARIO-END a rc=0 secs=1
PEERMEM-KTAP # report: pass ops=10 leaks=0
PEERMEM-KTAP ok 1 a
ok 2 b
PEERMEM-SCENARIO-BEGIN b
PEERMEM-SCENARIO-END b rc=1 secs=1
PEERMEM-KTAP # report: fail x=1 reason=it went boom: BUG: KASAN: quoted
PEERMEM-KTAP not ok 2 b # TODO must fail
PEERMEM-KMEMLEAK scanned
PEERMEM-SUITE-DONE demo
";
        let facts = analyse(log).unwrap();
        assert!(
            facts.scenario_problems.is_empty(),
            "{:?}",
            facts.scenario_problems
        );
        assert_eq!(facts.scenarios.len(), 2);
        assert_eq!(facts.scenarios["a"].outcome, Outcome::Pass);
        assert_eq!(facts.scenarios["a"].figures["ops"], "10");
        assert_eq!(facts.scenarios["b"].outcome, Outcome::Fail);
        assert_eq!(
            facts.scenarios["b"].figures["reason"],
            "it went boom: BUG: KASAN: quoted"
        );
        assert!(facts.splats.is_empty(), "{:?}", facts.splats);
        assert_eq!(facts.kunit["s"].with(Outcome::Fail), ["case"]);
        assert_eq!(facts.kunit["s"].suite_ok, Some(false));
        assert_eq!(facts.done, vec!["demo"]);
        assert_eq!(facts.kmemleak.as_deref(), Some("scanned"));
    }

    /// A log of a guest that wrote its scenario results only as
    /// `SCENARIO-RESULT` lines: refused, with what to do instead.
    #[test]
    fn a_log_without_the_scenario_document_is_refused() {
        let log = "PEERMEM-SCENARIO-BEGIN a\nSCENARIO-RESULT a pass\nPEERMEM-SUITE-DONE s\n";
        let e = analyse(log).unwrap_err();
        assert!(e.contains("no scenario KTAP document"), "{e}");
        // Without scenarios (a KUnit suite's boot) there is nothing to refuse.
        assert!(analyse("PEERMEM-SUITE-DONE s\n").is_ok());
    }

    #[test]
    fn a_started_scenario_without_its_ktap_line_is_a_problem() {
        let log = "PEERMEM-KTAP KTAP version 1\nPEERMEM-KTAP 1..2\n\
                   PEERMEM-SCENARIO-BEGIN a\nPEERMEM-KTAP # report: pass\nPEERMEM-KTAP ok 1 a\n\
                   PEERMEM-SCENARIO-BEGIN b\n";
        let facts = analyse(log).unwrap();
        assert_eq!(
            facts.scenario_problems,
            [
                "the KTAP plan announced 2 tests, 1 result lines came",
                "scenario b started (log line 6) and has no KTAP result line"
            ]
        );
    }
}
