//! A suite cut down to what one kernel of the matrix can run.
//!
//! Two kinds of line cannot be met on every kernel:
//! - a line whose only detector is KASAN, on a kernel without KASAN: a
//!   tooth (`caught` line) that names a KASAN report, or a run of our
//!   module marked `needs kasan` (its bug is a use-after-free nothing else
//!   reports). A GCC-built kernel with Rust has no KASAN (`init/Kconfig`:
//!   `RUST depends on !KASAN || CC_IS_CLANG`), and KFENCE, which stands in
//!   for it there, samples one allocation every 10 ms, so a planted
//!   use-after-free may go unreported (it did, in every round of a 7.2
//!   boot): the tooth would fail and our run would pass, both for no
//!   reason of the module's;
//! - a run of NVIDIA's own module (`client=nvNNN`), on a kernel it was not
//!   built for (only the primary one);
//! - a check of the simulated driver with the fixtures' C reference client
//!   (`client=refclient`), on any kernel but the primary one: it proves the
//!   test bed's simulator, whose code is the same C on every kernel, not
//!   the module, and one kernel proves it once.
//!
//! Such a scenario line, with its `caught` and `needs` lines, becomes one
//! `cut` line that says why: the verdict counts it as a skipped test of
//! that name, so a cut suite shows in `N passed, N failed, N skipped` how
//! much of it the kernel could not run. Every other line, comments
//! included, stays as it was.

/// What [`cut`] kept, and how much of each kind it turned into `cut` lines.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// The suite text, each dropped scenario a `cut` line.
    pub text: String,
    /// Scenarios cut because KASAN is their only detector.
    pub kasan_only: usize,
    /// Scenarios cut because they run NVIDIA's module.
    pub nvidia_runs: usize,
    /// Scenarios cut because they check the simulator, not the module.
    pub fixture_checks: usize,
}

/// What the kernel the suite boots on has.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// KASAN is built in.
    pub kasan: bool,
    /// NVIDIA's module was built for it.
    pub nvidia: bool,
    /// The primary kernel of the test bed (every line runs there).
    pub primary: bool,
}

/// Why a line whose only detector is KASAN is skipped.
pub const WHY_KASAN: &str = "this kernel has no KASAN, the only detector of this line's bug";
/// Why a run of NVIDIA's module is skipped.
pub const WHY_NVIDIA: &str = "NVIDIA's module is built for the primary kernel only";

/// Why a check of the simulator with the C reference client is skipped.
pub const WHY_FIXTURE: &str =
    "a check of the simulator with the C reference client, not of the module: the primary kernel runs it";

/// Whether a scenario line checks the simulator with the reference client.
fn checks_fixtures(scenario: &str) -> bool {
    scenario.split_whitespace().any(|w| w == "client=refclient")
}

/// The first word of a line, comments and indentation aside.
fn keyword(line: &str) -> &str {
    line.split('#')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next()
        .unwrap_or("")
}

