// SPDX-License-Identifier: GPL-2.0
//! `simtest`: command-line driver of /dev/peermem_sim for the VM scenarios.
//!
//! Output is made for busybox `sh` (conventions of
//! `docs/lab-notes/simtest-commands.md`): on success ONE stdout line of
//! `key=value` words (`eval "$(simtest gpu-alloc 64K)"` sets `va`); `ok=1`
//! when there is nothing else to say. `stress` and `race` print several
//! `key=value` lines, the last one the summary.
//!
//! Exit codes: 0 ok; 1 the ioctl failed (stdout `error=ENAME errno=N`, and
//! the full message on stderr), or a check other than data failed (leaks,
//! stress/race problems); 2 usage error (stderr); 3 data mismatch (stdout
//! `mismatch=N first_offset=O expected=0xEE actual=0xAA`). With
//! `--expect-errno E` an ioctl failing with E exits 0 (printing the error
//! line) and anything else exits 1.

#[macro_use]
mod out;

mod args;
mod bench;
mod bench_mem;
mod cmds;
mod modload;
mod race;
mod relay;
mod rng;
mod serve;
mod session;
mod stress;

use std::process::ExitCode;

use args::Usage;
use peermem_sim::{errno, SimDevice, SimError};

/// How a subcommand ended.
pub enum Outcome {
    /// Everything went as it should (the command printed its line).
    Ok,
    /// Data differed: the `mismatch=N first_offset=O expected=0xEE
    /// actual=0xAA` line to print; exit 3.
    Mismatch(String),
    /// Another check failed (leak, imbalance, unexpected errors); exit 1.
    CheckFailed(String),
}

/// Errors a subcommand can return.
pub enum Failure {
    Usage(Usage),
    Sim(SimError),
}

impl From<Usage> for Failure {
    fn from(u: Usage) -> Self {
        Failure::Usage(u)
    }
}

impl From<SimError> for Failure {
    fn from(e: SimError) -> Self {
        Failure::Sim(e)
    }
}

const USAGE: &str = "\
usage: simtest [--own-process] [--dev PATH] [--expect-errno ERRNO|any] COMMAND [ARGS]

GPU (the simulated NVIDIA driver):
  gpu-alloc SIZE                      cudaMalloc                va=0x..
  gpu-free VA                         cudaFree (fires the free callbacks)
  gpu-fill VA LEN PATTERN             cudaMemcpy host->GPU of pattern offsets 0..LEN
  gpu-check VA LEN PATTERN [BASE]     cudaMemcpy GPU->host, compare with offsets BASE..
  gpu-write VA LEN PATTERN            same as gpu-fill
  gpu-read VA LEN [--dump]            read (first 64 bytes shown with --dump)
MR (the simulated PeerDirect core):
  mr-reg VA LEN [ACCESS]              ibv_reg_mr (ACCESS default 7)  mr=ID sg=N client=NAME
  mr-dereg ID                         ibv_dereg_mr
  mr-query ID                         state=live|invalidated va=0x.. len=N
HCA (DMA by the simulated HCA; engine cpu by default, or edu):
  hca-write ID OFFSET LEN PATTERN [edu|cpu]
  hca-check ID OFFSET LEN PATTERN [edu|cpu] [BASE]
  hca-read ID OFFSET LEN [edu|cpu] [--dump]
  verify ID [--offset O] [--len L] [--engine E] [--seed S]
                                      HCA-write a pattern, read it back through
                                      the GPU and the HCA, compare
  roundtrip SIZE [--offset O] [--len L] [--engine E] [--iters N] [--seed S]
                                      alloc, sentinel, reg, verify (and that the
                                      sentinel outside the MR survives), dereg, free
