//! Suite files: what one VM boot must load, run and show.
//!
//! The format is documented in `tests/vm/README.md`.

use std::fmt;

/// An expected kernel splat of a suite that is meant to provoke one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedSplat {
    /// Free-form kind (`lockdep`, `warn`, ...), used in reports only.
    pub kind: String,
    /// Substring that identifies the splat's headline in the log.
    pub pattern: String,
    /// For a lockdep cycle (`classes=A,B` on the line): the lock classes
    /// its dependency chain must consist of, no more and no fewer (a cycle
    /// through other classes is a new bug, not the expected report). Empty:
    /// any report with the headline.
    pub classes: Vec<String>,
}

impl ExpectedSplat {
    /// Whether a splat whose report named `classes` is this one (the
    /// headline already matched).
    pub fn accepts(&self, classes: &[String]) -> bool {
        if self.classes.is_empty() {
            return true;
        }
        let mut want: Vec<&str> = self.classes.iter().map(String::as_str).collect();
        let mut got: Vec<&str> = classes.iter().map(String::as_str).collect();
        want.sort_unstable();
        want.dedup();
        got.sort_unstable();
        got.dedup();
        want == got
    }
}

/// One parsed suite file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suite {
    /// Suite name (the file stem).
    pub name: String,
    /// Intel IOMMU in translation mode.
    pub iommu: bool,
    /// Seconds before the host kills the VM.
    pub timeout_s: u64,
    /// Guest memory in MiB.
    pub memory_mib: u64,
    /// Virtual CPUs. Two where a scenario races work on two CPUs; one
    /// where every step runs after the last: under TCG a second vCPU
    /// thread cost five module scenarios ~40% more host CPU (measured on
    /// a busy 2-core host).
    pub cpus: u32,
    /// KUnit suites that must report `ok`: (module file, suite name).
    pub kunit: Vec<(String, String)>,
    /// Scenario ids that must report `pass`.
    pub scenarios: Vec<String>,
    /// Splats this boot must show; any other splat fails it.
    pub expected_splats: Vec<ExpectedSplat>,
    /// Scenarios run against a client with a field bug on purpose (a
    /// `caught "PATTERN"` line after the scenario line): each must FAIL,
    /// with PATTERN in its reason. Splats during them are theirs.
    pub teeth: Vec<Teeth>,
    /// Scenarios whose bug only KASAN reports (a `needs kasan` line after
    /// the scenario line): on a kernel without KASAN they would pass
    /// whatever the module did, so the cut for such a kernel skips them.
    pub needs_kasan: Vec<String>,
    /// Lines the cut for this kernel left out (`cut` lines, written by
    /// `vm-verdict cut-suite`): each is a skipped test, with its reason.
    pub cut: Vec<CutLine>,
}

/// A scenario line the kernel cannot run, kept as a skipped test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutLine {
    /// The id the scenario would have reported under.
    pub scenario: String,
    /// It had a `caught` line: its test would have been a `teeth:` one.
    pub teeth: bool,
    /// Why this kernel cannot run it.
    pub why: String,
}

/// A scenario that must catch a planted defect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teeth {
    /// The scenario id.
    pub scenario: String,
    /// What its failure reason must contain.
    pub pattern: String,
}

impl Suite {
    /// The planted-defect expectation of scenario `id`, if it has one.
    pub fn teeth_of(&self, id: &str) -> Option<&Teeth> {
        self.teeth.iter().find(|t| t.scenario == id)
    }
}

/// A line of a suite file that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SuiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The knobs the suites once spelt two ways, short name first: a scenario
/// line takes only the long one, the name the scenarios parse.
const KNOB_SPELLINGS: &[(&str, &str)] = &[
    ("gen", "generation"),
    ("pds", "peerdirect_support"),
    ("pers", "persistent_api_support"),
];

/// Why scenario argument `arg` is refused: a knob by its short name.
fn short_knob(arg: &str) -> Option<String> {
    let key = arg.split_once('=')?.0;
    KNOB_SPELLINGS
        .iter()
        .find(|(short, _)| *short == key)
        .map(|(short, long)| format!("scenario argument {arg}: the knob {short} is spelt {long}="))
}

