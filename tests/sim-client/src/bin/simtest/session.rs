// SPDX-License-Identifier: GPL-2.0
//! `simtest session`: the steps of one application in one process.
//!
//! The NVIDIA driver keeps GPU memory and the pins of
//! `nvidia_p2p_get_pages` per process: only the process that allocated
//! memory may pin or free it, a non-persistent unpin from another process
//! finds nothing, and the owner's exit frees what it left. The other
//! `simtest` calls of a suite all run in the guest's `simtest serve`
//! process, which lives as long as the boot, so a scenario that is about
//! an application's process ending, or about two applications, drives a
//! `simtest session` of its own: it writes one
//! command a line to the session's stdin and reads what the command prints,
//! up to the line `end rc=N` (N is the exit code the command would have had
//! on its own: 0 ok, 1 ioctl error or failed check, 2 usage, 3 mismatch).
//! The session ends, and the process exits, at end of input or on `exit`.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use peermem_sim::SimDevice;

use crate::args::Usage;
use crate::{cmds, Failure, Outcome};

/// Commands a session does not run: they print many lines, run for long
/// or need no device.
const NOT_IN_A_SESSION: &[&str] = &["stress", "race", "hold", "bench", "load-module", "session"];

/// Runs one command line; returns its exit code, having printed its output.
fn step(dev: &SimDevice, line: &str) -> u8 {
    let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    let Some((cmd, rest)) = words.split_first() else {
        return 0;
    };
    if NOT_IN_A_SESSION.contains(&cmd.as_str()) || !cmds::known(cmd) {
        errln!("simtest session: {cmd:?} is not a command a session runs");
        return 2;
    }
    match cmds::run(dev, cmd, rest) {
        Ok(Outcome::Ok) => 0,
        Ok(Outcome::Mismatch(line)) => {
            outln!("{line}");
            3
        }
        Ok(Outcome::CheckFailed(m)) => {
            errln!("simtest session {cmd}: check failed: {m}");
            1
        }
        Err(Failure::Sim(e)) => {
            outln!("error={} errno={}", e.errno_name(), e.errno);
            errln!("simtest session {cmd}: {e}");
            1
        }
        Err(Failure::Usage(Usage(m))) => {
            errln!("simtest session {cmd}: {m}");
            2
        }
    }
}

/// Reads and runs commands until end of input or `exit`.
pub fn run(dev: &SimDevice) -> ExitCode {
    let stdin = io::stdin();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                errln!("simtest session: reading stdin: {e}");
                return ExitCode::from(1);
            }
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line == "exit" {
            break;
        }
        let rc = step(dev, line);
        outln!("end rc={rc}");
        if io::stdout().flush().is_err() {
            // Nobody reads the answers any more: the application ends.
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