Control:
  counters [NAME]                     every counter on one line, or one value
  fault OP NTH ERRNO [COUNT]          fail the NTH next call of OP with -ERRNO
  fault-clear                         (also: fault clear)
  delay POINT MS [COUNT]              hold the next COUNT passes (0: all) at
                                      POINT until released or MS is over;
                                      MS 0 clears POINT; POINT \"\" clears all
  release [POINT]                     let the threads held at POINT (at every
                                      point without one) go on now
  config [page_size=4k|64k|128k] [pt_version=N] [map_version=N] [scale=N]
         [persistent=0|1] [contiguous=0|1]
                                      provider knobs (alias: provider-config);
                                      unnamed knobs go back to their defaults
  leak-check                          the 5 fields and leaks=N; exit 1 if N > 0
  phase-times [reset]                 <phase>_calls= _total_ns= _last_ns= _max_ns=
Load:
  stress [--threads 8] [--ops 100000] [--seed S] [--slots 32] [--edu-every 64]
         [--max-pages 4] [--allow-errors]
  race A B [--iters N] [--size S] [--jitter-us U] [--seed S]
                                      A, B in: free dereg reg dma query
  hold SIZE SECONDS                   keep one registration live for a while
  load-module [--fail-nth N] PATH [PARAM=VALUE ...]
                                      one finit_module(2), no init_module retry
                                      (busybox insmod retries); no device needed
Process:
  session                             one application in one process: reads a
                                      command a line from stdin (any above but
                                      stress, race, hold, bench, load-module)
                                      and prints its output, then \"end rc=N\"
                                      (N: the exit code it would have had);
                                      ends at end of input or \"exit\"
  serve SOCKET                        run every command sent to SOCKET (a Unix
                                      socket) in this one process, each on a
                                      thread; with SIMTEST_SERVER=SOCKET set,
                                      simtest sends its command there (but
                                      load-module, session, serve, and any
                                      command after --own-process)
  relay                               send the requests read from stdin (each
                                      argument followed by 0x1f) to the server
                                      at SIMTEST_SERVER; answer each with its
                                      output lines tagged \"1 \" (stdout) or
                                      \"2 \" (stderr), then \"end rc=N\"
Benchmarks (tests/bench; one line BENCH-RESULT {json} of raw samples):
  bench cycle|invalidate|throughput|memory SIZE [...]  (simtest bench for details)

Numbers: decimal, 0x hex, or K/M/G suffixes. Patterns: 0xA5 | fill:0xA5 | seq |
seed:N; the byte for offset o is a function of o. ERRNO: a name (EIO, ENOMEM,
ENOTSUPP...) or a number. Exit: 0 ok, 1 ioctl error (error=ENAME errno=N) or
failed check, 2 usage, 3 data mismatch.";

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    let own_process = argv.first().is_some_and(|a| a == "--own-process");
    if own_process {
        argv.remove(0);
    }
    if matches!(
        command_name(&argv),
        Some("load-module" | "session" | "serve" | "relay")
    ) {
        return run_local(&argv);
    }
    if !own_process {
        if let Some(socket) = std::env::var_os("SIMTEST_SERVER").filter(|s| !s.is_empty()) {
            return serve::forward(&socket, &argv);
        }
    }
    ExitCode::from(run(&argv))
}

/// The command word of `argv`, after the options.
fn command_name(argv: &[String]) -> Option<&str> {
    let mut i = 0;
    while i < argv.len() {
        match argv[i].as_str() {
            "--dev" | "--expect-errno" => i += 2,
            a => return Some(a),
        }
    }
    None
}

/// The commands that run only in the calling process: they need no
/// device (load-module), are a process (session), or serve or relay the
/// others.
fn run_local(argv: &[String]) -> ExitCode {
    let (dev_path, i) = match options(argv) {
        Ok((dev_path, _, i)) => (dev_path, i),
        Err(code) => return ExitCode::from(code),
    };
    let rest = &argv[i + 1..];
    match argv[i].as_str() {
        // Needs no control device (see modload.rs).
        "load-module" => modload::run(rest),
        "serve" => serve::run(rest),
        "relay" => relay::run(rest),
        _ => {
            if !rest.is_empty() {
                errln!("simtest session: takes no arguments (commands come on stdin)");
                return ExitCode::from(2);
            }
            match open(&dev_path) {
                Ok(dev) => session::run(&dev),
                Err(code) => ExitCode::from(code),
            }
        }
    }
}

