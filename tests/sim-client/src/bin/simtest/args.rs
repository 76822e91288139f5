// SPDX-License-Identifier: GPL-2.0
//! A tiny argument parser: positionals plus declared `--name value` options
//! and `--flag`s. Unknown options are errors (no silent typos in scenarios).

use std::collections::BTreeMap;

/// Parsed arguments of one subcommand.
#[derive(Debug, Default)]
pub struct Args {
    pub pos: Vec<String>,
    values: BTreeMap<String, String>,
    flags: Vec<String>,
}

/// A usage error, printed with the subcommand's synopsis; exit code 2.
#[derive(Debug)]
pub struct Usage(pub String);

impl Args {
    /// Splits `argv` using the declared valued options and flags (names
    /// without the leading `--`). `--name=value` is accepted too.
    pub fn parse(argv: &[String], valued: &[&str], flags: &[&str]) -> Result<Self, Usage> {
        let mut a = Args::default();
        let mut it = argv.iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                a.pos.extend(it.by_ref().cloned());
                break;
            }
            let Some(name) = arg.strip_prefix("--") else {
                a.pos.push(arg.clone());
                continue;
            };
            let (name, inline) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (name, None),
            };
            if valued.contains(&name) {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| Usage(format!("option --{name} needs a value")))?,
                };
                a.values.insert(name.to_string(), v);
            } else if flags.contains(&name) {
                if inline.is_some() {
                    return Err(Usage(format!("option --{name} takes no value")));
                }
                a.flags.push(name.to_string());
            } else {
                return Err(Usage(format!("unknown option --{name}")));
            }
        }
        Ok(a)
    }

    /// True when `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// The value of `--name`, if given.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name` parsed with `f`, or `default`.
    pub fn get<T>(
        &self,
        name: &str,
        default: T,
        f: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, Usage> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => f(v).map_err(|e| Usage(format!("--{name}: {e}"))),
        }
    }

    /// Requires between `min` and `max` positionals.
    pub fn expect_pos(&self, min: usize, max: usize) -> Result<(), Usage> {
        if self.pos.len() < min {
            return Err(Usage(format!(
                "expected at least {min} argument(s), got {}",
                self.pos.len()
            )));
        }
        if self.pos.len() > max {
            return Err(Usage(format!(
                "unexpected argument {:?}",
                self.pos[max.min(self.pos.len() - 1)]
            )));
        }
        Ok(())
    }

    /// Positional `i` parsed with `f`; `what` names it in errors.
    pub fn pos_as<T>(
        &self,
        i: usize,
        what: &str,
        f: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, Usage> {
        let s = self
            .pos
            .get(i)
            .ok_or_else(|| Usage(format!("missing {what}")))?;
        f(s).map_err(|e| Usage(format!("{what}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_mixed() {
        let a = Args::parse(
            &v(&["1", "--threads", "8", "--seed=3", "--info", "2"]),
            &["threads", "seed"],
            &["info"],
        )
        .unwrap();
        assert_eq!(a.pos, v(&["1", "2"]));
        assert_eq!(a.value("threads"), Some("8"));
        assert_eq!(a.value("seed"), Some("3"));
        assert!(a.flag("info"));
        assert!(!a.flag("json"));
    }

    #[test]
    fn rejects_bad() {
        assert!(Args::parse(&v(&["--nope"]), &[], &[]).is_err());
        assert!(Args::parse(&v(&["--threads"]), &["threads"], &[]).is_err());
        assert!(Args::parse(&v(&["--info=1"]), &[], &["info"]).is_err());
        let a = Args::parse(&v(&["a", "b", "c"]), &[], &[]).unwrap();
        assert!(a.expect_pos(1, 2).is_err());
        assert!(a.expect_pos(4, 5).is_err());
        assert!(a.expect_pos(3, 3).is_ok());
    }
}
