//! The reliability report (issue 5): every `rel_*` scenario of the VM
//! verdicts as a table of scenario, configuration, result and figures, the
//! lock-order matrix, and the same as JSON.
//!
//! A row passes only if its scenario passed AND its boot was clean
//! (`vm:<suite>:completed` and `vm:<suite>:splats` passed): a splat or a
//! hang after the scenario printed `pass` still fails the row.
//!
//! Field-bug scenarios also run against the C reference client with that
//! bug planted (`teeth:` tests, suite field-teeth). Their rows, and the
//! module's rows of the same scenario, say in column "caught" whether the
//! scenario caught the original's defect; a "no" fails both.

use crate::verdict::SuiteVerdict;
use serde::Serialize;
use std::collections::BTreeMap;

/// Scenario arguments that say what a scenario does (part of its name in
/// the table); all others describe the configuration it ran in.
const WHAT_KEYS: &[&str] = &["window", "bug", "part", "variant"];

/// The figures every reliability scenario reports, in table order.
pub const FIGURES: &[&str] = &["ops", "faults", "races", "leaks", "splats"];

/// One `rel_*` scenario run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// Script name plus its "what" arguments, e.g. `rel_race window=free_vs_dereg`.
    pub scenario: String,
    /// The remaining arguments, e.g. `generation=modern peerdirect_support=0 persistent_api_support=0`.
    pub configuration: String,
    /// The suite (VM boot) it ran in.
    pub suite: String,
    /// `pass` or `fail`.
    pub result: String,
    /// Why it failed (empty when it passed).
    pub reason: String,
    /// Every figure it reported (`reason` excluded).
    pub figures: BTreeMap<String, String>,
    /// Field bugs: whether the scenario caught the original's defect
    /// (`yes`/`no`); empty where no planted-defect run exists.
    pub caught: String,
}

/// The phases of an MR a cudaFree is forced into (rel_lib.sh's phase_race).
const PHASES: &[&str] = &[
    "get_pages",
    "pinned",
    "dma_map",
    "activate",
    "live",
    "dereg",
];

/// One cell of the lock-order matrix (from `rel_lockorder`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// Core generation.
    pub gen: String,
    /// `peerdirect_support`.
    pub pds: String,
    /// `persistent_api_support`.
    pub pers: String,
    /// What the contract predicts: `inversion` (a mapping lock -> driver
    /// lock order in deregistration as well), `class` (only the
    /// registration's order: a class-level cycle), `clean` or `refused`.
    pub expected: String,
    /// What lockdep / the load said: `reported`, `clean`, `not-loaded`, or
    /// `?` when the scenario failed before it could tell.
    pub observed: String,
    /// The path lockdep's report names for the mapping lock -> driver lock
    /// order (`registration`, `dereg`), `-` without a report.
    pub edge: String,
    /// The phase whose forced cudaFree left tasks stuck (a real deadlock),
    /// or `none`.
    pub hang: String,
    /// Each forced phase: `ok` (no hang, window reached), `missed` (the
    /// window counter did not move), `hang`, `-` (not run).
    pub phases: Vec<(String, String)>,
    /// `pass` or `fail` (the row's result).
    pub result: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every `rel_*` scenario run, in suite order.
    pub rows: Vec<Row>,
    /// The lock-order matrix cells found.
    pub lock_order_matrix: Vec<Cell>,
    /// Sums of the standard figures over all rows.
    pub totals: BTreeMap<String, u64>,
    /// Rows that passed.
    pub passed: usize,
    /// Rows that failed.
    pub failed: usize,
}

/// Splits a scenario id `name[a=1,b=2]` into its name and arguments.
fn split_id(id: &str) -> (&str, Vec<&str>) {
    match id.split_once('[') {
        Some((name, rest)) => {
            let args = rest.trim_end_matches(']');
            let args = if args.is_empty() {
                Vec::new()
            } else {
                args.split(',').collect()
            };
            (name, args)
        }
        None => (id, Vec::new()),
    }
}

/// Whether the boot of this verdict completed without unexpected splats.
fn boot_clean(v: &SuiteVerdict) -> Result<(), String> {
    for t in &v.tests {
        let is_boot = t.name.starts_with("vm:")
            && (t.name.ends_with(":completed") || t.name.ends_with(":splats"));
        if is_boot && !t.passed {
            return Err(format!("boot: {}", t.reason));
        }
    }
    Ok(())
}