/// The options before the command: the device path, the expected errno,
/// and the index of the command; or the exit code of a usage error (or of
/// `--help`).
#[allow(clippy::type_complexity)]
fn options(argv: &[String]) -> Result<(String, Option<Option<i32>>, usize), u8> {
    let mut dev_path = peermem_sim::uapi::PEERMEM_SIM_DEVICE.to_string();
    let mut expect: Option<Option<i32>> = None;
    let mut i = 0;
    while i < argv.len() {
        match argv[i].as_str() {
            "--dev" | "--expect-errno" if i + 1 >= argv.len() => {
                errln!("simtest: option {} needs a value\n{USAGE}", argv[i]);
                return Err(2);
            }
            "--dev" => {
                dev_path = argv[i + 1].clone();
                i += 2;
            }
            "--expect-errno" => {
                let v = &argv[i + 1];
                if v == "any" {
                    expect = Some(None);
                } else if let Some(e) = errno::parse(v) {
                    expect = Some(Some(e));
                } else {
                    errln!("simtest: --expect-errno: unknown errno {v:?}");
                    return Err(2);
                }
                i += 2;
            }
            "-h" | "--help" | "help" => {
                outln!("{USAGE}");
                return Err(0);
            }
            _ => break,
        }
    }
    if i >= argv.len() {
        errln!("simtest: missing command\n{USAGE}");
        return Err(2);
    }
    Ok((dev_path, expect, i))
}

/// Opens the control device, or says why not (exit code 1).
fn open(dev_path: &str) -> Result<SimDevice, u8> {
    SimDevice::open_path(dev_path).map_err(|e| {
        outln!("error={} errno={}", e.errno_name(), e.errno);
        errln!("simtest: {e} (is the peermem_sim fixture loaded?)");
        1
    })
}

/// Runs one command line (not load-module, session or serve) in this
/// process; returns its exit code.
pub fn run(argv: &[String]) -> u8 {
    let (dev_path, expect, i) = match options(argv) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let cmd = &argv[i];
    let rest = &argv[i + 1..];
    if !cmds::known(cmd) {
        errln!("simtest: unknown command {cmd:?}\n{USAGE}");
        return 2;
    }
    let dev = match open(&dev_path) {
        Ok(dev) => dev,
        Err(code) => return code,
    };
    let result = cmds::run(&dev, cmd, rest);
    match (result, expect) {
        (Err(Failure::Usage(Usage(m))), _) => {
            errln!("simtest {cmd}: {m}\n(see simtest --help)");
            2
        }
        (Ok(Outcome::Ok), None) => 0,
        (Ok(Outcome::Mismatch(line)), _) => {
            outln!("{line}");
            errln!("simtest {cmd}: data mismatch: {line}");
            3
        }
        (Ok(Outcome::CheckFailed(m)), _) => {
            errln!("simtest {cmd}: check failed: {m}");
            1
        }
        (Err(Failure::Sim(e)), None) => {
            outln!("error={} errno={}", e.errno_name(), e.errno);
            errln!("simtest: {e}");
            1
        }
        (Ok(Outcome::Ok), Some(want)) => {
            let want = want.map_or("an error".to_string(), errno::name);
            errln!("simtest {cmd}: succeeded, but {want} was expected");
            1
        }
        (Err(Failure::Sim(e)), Some(want)) => {
            outln!("error={} errno={}", e.errno_name(), e.errno);
            if want.is_none_or(|w| w == e.errno) {
                0
            } else {
                errln!(
                    "simtest: {e}, but {} was expected",
                    want.map_or(String::new(), errno::name)
                );
                1
            }
        }
    }
}
