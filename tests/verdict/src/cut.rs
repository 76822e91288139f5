//! A suite cut down to what one kernel of the matrix can run.
//!
//! Two kinds of line cannot be met on every kernel:
//! - a tooth (`caught` line) that names a KASAN report, on a kernel without
//!   KASAN: a GCC-built kernel with Rust has none (`init/Kconfig`: `RUST
//!   depends on !KASAN || CC_IS_CLANG`), and KFENCE, which stands in for
//!   it there, samples one allocation every 10 ms, so a planted
//!   use-after-free may go unreported (it did, in every round of a 7.2
//!   boot) and the tooth fail for no fault of the scenario;
//! - a run of NVIDIA's own module (`client=nvNNN`), on a kernel it was not
//!   built for (only the primary one).
//!
//! Such a scenario line goes together with its `caught` lines; every other
//! line, comments included, stays as it was.

/// What [`cut`] kept, and how much of each kind it dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// The suite text without the dropped scenarios.
    pub text: String,
    /// Scenarios dropped because their tooth needs KASAN.
    pub kasan_teeth: usize,
    /// Scenarios dropped because they run NVIDIA's module.
    pub nvidia_runs: usize,
}

/// What the kernel the suite boots on has.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// KASAN is built in.
    pub kasan: bool,
    /// NVIDIA's module was built for it.
    pub nvidia: bool,
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

/// `text` as `kernel` can run it.
pub fn cut(text: &str, kernel: Kernel) -> Cut {
    let mut out = Cut::default();
    // A scenario line and the `caught` lines right after it.
    let mut group: Vec<&str> = Vec::new();
    let flush = |group: &mut Vec<&str>, out: &mut Cut| {
        let Some(scenario) = group.first() else {
            return;
        };
        if !kernel.nvidia && runs_nvidia(scenario) {
            out.nvidia_runs += 1;
        } else if !kernel.kasan && group[1..].iter().any(|c| c.contains("KASAN:")) {
            out.kasan_teeth += 1;
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
            "caught" if !group.is_empty() => group.push(line),
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
        scenario rel_field bug=uaf_window client=ref defects=uaf_window\n\
        caught \"KASAN: slab-use-after-free in ref_free_cb\"\n\
        scenario rel_field bug=silent_load client=ref defects=silent_load\n\
        caught \"the load failed silently\"\n\
        # NVIDIA's: no KASAN needed for this one\n\
        scenario rel_field bug=name_conflict client=nv555\n\
        caught \"the refusal does not say what to unload\"\n\
        scenario rel_field bug=uaf_window client=nv535\n\
        caught \"KASAN: slab-use-after-free in nv_get_p2p_free_callback\"\n";

    const ALL: Kernel = Kernel {
        kasan: true,
        nvidia: true,
    };

    #[test]
    fn a_kernel_with_everything_runs_everything() {
        let c = cut(SUITE, ALL);
        assert_eq!(c.text, SUITE);
        assert_eq!((c.kasan_teeth, c.nvidia_runs), (0, 0));
    }

    #[test]
    fn without_kasan_its_teeth_go_with_their_scenarios() {
        let c = cut(
            SUITE,
            Kernel {
                kasan: false,
                ..ALL
            },
        );
        assert_eq!((c.kasan_teeth, c.nvidia_runs), (2, 0));
        assert!(!c.text.contains("KASAN:"));
        assert!(!c.text.contains("defects=uaf_window"));
        assert!(!c.text.contains("client=nv535"));
        // the rest, comments and the other teeth included, stays
        assert!(c.text.contains("scenario rel_field bug=uaf_window\n"));
        assert!(c.text.contains("caught \"the load failed silently\""));
        assert!(c.text.contains("client=nv555\ncaught \"the refusal"));
        assert!(c.text.starts_with("# teeth\ntimeout 900\n"));
    }

    #[test]
    fn without_nvidia_its_runs_go_with_their_teeth() {
        let c = cut(
            SUITE,
            Kernel {
                nvidia: false,
                ..ALL
            },
        );
        assert_eq!((c.kasan_teeth, c.nvidia_runs), (0, 2));
        assert!(!c.text.contains("client=nv"));
        assert!(!c.text.contains("unload"));
        assert!(c.text.contains("ref_free_cb"));
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

    /// The suite the cut is for: on 7.2 (no KASAN, no NVIDIA build) no
    /// tooth that needs KASAN is left, and what is left parses.
    #[test]
    fn field_teeth_on_a_kernel_without_kasan() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../vm/suites/field-teeth.suite"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let before = Suite::parse("field-teeth", &text).unwrap();
        let c = cut(
            &text,
            Kernel {
                kasan: false,
                nvidia: false,
            },
        );
        let after = Suite::parse("field-teeth", &c.text).unwrap();
        assert!(c.kasan_teeth > 0 && c.nvidia_runs > 0);
        assert!(after.teeth.iter().all(|t| !t.pattern.contains("KASAN:")));
        assert!(after.scenarios.iter().all(|s| !s.contains("client=nv")));
        assert_eq!(
            after.scenarios.len() + c.kasan_teeth + c.nvidia_runs,
            before.scenarios.len()
        );
        assert!(after.teeth.len() < before.teeth.len() && !after.teeth.is_empty());
    }
}