/// Builds the report from the verdicts of the VM boots.
pub fn build(verdicts: &[SuiteVerdict]) -> Report {
    let mut rows = Vec::new();
    for v in verdicts {
        let boot = boot_clean(v);
        for t in &v.tests {
            let (id, teeth) = if let Some(id) = t.name.strip_prefix("scenario:") {
                (id, false)
            } else if let Some(id) = t.name.strip_prefix("teeth:") {
                (id, true)
            } else {
                continue;
            };
            let (name, args) = split_id(id);
            // NVIDIA's own module's runs (issue 33) have their report
            // (nvidia.rs); their declared reds are no planted defects.
            if !name.starts_with("rel_") || args.iter().any(|a| a.starts_with("client=nv")) {
                continue;
            }
            let (what, config): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| {
                WHAT_KEYS
                    .iter()
                    .any(|k| a.split_once('=').is_some_and(|(key, _)| key == *k))
            });
            let mut scenario = name.to_string();
            for w in &what {
                scenario.push(' ');
                scenario.push_str(w);
            }
            let (passed, reason) = match (&boot, t.passed) {
                (_, false) => (false, t.reason.clone()),
                (Err(e), true) => (false, e.clone()),
                (Ok(()), true) => (true, String::new()),
            };
            let figures = t
                .figures
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "reason" | "caught"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let caught = match (teeth, t.passed) {
                (false, _) => String::new(),
                (true, true) => "yes".into(),
                (true, false) => "no".into(),
            };
            rows.push(Row {
                scenario,
                configuration: config.join(" "),
                suite: v.suite.clone(),
                // A skipped scenario tested nothing: not a pass (counted
                // with the failures below).
                result: if passed {
                    "pass"
                } else if t.skipped {
                    "skip"
                } else {
                    "fail"
                }
                .into(),
                reason,
                figures,
                caught,
            });
        }
    }
    // The module's rows of a field-bug scenario take the planted runs' word.
    let planted: Vec<(String, bool)> = rows
        .iter()
        .filter(|r| !r.caught.is_empty())
        .map(|r| (r.scenario.clone(), r.caught == "yes"))
        .collect();
    for r in rows.iter_mut().filter(|r| r.caught.is_empty()) {
        let runs: Vec<bool> = planted
            .iter()
            .filter(|(s, _)| *s == r.scenario)
            .map(|(_, c)| *c)
            .collect();
        if runs.is_empty() {
            continue;
        }
        if runs.iter().all(|c| *c) {
            r.caught = "yes".into();
        } else {
            r.caught = "no".into();
            if r.result == "pass" {
                r.result = "fail".into();
                r.reason =
                    "the scenario did not catch the original's defect (see its teeth: row)".into();
            }
        }
    }

    let mut lock_order_matrix: Vec<Cell> = rows
        .iter()
        .filter(|r| r.scenario == "rel_lockorder")
        .map(|r| {
            let arg = |key: &str| {
                r.configuration
                    .split_whitespace()
                    .find_map(|a| a.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                    .unwrap_or("?")
                    .to_string()
            };
            let fig = |key: &str| r.figures.get(key).cloned().unwrap_or_else(|| "?".into());
            let pers = match arg("persistent_api_support").as_str() {
                "?" => "0".to_string(),
                p => p.to_string(),
            };
            let phases = PHASES
                .iter()
                .map(|p| {
                    let v = r
                        .figures
                        .get(&format!("p_{p}"))
                        .cloned()
                        .unwrap_or_else(|| "-".into());
                    (p.to_string(), v)
                })
                .collect();
            Cell {
                gen: arg("generation"),
                pds: arg("peerdirect_support"),
                pers,
                expected: fig("expected"),
                observed: fig("lockdep"),
                edge: r.figures.get("edge").cloned().unwrap_or_else(|| "-".into()),
                hang: fig("hang"),
                phases,
                result: r.result.clone(),
            }
        })
        .collect();
    // Cores from newest to oldest, then peerdirect_support.
    let core_rank = |g: &str| match g {
        "modern" => 0,
        "mofed51" => 1,
        "legacy" => 2,
        _ => 3,
    };
    lock_order_matrix.sort_by(|a, b| {
        (core_rank(&a.gen), &a.pds, &a.pers).cmp(&(core_rank(&b.gen), &b.pds, &b.pers))
    });

    let mut totals = BTreeMap::new();
    for key in FIGURES {
        let sum = rows
            .iter()
            .filter_map(|r| r.figures.get(*key))
            .filter_map(|v| v.parse::<u64>().ok())
            .sum();
        totals.insert(key.to_string(), sum);
    }
    let passed = rows.iter().filter(|r| r.result == "pass").count();
    let failed = rows.len() - passed;
    Report {
        rows,
        lock_order_matrix,
        totals,
        passed,
        failed,
    }
}

