// SPDX-License-Identifier: GPL-2.0
//! `simtest serve SOCKET`: every simtest command of a test run in one
//! process.
//!
//! NVIDIA's driver keeps the pins of `nvidia_p2p_get_pages` per process:
//! its put unpins only for the process that pinned, so a client module
//! never unpins from any other (it leaves the pin to its owner). Scenarios
//! run each step as a `simtest` call of its own; with the server, those
//! calls are all made by this one process, as the steps of one application
//! would be, and a scenario that is about another process says so
//! (`simtest --own-process`, or an application of its own: `simtest
//! session`). Each request runs on a thread of its own, so calls a
//! scenario makes at the same time still run at the same time; each opens
//! the control device for itself, as a `simtest` process did.
//!
//! The client (`simtest` with `SIMTEST_SERVER=SOCKET`) sends its arguments
//! and prints what the command printed, then exits with its exit code.
//! Request: a count, then each argument, as `u32` lengths (little endian)
//! and bytes. Answer: the exit code (one byte), then stdout and stderr,
//! each a `u32` length and bytes. A connection may carry several requests
//! in turn (`simtest relay` keeps one open): one thread serves them all.
//!
//! A kernel Oops in a request's system call ends that thread alone, with
//! no unwinding: its socket stays open in the server's file table and its
//! client would wait for ever. A watchdog therefore answers for every
//! request whose thread is gone or dead ([`DIED`], and why), within about
//! [`WATCH_EVERY`], so the scenario fails at once, for that reason.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use crate::out;

/// The longest argument list or output the protocol carries.
const MAX_BYTES: u32 = 64 << 20;

fn write_bytes(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&n| n <= MAX_BYTES)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too long"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(bytes)
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let len = read_u32(r)?;
    if len > MAX_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too long"));
    }
    let mut v = vec![0u8; len as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Reads one request; `None` when the client closed the connection
/// instead (after its last request).
fn read_request(r: &mut impl Read) -> io::Result<Option<Vec<String>>> {
    let mut b = [0u8; 4];
    let mut got = 0;
    while got < b.len() {
        match r.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_le_bytes(b);
    if n > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many arguments",
        ));
    }
    (0..n)
        .map(|_| {
            String::from_utf8(read_bytes(r)?)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
        })
        .collect::<io::Result<Vec<String>>>()
        .map(Some)
}

/// The exit code of a request whose thread died before it answered.
pub const DIED: u8 = 4;

/// How often the watchdog looks at the requests' threads.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The request word with which a test stands in for an Oops: its thread
/// ends as an Oopsing one does, without unwinding or answering.
pub const EXIT_THREAD: &str = "__exit-thread";

/// A request being served: its thread, its command, a second handle on its
/// socket for the watchdog to answer on.
struct Pending {
    tid: i64,
    argv: Vec<String>,
    stream: UnixStream,
}

/// The requests being served, by number.
static PENDING: Mutex<BTreeMap<u64, Pending>> = Mutex::new(BTreeMap::new());

fn pending() -> std::sync::MutexGuard<'static, BTreeMap<u64, Pending>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// This thread's kernel task id.
fn tid() -> i64 {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Whether task `tid` of this process still runs: a thread that died is
/// gone from /proc/self/task, or a zombie or dead there.
fn alive(tid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) {
        Err(_) => false,
        Ok(stat) => !matches!(
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next()),
            Some('Z' | 'X' | 'x')
        ),
    }
}

/// Answers, for each request whose thread died, that it did.
fn watchdog() {
    loop {
        std::thread::sleep(WATCH_EVERY);
        let dead: Vec<Pending> = {
            let mut p = pending();
            let ids: Vec<u64> = p
                .iter()
                .filter(|(_, r)| !alive(r.tid))
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| p.remove(id)).collect()
        };
        for mut r in dead {
            let why = format!(
                "simtest serve: the thread serving `simtest {}` (task {}) died before answering: a kernel Oops in its system call ends it (see the kernel log)",
                r.argv.join(" "),
                r.tid
            );
            eprintln!("{why}");
            let _ = r
                .stream
                .write_all(&[DIED])
                .and_then(|()| write_bytes(&mut r.stream, b""))
                .and_then(|()| write_bytes(&mut r.stream, format!("{why}\n").as_bytes()));
            let _ = r.stream.shutdown(Shutdown::Both);
        }
    }
}