/// Whether a scenario line runs NVIDIA's module (`client=nv` and a digit).
fn runs_nvidia(scenario: &str) -> bool {
    scenario.split_whitespace().any(|w| {
        w.strip_prefix("client=nv")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// The `cut` line that stands for a scenario line and its `caught` and
/// `needs` lines.
fn cut_line(group: &[&str], why: &str) -> String {
    let words: Vec<&str> = group[0]
        .split('#')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .collect();
    let kind = if group[1..].iter().any(|l| keyword(l) == "caught") {
        "teeth"
    } else {
        "scenario"
    };
    format!("cut {kind} \"{why}\" {}\n", words.join(" "))
}

/// `text` as `kernel` can run it.
pub fn cut(text: &str, kernel: Kernel) -> Cut {
    let mut out = Cut::default();
    // A scenario line and the `caught` and `needs` lines right after it.
    let mut group: Vec<&str> = Vec::new();
    let flush = |group: &mut Vec<&str>, out: &mut Cut| {
        let Some(scenario) = group.first() else {
            return;
        };
        let kasan_only = group[1..].iter().any(|l| {
            (keyword(l) == "caught" && l.contains("KASAN:"))
                || (keyword(l) == "needs" && l.split_whitespace().nth(1) == Some("kasan"))
        });
        if !kernel.nvidia && runs_nvidia(scenario) {
            out.nvidia_runs += 1;
            out.text.push_str(&cut_line(group, WHY_NVIDIA));
        } else if !kernel.primary && checks_fixtures(scenario) {
            out.fixture_checks += 1;
            out.text.push_str(&cut_line(group, WHY_FIXTURE));
        } else if !kernel.kasan && kasan_only {
            out.kasan_only += 1;
            out.text.push_str(&cut_line(group, WHY_KASAN));
        } else {
            for line in group.iter() {
                out.text.push_str(line);
                out.text.push('\n');
            }
        }
        group.clear();
    };
    for line in text.lines() {
        match keyword(line) {
            "scenario" => {
                flush(&mut group, &mut out);
                group.push(line);
            }
            "caught" | "needs" if !group.is_empty() => group.push(line),
            _ => {
                flush(&mut group, &mut out);
                out.text.push_str(line);
                out.text.push('\n');
            }
        }
    }
    flush(&mut group, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Suite;

    const SUITE: &str = "# teeth\ntimeout 900\n\
        scenario rel_field bug=uaf_window\n\
        needs kasan\n\
        scenario rel_field bug=silent_load\n\
        scenario rel_field bug=uaf_window client=ref defects=uaf_window\n\
        caught \"KASAN: slab-use-after-free in ref_free_cb\"\n\
        scenario rel_field bug=silent_load client=ref defects=silent_load\n\
        caught \"the load failed silently\"\n\
        # NVIDIA's: no KASAN needed for this one\n\
        scenario rel_field bug=name_conflict client=nv555\n\
        caught \"the refusal does not say what to unload\"\n\
        scenario rel_field bug=uaf_window client=nv535 # the 535 run\n\
        caught \"KASAN: slab-use-after-free in nv_get_p2p_free_callback\"\n";

    const ALL: Kernel = Kernel {
        kasan: true,
        nvidia: true,
        primary: true,
    };

    #[test]
    fn a_kernel_with_everything_runs_everything() {
        let c = cut(SUITE, ALL);
        assert_eq!(c.text, SUITE);
        assert_eq!((c.kasan_only, c.nvidia_runs), (0, 0));
    }

    #[test]
    fn without_kasan_its_only_lines_become_skips() {
        let c = cut(
            SUITE,
            Kernel {
                kasan: false,
                ..ALL
            },
        );
        assert_eq!((c.kasan_only, c.nvidia_runs), (3, 0));
        assert!(!c.text.contains("KASAN:"));
        assert!(!c.text.contains("needs kasan"));
        assert!(!c.text.contains("scenario rel_field bug=uaf_window"));
        // each became a cut line that says why, with its scenario's words
        assert!(c.text.contains(&format!(
            "cut scenario \"{WHY_KASAN}\" rel_field bug=uaf_window\n"
        )));
        assert!(c.text.contains(&format!(
            "cut teeth \"{WHY_KASAN}\" rel_field bug=uaf_window client=ref defects=uaf_window\n"
        )));
        assert!(c.text.contains(&format!(
            "cut teeth \"{WHY_KASAN}\" rel_field bug=uaf_window client=nv535\n"
        )));
        // the rest, comments and the other teeth included, stays
        assert!(c.text.contains("scenario rel_field bug=silent_load\n"));
        assert!(c.text.contains("caught \"the load failed silently\""));
        assert!(c.text.contains("client=nv555\ncaught \"the refusal"));
        assert!(c.text.starts_with("# teeth\ntimeout 900\n"));
        let s = Suite::parse("t", &c.text).unwrap();
        assert_eq!(s.cut.len(), 3);
        assert_eq!(s.cut[0].scenario, "rel_field[bug=uaf_window]");
        assert!(!s.cut[0].teeth && s.cut[1].teeth);
        assert!(s.needs_kasan.is_empty());
    }

    #[test]
    fn without_nvidia_its_runs_become_skips() {
        let c = cut(
            SUITE,
            Kernel {
                nvidia: false,
                ..ALL
            },
        );
        assert_eq!((c.kasan_only, c.nvidia_runs), (0, 2));
        assert!(!c
            .text
            .contains("scenario rel_field bug=name_conflict client=nv"));
        assert!(!c.text.contains("unload\""));
        assert!(c.text.contains(&format!(
            "cut teeth \"{WHY_NVIDIA}\" rel_field bug=name_conflict client=nv555\n"
        )));
        assert!(c.text.contains("ref_free_cb"));
        assert!(c
            .text
            .contains("scenario rel_field bug=uaf_window\nneeds kasan\n"));
    }

    #[test]
    fn off_the_primary_kernel_the_simulator_checks_become_skips() {
        let text = "scenario driver_matrix client=module driver=r525
            scenario driver_matrix client=refclient driver=r525
            scenario rel_field bug=x client=ref defects=x
caught \"y\"
";
        let c = cut(
            text,
            Kernel {
                primary: false,
                ..ALL
            },
        );
        assert_eq!(c.fixture_checks, 1);
        assert!(c.text.contains(&format!(
            "cut scenario \"{WHY_FIXTURE}\" driver_matrix client=refclient driver=r525\n"
        )));
        // our module's run and the reference client's teeth stay
        assert!(c
            .text
            .contains("scenario driver_matrix client=module driver=r525\n"));
        assert!(c.text.contains("client=ref defects=x\ncaught"));
        assert_eq!(cut(text, ALL).text, text);
    }

    /// The simulator's checks with the reference client, booted on demand
    /// on another kernel, become skips there, each one.
    #[test]
    fn the_reference_client_suite_off_the_primary_kernel() {
        let path = format!(
            "{}/../vm/suites/driver-matrix-refclient.suite",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let c = cut(
            &text,
            Kernel {
                primary: false,
                ..ALL
            },
        );
        assert_eq!(c.fixture_checks, 12);
        let after = Suite::parse("driver-matrix-refclient", &c.text).unwrap();
        assert!(after.scenarios.is_empty());
        assert_eq!(cut(&text, ALL).text, text);
    }

    #[test]
    fn a_client_named_nv_without_a_release_is_not_nvidias() {
        let text = "scenario x client=nvx\ncaught \"y\"\n";
        let c = cut(
            text,
            Kernel {
                nvidia: false,
                ..ALL
            },
        );
        assert_eq!(c.text, text);
    }

    /// The suites the cut is for: on a kernel without KASAN or NVIDIA's
    /// build, no line that needs either runs, and every line that went is
    /// a cut line of the same scenario: the scenario count is unchanged.
    #[test]
    fn the_matrix_suites_on_a_kernel_without_kasan() {
        for name in [
            "field-teeth",
            "rel-races",
            "rel-races-module",
            "module",
            "module-matrix",
            "driver-matrix",
        ] {
            let path = format!("{}/../vm/suites/{name}.suite", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let before = Suite::parse(name, &text).unwrap();
            let c = cut(
                &text,
                Kernel {
                    kasan: false,
                    nvidia: false,
                    primary: false,
                },
            );
            let after = Suite::parse(name, &c.text).unwrap();
            assert!(after.teeth.iter().all(|t| !t.pattern.contains("KASAN:")));
            assert!(after.scenarios.iter().all(|s| !s.contains("client=nv")));
            assert!(after.needs_kasan.is_empty());
            assert!(after
                .scenarios
                .iter()
                .all(|s| !s.contains("client=refclient")));
            assert_eq!(
                after.cut.len(),
                c.kasan_only + c.nvidia_runs + c.fixture_checks,
                "{name}"
            );
            if name == "driver-matrix" {
                assert!(after.scenarios.iter().any(|s| s.contains("client=module")));
            }
            assert_eq!(
                after.scenarios.len() + after.cut.len(),
                before.scenarios.len(),
                "{name}"
            );
            let mut ids: Vec<&String> = after
                .scenarios
                .iter()
                .chain(after.cut.iter().map(|c| &c.scenario))
                .collect();
            let mut want: Vec<&String> = before.scenarios.iter().collect();
            ids.sort();
            want.sort();
            assert_eq!(ids, want, "{name}: the cut renamed a scenario");
            if name == "field-teeth" {
                assert!(c.kasan_only > 0);
                // our own runs whose bug only KASAN sees are skipped too
                assert!(after
                    .cut
                    .iter()
                    .any(|l| !l.teeth && l.scenario.starts_with("rel_field[bug=uaf_window")));
                assert!(after.teeth.len() < before.teeth.len() && !after.teeth.is_empty());
            }
        }
    }
}