/// Renders the report as text tables.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let w_s = report
        .rows
        .iter()
        .map(|r| r.scenario.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let w_c = report
        .rows
        .iter()
        .map(|r| r.configuration.len())
        .max()
        .unwrap_or(13)
        .max(13);
    out.push_str("== reliability (issue 5) ==\n");
    out.push_str(&format!(
        "{:<w_s$}  {:<w_c$}  {:<6}  {:<6}  {:>8} {:>6} {:>6} {:>5} {:>6}  other\n",
        "scenario",
        "configuration",
        "result",
        "caught",
        "ops",
        "faults",
        "races",
        "leaks",
        "splats"
    ));
    for r in &report.rows {
        let fig = |k: &str| r.figures.get(k).map_or("-", String::as_str).to_string();
        let other: Vec<String> = r
            .figures
            .iter()
            .filter(|(k, _)| !FIGURES.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!(
            "{:<w_s$}  {:<w_c$}  {:<6}  {:<6}  {:>8} {:>6} {:>6} {:>5} {:>6}  {}\n",
            r.scenario,
            r.configuration,
            r.result.to_uppercase(),
            if r.caught.is_empty() { "-" } else { &r.caught },
            fig("ops"),
            fig("faults"),
            fig("races"),
            fig("leaks"),
            fig("splats"),
            other.join(" ")
        ));
        if r.result != "pass" {
            out.push_str(&format!("    ({}: {})\n", r.suite, r.reason));
        }
    }
    let t = |k: &str| report.totals.get(k).copied().unwrap_or(0);
    out.push_str(&format!(
        "{:<w_s$}  {:<w_c$}  {:<6}  {:<6}  {:>8} {:>6} {:>6} {:>5} {:>6}\n",
        "total",
        "",
        "",
        "",
        t("ops"),
        t("faults"),
        t("races"),
        t("leaks"),
        t("splats")
    ));
    if !report.lock_order_matrix.is_empty() {
        out.push_str(
            "\n== lock-order matrix (cudaFree racing each phase of an MR; lockdep sees the driver lock) ==\n",
        );
        out.push_str(&format!(
            "{:<8} {:<4} {:<5} {:<10} {:<11} {:<13} {:<9}",
            "core", "pds", "pers", "expected", "lockdep", "edge", "deadlock"
        ));
        for p in PHASES {
            out.push_str(&format!(" {p:<9}"));
        }
        out.push_str(" result\n");
        for c in &report.lock_order_matrix {
            out.push_str(&format!(
                "{:<8} {:<4} {:<5} {:<10} {:<11} {:<13} {:<9}",
                c.gen, c.pds, c.pers, c.expected, c.observed, c.edge, c.hang
            ));
            for (_, v) in &c.phases {
                out.push_str(&format!(" {v:<9}"));
            }
            out.push_str(&format!(" {}\n", c.result.to_uppercase()));
        }
        out.push_str(
            "lockdep: reported = the mapping lock / driver lock cycle (edge: the path of the \
             mapping lock -> driver lock order lockdep names); deadlock: the phase whose forced \
             cudaFree left tasks stuck, none = every forced interleaving finished (a class-level \
             report that cannot deadlock for this client)\n",
        );
    }
    out.push_str(&format!(
        "reliability: {} passed, {} failed\n",
        report.passed, report.failed
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::analyse;
    use crate::scenarios::console;
    use crate::suite::Suite;
    use crate::verdict::judge;

    fn verdict(name: &str, suite: &str, log: &str) -> SuiteVerdict {
        judge(
            &Suite::parse(name, suite).unwrap(),
            &analyse(&console(log)).unwrap(),
            false,
        )
    }

    #[test]
    fn table_rows_configuration_and_totals() {
        let v = verdict(
            "rel-races",
            "scenario rel_race window=free_vs_dereg generation=modern peerdirect_support=0 persistent_api_support=0\n\
             scenario rel_stress generation=modern peerdirect_support=0 persistent_api_support=1 ops=30000\n\
             scenario vm_smoke iommu=on\n",
            "REPORT rel_race[window=free_vs_dereg,generation=modern,peerdirect_support=0,persistent_api_support=0] pass \
             ops=800 faults=0 races=200 leaks=0 splats=0 seed=7\n\
             REPORT rel_stress[generation=modern,peerdirect_support=0,persistent_api_support=1,ops=30000] pass \
             ops=30000 faults=0 races=12 leaks=0 splats=0\n\
             REPORT vm_smoke[iommu=on] pass\nPEERMEM-SUITE-DONE rel-races\n",
        );
        let r = build(&[v]);
        assert_eq!(r.rows.len(), 2, "only rel_* scenarios: {r:#?}");
        assert_eq!(r.rows[0].scenario, "rel_race window=free_vs_dereg");
        assert_eq!(
            r.rows[0].configuration,
            "generation=modern peerdirect_support=0 persistent_api_support=0"
        );
        assert_eq!(
            r.rows[1].configuration,
            "generation=modern peerdirect_support=0 persistent_api_support=1 ops=30000"
        );
        assert_eq!(r.totals["ops"], 30800);
        assert_eq!(r.totals["races"], 212);
        assert_eq!((r.passed, r.failed), (2, 0));
        let text = render(&r);
        assert!(text.contains("rel_race window=free_vs_dereg"), "{text}");
        assert!(text.contains("seed=7"), "{text}");
        assert!(text.contains("reliability: 2 passed, 0 failed"), "{text}");
    }

    #[test]
    fn a_dirty_boot_fails_its_passing_scenarios() {
        let v = verdict(
            "rel-faults",
            "scenario rel_faults generation=modern peerdirect_support=0 persistent_api_support=0\n",
            "REPORT rel_faults[generation=modern,peerdirect_support=0,persistent_api_support=0] pass ops=1 faults=80\n\
             BUG: KASAN: slab-use-after-free in x\nPEERMEM-SUITE-DONE rel-faults\n",
        );
        let r = build(&[v]);
        assert_eq!(r.rows[0].result, "fail");
        assert!(
            r.rows[0].reason.contains("unexpected kernel splat"),
            "{r:#?}"
        );
        // a scenario failure keeps its own reason
        let v = verdict(
            "s",
            "scenario rel_badinput part=load\n",
            "REPORT rel_badinput[part=load] fail ops=3 reason=insmod succeeded\n\
             PEERMEM-SUITE-DONE s\n",
        );
        let r = build(&[v]);
        assert_eq!(r.rows[0].scenario, "rel_badinput part=load");
        assert_eq!(r.rows[0].configuration, "");
        assert_eq!(r.rows[0].reason, "insmod succeeded");
        assert_eq!((r.passed, r.failed), (0, 1));
    }

    #[test]
    fn field_rows_say_whether_the_planted_defect_was_caught() {
        let suite = "scenario rel_field bug=uaf_window generation=modern\n\
                     scenario rel_field bug=uaf_window client=ref defects=uaf_window\n\
                     caught \"KASAN\"\n\
                     scenario rel_field bug=double_unmap\n\
                     scenario rel_field bug=double_unmap client=ref defects=double_unmap\n\
                     caught \"KASAN\"\n\
                     scenario rel_field bug=silent_load\n";
        let log = "REPORT rel_field[bug=uaf_window,generation=modern] pass ops=3\n\
                   REPORT rel_field[bug=uaf_window,client=ref,defects=uaf_window] fail \
                   ops=1 reason=1 splat line(s), first: BUG: KASAN: x\n\
                   REPORT rel_field[bug=double_unmap] pass ops=3\n\
                   REPORT rel_field[bug=double_unmap,client=ref,defects=double_unmap] pass ops=3\n\
                   REPORT rel_field[bug=silent_load] pass ops=1\n\
                   PEERMEM-SUITE-DONE field-teeth\n";
        let r = build(&[verdict("field-teeth", suite, log)]);
        let caught: Vec<(&str, &str, &str)> = r
            .rows
            .iter()
            .map(|r| {
                (
                    r.configuration.as_str(),
                    r.result.as_str(),
                    r.caught.as_str(),
                )
            })
            .collect();
        assert_eq!(
            caught,
            vec![
                ("generation=modern", "pass", "yes"),
                ("client=ref defects=uaf_window", "pass", "yes"),
                ("", "fail", "no"),
                ("client=ref defects=double_unmap", "fail", "no"),
                ("", "pass", ""),
            ]
        );
        let text = render(&r);
        assert!(text.contains("caught"), "{text}");
        assert!(text.contains("reliability: 3 passed, 2 failed"), "{text}");
    }

    #[test]
    fn lock_order_matrix_from_cells() {
        let v = verdict(
            "rel-lockorder-mofed51-pds1",
            "expect_splat lockdep \"possible circular locking dependency\"\n\
             scenario rel_lockorder generation=mofed51 peerdirect_support=1\n",
            "WARNING: possible circular locking dependency detected\n\
             REPORT rel_lockorder[generation=mofed51,peerdirect_support=1] pass ops=7 races=1 \
             expected=inversion lockdep=reported\nPEERMEM-SUITE-DONE rel-lockorder-mofed51-pds1\n",
        );
        let w = verdict(
            "rel-field",
            "scenario rel_lockorder generation=legacy peerdirect_support=0\n",
            "PEERMEM-SUITE-DONE rel-field\n",
        );
        let r = build(&[v, w]);
        assert_eq!(r.lock_order_matrix.len(), 2);
        // sorted: mofed51 before legacy
        let c = &r.lock_order_matrix[0];
        assert_eq!(
            (
                c.gen.as_str(),
                c.pds.as_str(),
                c.expected.as_str(),
                c.observed.as_str()
            ),
            ("mofed51", "1", "inversion", "reported")
        );
        assert_eq!(c.result, "pass");
        // a missing report: the cell fails and says it does not know
        let c = &r.lock_order_matrix[1];
        assert_eq!((c.observed.as_str(), c.result.as_str()), ("?", "fail"));
        assert!(render(&r).contains("lock-order matrix"));
    }

    #[test]
    fn lock_order_matrix_phases() {
        let v = verdict(
            "rel-lockorder-modern-pds1",
            "expect_splat lockdep \"possible circular locking dependency\"\n\
             scenario rel_lockorder generation=modern peerdirect_support=1 persistent_api_support=1\n\
             scenario rel_lockorder generation=modern peerdirect_support=1\n",
            "REPORT rel_lockorder[generation=modern,peerdirect_support=1,persistent_api_support=1] pass expected=clean \
             lockdep=clean edge=- hang=none p_get_pages=ok p_pinned=ok p_dma_map=ok \
             p_activate=ok p_live=ok p_dereg=ok\n\
             WARNING: possible circular locking dependency detected\n\
             REPORT rel_lockorder[generation=modern,peerdirect_support=1] fail expected=inversion \
             lockdep=reported edge=registration hang=dma_map p_get_pages=ok p_pinned=ok \
             p_dma_map=hang reason=deadlock\nPEERMEM-SUITE-DONE rel-lockorder-modern-pds1\n",
        );
        let r = build(&[v]);
        assert_eq!(r.lock_order_matrix.len(), 2);
        let c = &r.lock_order_matrix[0];
        assert_eq!((c.pers.as_str(), c.hang.as_str()), ("0", "dma_map"));
        assert_eq!(c.edge, "registration");
        assert_eq!(c.phases[2], ("dma_map".to_string(), "hang".to_string()));
        assert_eq!(c.phases[3], ("activate".to_string(), "-".to_string()));
        assert_eq!(c.result, "fail");
        let c = &r.lock_order_matrix[1];
        assert_eq!((c.pers.as_str(), c.observed.as_str()), ("1", "clean"));
        assert!(c.phases.iter().all(|(_, v)| v == "ok"));
        assert!(render(&r).contains("deadlock"));
    }

    #[test]
    fn splits_ids() {
        assert_eq!(split_id("rel_x"), ("rel_x", vec![]));
        assert_eq!(split_id("rel_x[]"), ("rel_x", vec![]));
        assert_eq!(split_id("rel_x[a=1,b=2]"), ("rel_x", vec!["a=1", "b=2"]));
    }
}