/// Serves one connection: its requests in turn (a `simtest` process sends
/// one, a relay many), each command's output captured and its answer
/// sent.
fn serve_connection(first_id: u64, mut stream: UnixStream) {
    for id in (first_id << 32).. {
        let argv = match read_request(&mut stream) {
            Ok(Some(argv)) => argv,
            Ok(None) => return,
            Err(e) => {
                eprintln!("simtest serve: a bad request: {e}");
                return;
            }
        };
        match stream.try_clone() {
            Ok(watched) => {
                pending().insert(
                    id,
                    Pending {
                        tid: tid(),
                        argv: argv.clone(),
                        stream: watched,
                    },
                );
            }
            Err(e) => eprintln!("simtest serve: {argv:?} goes unwatched: {e}"),
        }
        if argv.len() == 1 && argv[0] == EXIT_THREAD {
            // SAFETY: ends this thread only, as an Oops does: nothing of
            // it runs again, and what it holds (its socket) stays as it is.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
        }
        let (code, captured) = out::capture(|| crate::run(&argv));
        let answer = stream
            .write_all(&[code])
            .and_then(|()| write_bytes(&mut stream, &captured.stdout))
            .and_then(|()| write_bytes(&mut stream, &captured.stderr));
        pending().remove(&id);
        if let Err(e) = answer {
            eprintln!("simtest serve: answering {argv:?}: {e}");
            return;
        }
    }
}

/// `simtest serve SOCKET`: serves until killed.
pub fn run(rest: &[String]) -> ExitCode {
    let [socket] = rest else {
        eprintln!("simtest serve: usage: simtest serve SOCKET");
        return ExitCode::from(2);
    };
    // A socket file left by an earlier server of this boot goes first.
    let _ = std::fs::remove_file(socket);
    let listener = match UnixListener::bind(socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("simtest serve: cannot listen on {socket}: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = std::thread::Builder::new().spawn(watchdog) {
        eprintln!("simtest serve: no watchdog thread: {e}");
        return ExitCode::from(1);
    }
    for (id, conn) in (0u64..).zip(listener.incoming()) {
        match conn {
            Ok(stream) => {
                // Unnamed: the thread keeps the name "simtest", which the
                // scenarios look for among tasks stuck in the kernel.
                if let Err(e) =
                    std::thread::Builder::new().spawn(move || serve_connection(id, stream))
                {
                    eprintln!("simtest serve: no thread for a request: {e}");
                }
            }
            Err(e) => eprintln!("simtest serve: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// Sends `argv` on `stream`, a connection to the server.
pub fn send_request(stream: &mut UnixStream, argv: &[String]) -> io::Result<()> {
    let n = u32::try_from(argv.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many arguments"))?;
    let mut request = n.to_le_bytes().to_vec();
    for a in argv {
        write_bytes(&mut request, a.as_bytes())?;
    }
    stream.write_all(&request)
}

/// Reads the server's answer on `stream`: the exit code, what the command
/// printed on stdout and on stderr.
pub fn read_answer(stream: &mut UnixStream) -> io::Result<(u8, Vec<u8>, Vec<u8>)> {
    let mut code = [0u8; 1];
    stream.read_exact(&mut code)?;
    let stdout = read_bytes(stream)?;
    let stderr = read_bytes(stream)?;
    Ok((code[0], stdout, stderr))
}

/// Sends `argv` to the server at `socket` on a connection of its own;
/// returns the answer.
pub fn exchange(socket: &OsStr, argv: &[String]) -> io::Result<(u8, Vec<u8>, Vec<u8>)> {
    let mut stream = UnixStream::connect(socket)?;
    send_request(&mut stream, argv)?;
    read_answer(&mut stream)
}

/// What a client says when the server did not answer.
pub fn no_answer(socket: &OsStr, e: &io::Error) -> String {
    format!(
        "simtest: the simtest server at {} did not answer: {e} (unset SIMTEST_SERVER, or --own-process, to run here)",
        socket.to_string_lossy()
    )
}

/// Sends `argv` to the server at `socket` and relays its answer.
pub fn forward(socket: &OsStr, argv: &[String]) -> ExitCode {
    let relayed = exchange(socket, argv).and_then(|(code, stdout, stderr)| {
        io::stdout().write_all(&stdout)?;
        io::stdout().flush()?;
        io::stderr().write_all(&stderr)?;
        Ok(code)
    });
    match relayed {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{}", no_answer(socket, &e));
            ExitCode::from(1)
        }
    }
}
