// SPDX-License-Identifier: GPL-2.0
//! The raw results: one JSON object per `BENCH-RESULT` line of the guest
//! (`simtest bench ...`, tests/sim-client/src/bin/simtest/bench*.rs).

use std::collections::BTreeMap;

use serde_json::Value;

/// The client phases the core times, in call order.
pub const PHASES: [&str; 7] = [
    "acquire",
    "get_pages",
    "dma_map",
    "get_page_size",
    "dma_unmap",
    "put_pages",
    "release",
];

/// What every result carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// `client/mode[+param=value...]`, e.g. `rust/persistent`.
    pub label: String,
    pub size: u64,
    pub gpu_pages: u64,
    /// Backing pages in scale mode, 0 when every GPU page is backed.
    pub scale: u64,
}

#[derive(Debug, Clone)]
pub struct Cycle {
    pub head: Head,
    pub sg_entries: u64,
    pub reg_ns: Vec<f64>,
    pub dereg_ns: Vec<f64>,
    /// Sum of the phases of one cycle (in-kernel time inside the client).
    pub client_ns: Vec<f64>,
    pub phases: BTreeMap<String, Vec<f64>>,
}

impl Cycle {
    /// Userspace-timed reg + dereg of each iteration.
    pub fn cycle_ns(&self) -> Vec<f64> {
        self.reg_ns
            .iter()
            .zip(&self.dereg_ns)
            .map(|(a, b)| a + b)
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct Invalidate {
    pub head: Head,
    pub iters: u64,
    pub callbacks: u64,
    pub mrs_invalidated: u64,
    pub callback_ns: Vec<f64>,
    pub free_ns: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct Throughput {
    pub head: Head,
    pub threads: u64,
    pub cycles_per_s: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct Memory {
    pub head: Head,
    pub live: u64,
    pub sg_entries: u64,
    pub client_bytes_per_reg: u64,
    pub trace_lost: u64,
    pub allocs_without_stack: u64,
    /// Owner (client, provider, core, control, kernel) -> bytes per registration.
    pub owners: BTreeMap<String, OwnerMem>,
}

#[derive(Debug, Clone, Default)]
pub struct OwnerMem {
    pub bytes_per_reg: u64,
    pub left_after_dereg: u64,
}

#[derive(Debug, Default)]
pub struct Results {
    pub cycles: Vec<Cycle>,
    pub invalidations: Vec<Invalidate>,
    pub throughputs: Vec<Throughput>,
    pub memory: Vec<Memory>,
    /// Lines that were not a result we know (garbled by console output).
    /// Results of the same bench (label, size, threads) from several rounds
    /// are pooled: their samples are appended.
    pub skipped: Vec<String>,
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k)?.as_u64()
}

fn floats(v: &Value, k: &str) -> Option<Vec<f64>> {
    v.get(k)?.as_array()?.iter().map(Value::as_f64).collect()
}

fn head(v: &Value) -> Option<Head> {
    Some(Head {
        label: v.get("label")?.as_str()?.to_string(),
        size: u(v, "size")?,
        gpu_pages: u(v, "gpu_pages")?,
        scale: u(v, "scale").unwrap_or(0),
    })
}

impl Results {
    /// Parses `BENCH-RESULT {json}` lines (the prefix is optional).
    pub fn parse(text: &str) -> Results {
        let mut r = Results::default();
        for line in text.lines() {
            let l = line.trim();
            if l.is_empty() {
                continue;
            }
            let payload = match l.find("BENCH-RESULT ") {
                Some(i) => &l[i + "BENCH-RESULT ".len()..],
                None => l,
            };
            if r.add(payload).is_none() {
                r.skipped.push(l.chars().take(120).collect());
            }
        }
        r
    }

    fn add(&mut self, payload: &str) -> Option<()> {
        let v: Value = serde_json::from_str(payload).ok()?;
        let h = head(&v)?;
        match v.get("kind")?.as_str()? {
            "cycle" => {
                let mut phases = BTreeMap::new();
                let p = v.get("phases")?.as_object()?;
                for (name, samples) in p {
                    let s: Option<Vec<f64>> =
                        samples.as_array()?.iter().map(Value::as_f64).collect();
                    phases.insert(name.clone(), s?);
                }
                let c = Cycle {
                    head: h,
                    sg_entries: u(&v, "sg_entries")?,
                    reg_ns: floats(&v, "reg_ns")?,
                    dereg_ns: floats(&v, "dereg_ns")?,
                    client_ns: floats(&v, "client_ns")?,
                    phases,
                };
                match self.cycles.iter_mut().find(|x| x.head == c.head) {
                    Some(x) => {
                        x.reg_ns.extend(c.reg_ns);
                        x.dereg_ns.extend(c.dereg_ns);
                        x.client_ns.extend(c.client_ns);
                        for (p, s) in c.phases {
                            x.phases.entry(p).or_default().extend(s);
                        }
                    }
                    None => self.cycles.push(c),
                }
            }
            "invalidate" => {
                let i = Invalidate {
                    head: h,
                    iters: u(&v, "iters")?,
                    callbacks: u(&v, "callbacks")?,
                    mrs_invalidated: u(&v, "mrs_invalidated")?,
                    callback_ns: floats(&v, "callback_ns")?,
                    free_ns: floats(&v, "free_ns")?,
                };
                match self.invalidations.iter_mut().find(|x| x.head == i.head) {
                    Some(x) => {
                        x.iters += i.iters;
                        x.callbacks += i.callbacks;
                        x.mrs_invalidated += i.mrs_invalidated;
                        x.callback_ns.extend(i.callback_ns);
                        x.free_ns.extend(i.free_ns);
                    }
                    None => self.invalidations.push(i),
                }
            }
            "throughput" => {
                let t = Throughput {
                    head: h,
                    threads: u(&v, "threads")?,
                    cycles_per_s: floats(&v, "cycles_per_s")?,
                };
                match self
                    .throughputs
                    .iter_mut()
                    .find(|x| x.head == t.head && x.threads == t.threads)
                {
                    Some(x) => x.cycles_per_s.extend(t.cycles_per_s),
                    None => self.throughputs.push(t),
                }
            }
            "memory" => {
                let mut owners = BTreeMap::new();
                for (o, m) in v.get("owners")?.as_object()? {
                    owners.insert(
                        o.clone(),
                        OwnerMem {
                            bytes_per_reg: u(m, "bytes_per_reg")?,
                            left_after_dereg: u(m, "left_after_dereg")?,
                        },
                    );
                }
                self.memory.push(Memory {
                    head: h,
                    live: u(&v, "live")?,
                    sg_entries: u(&v, "sg_entries")?,
                    client_bytes_per_reg: u(&v, "client_bytes_per_reg")?,
                    trace_lost: u(&v, "trace_lost")?,
                    allocs_without_stack: u(&v, "allocs_without_stack")?,
                    owners,
                });
            }
            _ => return None,
        }
        Some(())
    }

    /// Every label, in order of first appearance.
    pub fn labels(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let all = self
            .cycles
            .iter()
            .map(|c| &c.head)
            .chain(self.invalidations.iter().map(|c| &c.head))
            .chain(self.throughputs.iter().map(|c| &c.head))
            .chain(self.memory.iter().map(|c| &c.head));
        for h in all {
            if !out.contains(&h.label) {
                out.push(h.label.clone());
            }
        }
        out
    }
}

/// The baseline of a label: the reference client in the same mode
/// (`rust/persistent+coalesce_sg=1` -> `ref/persistent`); None for the
/// reference client itself.
pub fn baseline_of(label: &str) -> Option<String> {
    let (client, rest) = label.split_once('/')?;
    if client == "ref" {
        return None;
    }
    let mode = rest.split('+').next().unwrap_or(rest);
    Some(format!("ref/{mode}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind_and_skips_garbage() {
        let text = r#"
BENCH-RESULT {"kind":"cycle","label":"rust/persistent","size":65536,"gpu_pages":1,"scale":0,"client":"nv_mem","sg_entries":1,"iters":2,"reg_ns":[10,20],"dereg_ns":[5,5],"client_ns":[8,9],"phases":{"acquire":[1,2],"release":[1,1]}}
BENCH-RESULT {"kind":"invalidate","label":"ref/invalidating","size":65536,"gpu_pages":1,"scale":0,"client":"nv_mem","iters":2,"callbacks":2,"mrs_invalidated":2,"callback_ns":[7,8],"free_ns":[9,9]}
BENCH-RESULT {"kind":"throughput","label":"rust/persistent","size":65536,"gpu_pages":1,"scale":0,"threads":2,"ms":100,"cycles":[10],"cycles_per_s":[100.0]}
BENCH-RESULT {"kind":"memory","label":"rust/persistent","size":65536,"gpu_pages":1,"scale":0,"live":4,"sg_entries":1,"client_bytes_per_reg":200,"client_objects_per_reg_x100":300,"trace_events":9,"trace_lost":0,"allocs_without_stack":0,"owners":{"client":{"objects":12,"bytes":800,"bytes_req":700,"bytes_per_reg":200,"freed_at_dereg":12,"left_after_dereg":0,"left_bytes_after_dereg":0}}}
BENCH-RESULT {"kind":"cycle","label":"rust/persi[   12.3] printk
"#;
        let r = Results::parse(text);
        assert_eq!(r.cycles.len(), 1);
        assert_eq!(r.cycles[0].cycle_ns(), vec![15.0, 25.0]);
        assert_eq!(r.invalidations[0].callback_ns, vec![7.0, 8.0]);
        assert_eq!(r.throughputs[0].threads, 2);
        assert_eq!(r.memory[0].owners["client"].bytes_per_reg, 200);
        assert_eq!(r.skipped.len(), 1);
        assert_eq!(r.labels(), vec!["rust/persistent", "ref/invalidating"]);
    }

    #[test]
    fn pools_rounds() {
        let line = r#"BENCH-RESULT {"kind":"cycle","label":"rust/persistent","size":65536,"gpu_pages":1,"scale":0,"sg_entries":1,"reg_ns":[10],"dereg_ns":[5],"client_ns":[8],"phases":{"acquire":[1]}}"#;
        let r = Results::parse(&format!("{line}\n{line}\n"));
        assert_eq!(r.cycles.len(), 1);
        assert_eq!(r.cycles[0].client_ns, vec![8.0, 8.0]);
        assert_eq!(r.cycles[0].phases["acquire"], vec![1.0, 1.0]);
    }

    #[test]
    fn baselines() {
        assert_eq!(
            baseline_of("rust/persistent").as_deref(),
            Some("ref/persistent")
        );
        assert_eq!(
            baseline_of("rust/invalidating+coalesce_sg=1").as_deref(),
            Some("ref/invalidating")
        );
        assert_eq!(baseline_of("ref/persistent"), None);
        assert_eq!(baseline_of("nonsense"), None);
    }
}