/// The id a scenario reports under: its name, then its arguments in
/// brackets joined with `,` (`dma[generation=modern,peerdirect_support=0]`).
pub fn scenario_id(name: &str, args: &[&str]) -> String {
    if args.is_empty() {
        name.to_string()
    } else {
        format!("{}[{}]", name, args.join(","))
    }
}

/// Splits a directive line into words, honouring double quotes.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut have_word = false;
    for c in line.chars() {
        match c {
            '"' => {
                in_quotes = !in_quotes;
                have_word = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if have_word {
                    out.push(std::mem::take(&mut cur));
                    have_word = false;
                }
            }
            c => {
                cur.push(c);
                have_word = true;
            }
        }
    }
    if in_quotes {
        return Err("unterminated quote".into());
    }
    if have_word {
        out.push(cur);
    }
    Ok(out)
}

impl Suite {
    /// Parses a suite file's text.
    pub fn parse(name: &str, text: &str) -> Result<Suite, SuiteError> {
        let mut suite = Suite {
            name: name.to_string(),
            timeout_s: 300,
            memory_mib: 512,
            cpus: 2,
            ..Suite::default()
        };
        for (idx, raw) in text.lines().enumerate() {
            let line_no = idx + 1;
            let err = |message: String| SuiteError {
                line: line_no,
                message,
            };
            let content = raw.split('#').next().unwrap_or("").trim();
            // A '#' inside quotes would be cut by the split above; patterns
            // with '#' are not supported and none are needed.
            if content.is_empty() {
                continue;
            }
            let w = words(content).map_err(err)?;
            let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
            match (w[0].as_str(), args.as_slice()) {
                ("iommu", ["on"]) => suite.iommu = true,
                ("iommu", ["off"]) => suite.iommu = false,
                ("timeout", [n]) => {
                    suite.timeout_s = n
                        .parse()
                        .map_err(|_| err(format!("timeout: '{n}' is not a number of seconds")))?
                }
                ("memory", [n]) => {
                    suite.memory_mib = n
                        .parse()
                        .map_err(|_| err(format!("memory: '{n}' is not a number of MiB")))?
                }
                ("cpus", [n]) => {
                    suite.cpus = match n.parse() {
                        Ok(c @ 1..=8) => c,
                        _ => return Err(err(format!("cpus: '{n}' is not a number from 1 to 8"))),
                    }
                }
                ("kunit", [module, name]) => {
                    suite.kunit.push((module.to_string(), name.to_string()))
                }
                ("scenario", [name, rest @ ..]) => {
                    if let Some(why) = rest.iter().find_map(|a| short_knob(a)) {
                        return Err(err(why));
                    }
                    suite.scenarios.push(scenario_id(name, rest))
                }
                ("expect_splat", [kind, pattern, rest @ ..]) => {
                    let classes = match rest {
                        [] => Vec::new(),
                        [c] if c.starts_with("classes=") => {
                            let list: Vec<String> = c["classes=".len()..]
                                .split(',')
                                .map(str::trim)
                                .filter(|c| !c.is_empty())
                                .map(String::from)
                                .collect();
                            if list.is_empty() {
                                return Err(err("expect_splat: classes= names no class".into()));
                            }
                            list
                        }
                        _ => {
                            return Err(err(format!(
                                "expect_splat: '{}' is not classes=A,B",
                                rest.join(" ")
                            )))
                        }
                    };
                    suite.expected_splats.push(ExpectedSplat {
                        kind: kind.to_string(),
                        pattern: pattern.to_string(),
                        classes,
                    })
                }
                ("caught", [pattern]) => {
                    let Some(scenario) = suite.scenarios.last().cloned() else {
                        return Err(err("caught: no scenario line before it".into()));
                    };
                    if suite.teeth_of(&scenario).is_some() {
                        return Err(err(format!("caught: {scenario} has one already")));
                    }
                    suite.teeth.push(Teeth {
                        scenario,
                        pattern: pattern.to_string(),
                    });
                }
                ("needs", ["kasan"]) => {
                    let Some(scenario) = suite.scenarios.last().cloned() else {
                        return Err(err("needs: no scenario line before it".into()));
                    };
                    suite.needs_kasan.push(scenario);
                }
                ("needs", _) => {
                    return Err(err(format!(
                        "needs: '{}' is not a detector this harness knows (kasan)",
                        args.join(" ")
                    )))
                }
                ("cut", [kind @ ("scenario" | "teeth"), why, name, rest @ ..]) => {
                    if why.is_empty() {
                        return Err(err("cut: no reason given".into()));
                    }
                    suite.cut.push(CutLine {
                        scenario: scenario_id(name, rest),
                        teeth: *kind == "teeth",
                        why: why.to_string(),
                    })
                }
                ("cut", _) => {
                    return Err(err(
                        "cut: expected cut scenario|teeth \"WHY\" NAME [ARGS]".into()
                    ))
                }
                ("scenario_timeout" | "cmdline" | "extra", _) => {}
                (d, _) => return Err(err(format!("unknown or malformed directive '{d}'"))),
            }
        }
        if suite.kunit.is_empty() && suite.scenarios.is_empty() && suite.cut.is_empty() {
            return Err(SuiteError {
                line: 0,
                message: "suite runs no test (no kunit or scenario line)".into(),
            });
        }
        Ok(suite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_directive() {
        let s = Suite::parse(
            "x",
            "# c\niommu on\ntimeout 60\nmemory 512\nkunit a.ko suite_a\n\
             scenario one\nscenario two k=v z=1 # trailing\n\
             expect_splat lockdep \"possible circular locking\"\n",
        )
        .unwrap();
        assert!(s.iommu);
        assert_eq!(s.timeout_s, 60);
        assert_eq!(s.memory_mib, 512);
        assert_eq!(s.cpus, 2);
        assert_eq!(s.kunit, vec![("a.ko".into(), "suite_a".into())]);
        assert_eq!(s.scenarios, vec!["one", "two[k=v,z=1]"]);
        assert_eq!(s.expected_splats[0].pattern, "possible circular locking");
        assert!(s.expected_splats[0].classes.is_empty());
    }

    #[test]
    fn expect_splat_with_lock_classes() {
        let s = Suite::parse(
            "x",
            "scenario a\nexpect_splat lockdep \"circular\" classes=&mr->lock,&psim.driver_lock\n",
        )
        .unwrap();
        let e = &s.expected_splats[0];
        assert_eq!(e.classes, vec!["&mr->lock", "&psim.driver_lock"]);
        let v = |l: &[&str]| l.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert!(e.accepts(&v(&["&psim.driver_lock", "&mr->lock"])));
        assert!(e.accepts(&v(&["&psim.driver_lock", "&mr->lock", "&mr->lock"])));
        assert!(!e.accepts(&v(&["&mr->lock"])));
        assert!(!e.accepts(&v(&["&mr->lock", "&psim.driver_lock", "other"])));
        assert!(!e.accepts(&[]));
        assert!(Suite::parse("x", "scenario a\nexpect_splat l \"c\" classes=\n").is_err());
        assert!(Suite::parse("x", "scenario a\nexpect_splat l \"c\" bogus=1\n").is_err());
    }

    #[test]
    fn caught_belongs_to_the_scenario_above() {
        let s = Suite::parse("x", "scenario a\nscenario b k=v\ncaught \"KASAN: x\"\n").unwrap();
        assert_eq!(s.teeth.len(), 1);
        assert_eq!(s.teeth[0].scenario, "b[k=v]");
        assert_eq!(s.teeth[0].pattern, "KASAN: x");
        assert!(s.teeth_of("a").is_none());
        assert!(Suite::parse("x", "caught \"y\"\nscenario a\n").is_err());
        assert!(Suite::parse("x", "scenario a\ncaught \"y\"\ncaught \"z\"\n").is_err());
    }

    /// Every `.suite` file under `dir`, build and result trees left out.
    fn suite_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !matches!(name.as_ref(), "target" | "results" | "build" | ".git") {
                    suite_files(&path, out);
                }
            } else if name.ends_with(".suite") {
                out.push(path);
            }
        }
    }

    /// Issue 30: a suite file the parser rejects makes its runner die before
    /// its verdict. Every one in the tree (make test's, make check's, the
    /// self-test's, the soak's, the bench's) parses, or this names the file
    /// and line.
    #[test]
    fn every_suite_file_in_the_tree_parses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        suite_files(&root, &mut files);
        files.sort();
        let mut errors = Vec::new();
        for f in &files {
            let shown = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{shown}: {e}"));
            let stem = f.file_stem().unwrap().to_string_lossy();
            match Suite::parse(&stem, &text) {
                Ok(_) => {}
                Err(e) if e.line == 0 => errors.push(format!("{shown}: {}", e.message)),
                Err(e) => errors.push(format!("{shown}:{}: {}", e.line, e.message)),
            }
        }
        assert!(
            errors.is_empty(),
            "suite files the verdict rejects:\n{}",
            errors.join("\n")
        );
        // Not vacuous: every directory of suites was found.
        for dir in [
            "tests/vm/suites/",
            "tests/vm/check/",
            "tests/vm/selftest/",
            "tests/vm/soak-suites/",
            "tests/bench/",
        ] {
            assert!(
                files
                    .iter()
                    .any(|f| f.strip_prefix(&root).is_ok_and(|p| p.starts_with(dir))),
                "no .suite file found under {dir} (searched {})",
                root.display()
            );
        }
    }

    #[test]
    fn needs_and_cut_lines() {
        let s = Suite::parse(
            "x",
            "scenario a k=v\nneeds kasan\ncut teeth \"no KASAN here\" b k=v\ncut scenario \"why\" c\n",
        )
        .unwrap();
        assert_eq!(s.needs_kasan, vec!["a[k=v]"]);
        assert_eq!(
            s.cut,
            vec![
                CutLine {
                    scenario: "b[k=v]".into(),
                    teeth: true,
                    why: "no KASAN here".into()
                },
                CutLine {
                    scenario: "c".into(),
                    teeth: false,
                    why: "why".into()
                }
            ]
        );
        // A suite whose every line was cut still parses: its tests are
        // the skips.
        assert!(Suite::parse("x", "cut scenario \"why\" c\n").is_ok());
        for bad in [
            "needs kasan\nscenario a\n",
            "scenario a\nneeds lockdep\n",
            "scenario a\ncut other \"w\" b\n",
            "scenario a\ncut teeth \"\" b\n",
            "scenario a\ncut teeth \"w\"\n",
        ] {
            assert!(Suite::parse("x", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_unknown_directive_and_empty_suite() {
        assert_eq!(Suite::parse("x", "bogus 1\n").unwrap_err().line, 1);
        assert!(Suite::parse("x", "iommu on\n").is_err());
        assert!(Suite::parse("x", "timeout soon\nscenario a\n").is_err());
        assert!(Suite::parse("x", "cpus 0\nscenario a\n").is_err());
        assert!(Suite::parse("x", "cpus two\nscenario a\n").is_err());
        assert_eq!(Suite::parse("x", "cpus 1\nscenario a\n").unwrap().cpus, 1);
        assert!(Suite::parse("x", "expect_splat a \"open\nscenario a\n").is_err());
    }

    #[test]
    fn knobs_take_one_spelling() {
        let ok = "scenario rel_race window=w generation=modern peerdirect_support=0 persistent_api_support=1\n";
        assert!(Suite::parse("x", ok).is_ok());
        for (short, long) in KNOB_SPELLINGS {
            let text = format!("scenario a\nscenario rel_race window=w {short}=1\n");
            let e = Suite::parse("x", &text).unwrap_err();
            assert_eq!(e.line, 2, "{short}");
            assert!(
                e.message.contains(&format!("spelt {long}=")),
                "{}",
                e.message
            );
        }
    }
}
