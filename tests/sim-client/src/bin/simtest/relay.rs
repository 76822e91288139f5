// SPDX-License-Identifier: GPL-2.0
//! `simtest relay`: a scenario's `simtest` calls without a process each.
//!
//! Under TCG, with KASAN, lockdep and kmemleak, starting a process costs
//! the guest about a third of a second, far more than most commands it
//! runs. A scenario's shell therefore starts one relay (tests/scenarios/
//! lib.sh) and writes its requests to it: the relay sends each to the
//! `simtest serve` process, as a `simtest` process would, on one
//! connection that one thread of the server serves, and writes the answer
//! back. The commands still run in the server, so which process pins and
//! frees is the same as with a `simtest` process a call.
//!
//! Request: one line, each argument followed by the unit separator
//! (0x1f), so that an empty argument survives. Answer: each line the
//! command printed, prefixed with `1 ` (stdout) or `2 ` (stderr), then
//! `end rc=N` with the exit code `simtest` would have exited with.
//!
//! The relay ends at end of input, and when the shell that started it
//! ends (it asks the kernel for a signal then), so a scenario's relay
//! never outlives the scenario; and it closes the shell's other files
//! that it inherited, so that it keeps no pipe of the scenario open.

use std::ffi::OsString;
use std::io::{self, BufRead, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

use crate::serve;

/// Splits a request line into its arguments.
fn arguments(line: &str) -> Vec<String> {
    let mut args: Vec<String> = line.split('\u{1f}').map(str::to_string).collect();
    // Each argument ends with a separator: what follows the last is empty.
    if args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    args
}

/// Writes `text` a line at a time, each line prefixed with `tag`.
fn tagged(w: &mut impl Write, tag: &str, text: &[u8]) -> io::Result<()> {
    for line in String::from_utf8_lossy(text).lines() {
        writeln!(w, "{tag} {line}")?;
    }
    Ok(())
}

/// The relay's connection to the server, opened at the first request and
/// again after a request whose thread died (the server ends that
/// connection) or one that could not be sent.
struct Connection {
    socket: OsString,
    stream: Option<UnixStream>,
}

impl Connection {
    /// Sends `argv` and returns the answer. A request that could not be
    /// sent on the connection kept from before goes out once more on a new
    /// one; one sent and not answered is not repeated (it may have run).
    fn request(&mut self, argv: &[String]) -> io::Result<(u8, Vec<u8>, Vec<u8>)> {
        let mut stream = match self.stream.take() {
            Some(mut kept) => match serve::send_request(&mut kept, argv) {
                Ok(()) => kept,
                Err(_) => self.connect_and_send(argv)?,
            },
            None => self.connect_and_send(argv)?,
        };
        let answer = serve::read_answer(&mut stream)?;
        // The server answers for a request whose thread died, then ends
        // that connection: nothing would serve it any more.
        if answer.0 != serve::DIED {
            self.stream = Some(stream);
        }
        Ok(answer)
    }

    fn connect_and_send(&self, argv: &[String]) -> io::Result<UnixStream> {
        let mut stream = UnixStream::connect(&self.socket)?;
        serve::send_request(&mut stream, argv)?;
        Ok(stream)
    }
}

/// The answer to one request.
fn answer(w: &mut impl Write, conn: &mut Connection, argv: &[String]) -> io::Result<()> {
    match conn.request(argv) {
        Ok((code, stdout, stderr)) => {
            tagged(w, "1", &stdout)?;
            tagged(w, "2", &stderr)?;
            writeln!(w, "end rc={code}")?;
        }
        Err(e) => {
            tagged(w, "2", serve::no_answer(&conn.socket, &e).as_bytes())?;
            writeln!(w, "end rc=1")?;
        }
    }
    w.flush()
}

/// Closes every file this process inherited besides stdin, stdout and
/// stderr: the shell's other pipes (an application's input, say) must
/// see their end when the shell closes them, not stay open in here.
fn close_inherited() {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect(),
        Err(_) => return,
    };
    for fd in fds {
        // SAFETY: nothing in this process owns these descriptors: they
        // came from the shell (the directory's own is closed by now, and
        // closing a closed one only fails with EBADF).
        unsafe { libc::close(fd) };
    }
}

/// `simtest relay`: relays requests from stdin until end of input.
pub fn run(rest: &[String]) -> ExitCode {
    if !rest.is_empty() {
        eprintln!("simtest relay: takes no arguments (requests come on stdin)");
        return ExitCode::from(2);
    }
    let Some(socket) = std::env::var_os("SIMTEST_SERVER").filter(|s| !s.is_empty()) else {
        eprintln!("simtest relay: SIMTEST_SERVER is not set: there is no server to relay to");
        return ExitCode::from(2);
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and changes
    // nothing but this process's own death signal.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // The parent may have gone before the request took effect.
    // SAFETY: getppid takes no argument and cannot fail.
    if rc != 0 || unsafe { libc::getppid() } == 1 {
        eprintln!("simtest relay: cannot end with the shell that started it");
        return ExitCode::from(1);
    }
    close_inherited();
    let mut conn = Connection {
        socket,
        stream: None,
    };
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                eprintln!("simtest relay: reading a request: {e}");
                return ExitCode::from(1);
            }
        };
        if answer(&mut stdout, &mut conn, &arguments(&line)).is_err() {
            // Nobody reads the answers any more.
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_keep_empty_ones() {
        assert_eq!(arguments("delay\u{1f}\u{1f}0\u{1f}"), ["delay", "", "0"]);
        assert_eq!(arguments("counters\u{1f}"), ["counters"]);
        assert_eq!(arguments(""), Vec::<String>::new());
    }

    #[test]
    fn answers_are_tagged_by_stream() {
        let mut w = Vec::new();
        tagged(&mut w, "1", b"va=0x1000\nsecond").unwrap();
        tagged(&mut w, "2", b"").unwrap();
        assert_eq!(String::from_utf8(w).unwrap(), "1 va=0x1000\n1 second\n");
    }
}
