// SPDX-License-Identifier: GPL-2.0
//! CLI behaviour of `simtest` that needs no simulated stack: usage errors,
//! a missing device, errno expectations (against /dev/null, which answers
//! every ioctl with ENOTTY).

use std::process::{Command, Output};

fn simtest(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_simtest"))
        .args(args)
        .output()
        .expect("run simtest")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_lists_commands() {
    let o = simtest(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let s = String::from_utf8_lossy(&o.stdout);
    for c in [
        "gpu-alloc",
        "mr-reg",
        "verify",
        "stress",
        "race",
        "leak-check",
    ] {
        assert!(s.contains(c), "help lacks {c}");
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["--dev", "/dev/null", "gpu-alloc"],
        &["--dev", "/dev/null", "gpu-alloc", "12Q"],
        &["--dev", "/dev/null", "gpu-alloc", "64K", "extra"],
        &["--dev", "/dev/null", "stress", "--threads", "0"],
        &["--dev", "/dev/null", "stress", "--bogus"],
        &["--dev", "/dev/null", "race", "free", "explode"],
        &["--dev", "/dev/null", "fault", "get_pages", "1", "EWHAT"],
        &["--dev", "/dev/null", "hca-write", "1", "0", "4K", "zebra"],
        &[
            "--dev",
            "/dev/null",
            "hca-write",
            "1",
            "0",
            "4K",
            "seq",
            "gpu",
        ],
        &[
            "--dev",
            "/dev/null",
            "hca-check",
            "1",
            "0",
            "4K",
            "seq",
            "edu",
            "0",
            "9",
        ],
        &["--dev", "/dev/null", "config", "page_size=8k"],
        &["--dev", "/dev/null", "config", "colour=blue"],
        &["--dev", "/dev/null", "mr-reg", "0x10000", "64K", "xx"],
        &["--dev", "/dev/null", "phase-times", "now"],
        &["--expect-errno", "ENOPE", "gpu-alloc", "64K"],
    ] {
        let o = simtest(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?}: no message");
    }
}

#[test]
fn missing_device_is_a_clear_error() {
    let o = simtest(&["--dev", "/nonexistent/peermem_sim", "counters"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "error=ENOENT errno=2");
    let e = stderr(&o);
    assert!(e.contains("ENOENT") && e.contains("fixture loaded"), "{e}");
}

#[test]
fn operation_errors_name_the_errno() {
    // Convention of docs/lab-notes/simtest-commands.md: exit 1 and `error=ENAME errno=N`.
    let o = simtest(&["--dev", "/dev/null", "gpu-alloc", "64K"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "error=ENOTTY errno=25");
    assert!(stderr(&o).contains("gpu_alloc: ENOTTY"), "{}", stderr(&o));
}

#[test]
fn expect_errno_inverts_the_verdict() {
    let o = simtest(&[
        "--dev",
        "/dev/null",
        "--expect-errno",
        "ENOTTY",
        "mr-dereg",
        "7",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "error=ENOTTY errno=25");
    let o = simtest(&["--dev", "/dev/null", "--expect-errno", "any", "leak-check"]);
    assert_eq!(o.status.code(), Some(0));
    let o = simtest(&[
        "--dev",
        "/dev/null",
        "--expect-errno",
        "EINVAL",
        "mr-dereg",
        "7",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("EINVAL was expected"), "{}", stderr(&o));
}

#[test]
fn client_side_validation_errors() {
    // A fault op name too long for the 32-byte field never reaches the kernel.
    let long = "x".repeat(40);
    let o = simtest(&["--dev", "/dev/null", "fault", &long, "1", "EIO"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("EINVAL"), "{}", stderr(&o));
}

/// `simtest session` with `input` on stdin, against /dev/null.
/// Runs `cmd` with `input` on its stdin; its output.
fn with_stdin(cmd: &mut Command, input: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run simtest");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("simtest output")
}

fn session(input: &str) -> Output {
    with_stdin(
        Command::new(env!("CARGO_BIN_EXE_simtest")).args(["--dev", "/dev/null", "session"]),
        input,
    )
}

#[test]
fn session_answers_each_command_then_its_exit_code() {
    // One process, many commands: each one's output, then `end rc=N` with
    // the exit code it would have had alone; comments and blank lines are
    // skipped, `exit` ends the session before the rest.
    let o = session(
        "# an application\n\ngpu-alloc 64K\ngpu-alloc 12Q\nfrobnicate\nstress\nexit\ngpu-alloc 64K\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "error=ENOTTY errno=25\nend rc=1\nend rc=2\nend rc=2\nend rc=2\n"
    );
    let e = stderr(&o);
    assert!(
        e.contains("\"frobnicate\" is not a command a session runs"),
        "{e}"
    );
    assert!(
        e.contains("\"stress\" is not a command a session runs"),
        "{e}"
    );
}

#[test]
fn session_takes_no_arguments() {
    let o = simtest(&["--dev", "/dev/null", "session", "gpu-alloc"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("takes no arguments"), "{}", stderr(&o));
}

/// A `simtest serve` on a socket of its own, killed when dropped.
struct Server {
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl Server {
    fn start(name: &str) -> Self {
        let socket =
            std::env::temp_dir().join(format!("simtest-{}-{name}.sock", std::process::id()));
        let child = Command::new(env!("CARGO_BIN_EXE_simtest"))
            .args(["serve", socket.to_str().expect("utf-8 path")])
            .spawn()
            .expect("start simtest serve");
        for _ in 0..500 {
            if socket.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(socket.exists(), "simtest serve made no socket");
        Self { child, socket }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_simtest"))
            .args(args)
            .env("SIMTEST_SERVER", &self.socket)
            .output()
            .expect("run simtest through the server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[test]
fn served_commands_answer_as_local_ones() {
    // Through the server: the same stdout, stderr and exit code as run
    // here, for a failing ioctl, a usage error and an expected errno.
    let server = Server::start("same");
    for args in [
        &["--dev", "/dev/null", "gpu-alloc", "64K"][..],
        &["--dev", "/dev/null", "gpu-alloc", "12Q"],
        &[
            "--dev",
            "/dev/null",
            "--expect-errno",
            "ENOTTY",
            "gpu-alloc",
            "64K",
        ],
        &["frobnicate"],
    ] {
        let served = server.run(args);
        let local = simtest(args);
        assert_eq!(served.status.code(), local.status.code(), "{args:?}");
        assert_eq!(stdout(&served), stdout(&local), "{args:?}");
        assert_eq!(stderr(&served), stderr(&local), "{args:?}");
    }
}

/// A request thread that dies in the kernel (an Oops ends the task, no
/// unwinding, its socket left open): the server answers for it within
/// seconds, exit code 4 and why, instead of leaving its client waiting
/// until the host's watchdog kills the VM.
#[test]
fn a_request_thread_that_dies_is_answered_for() {
    let server = Server::start("died");
    let mut client = Command::new(env!("CARGO_BIN_EXE_simtest"))
        .arg("__exit-thread")
        .env("SIMTEST_SERVER", &server.socket)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run simtest through the server");
    let t0 = std::time::Instant::now();
    while client.try_wait().expect("wait").is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            let _ = client.kill();
            let _ = client.wait();
            panic!("the client of a dead request thread still waits after 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = client.wait_with_output().expect("output");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the thread serving `simtest __exit-thread`")
            && stderr(&o).contains("died before answering: a kernel Oops"),
        "{}",
        stderr(&o)
    );
    // The server still serves.
    let o = server.run(&["--dev", "/dev/null", "gpu-alloc", "64K"]);
    assert_eq!(stdout(&o).trim(), "error=ENOTTY errno=25");
}

#[test]
fn own_process_and_an_absent_server() {
    let socket = std::env::temp_dir().join(format!("simtest-{}-none.sock", std::process::id()));
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_simtest"))
            .args(args)
            .env("SIMTEST_SERVER", &socket)
            .output()
            .expect("run simtest")
    };
    // No server there: a clear error, exit 1.
    let o = run(&["--dev", "/dev/null", "counters"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("did not answer"), "{}", stderr(&o));
    // --own-process runs here, server or not.
    let o = run(&["--own-process", "--dev", "/dev/null", "gpu-alloc", "64K"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "error=ENOTTY errno=25");
}

/// `simtest relay` with `input` on stdin, relaying to `server`.
fn relay(server: &Server, input: &str) -> Output {
    with_stdin(
        Command::new(env!("CARGO_BIN_EXE_simtest"))
            .arg("relay")
            .env("SIMTEST_SERVER", &server.socket),
        input,
    )
}

#[test]
fn relay_answers_each_request_as_a_simtest_process_would() {
    let server = Server::start("relay");
    let args = ["--dev", "/dev/null", "gpu-alloc", "64K"];
    let local = simtest(&args);
    // Each argument ends with 0x1f; an empty one survives (a usage error
    // that names it shows that).
    let o = relay(
        &server,
        "--dev\x1f/dev/null\x1fgpu-alloc\x1f64K\x1f\nfrobnicate\x1f\x1f\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    let mut want: Vec<String> = stdout(&local).lines().map(|l| format!("1 {l}")).collect();
    want.extend(stderr(&local).lines().map(|l| format!("2 {l}")));
    want.push(format!("end rc={}", local.status.code().unwrap()));
    assert_eq!(lines[..want.len()], want[..]);
    assert_eq!(lines.last().map(String::as_str), Some("end rc=2"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("2 simtest: unknown command \"frobnicate\"")),
        "{lines:?}"
    );
}

#[test]
fn relay_goes_on_after_a_request_thread_died() {
    // The thread serving the relay's connection dies: the server answers
    // for that request (4), and the next one goes out on a new connection.
    let server = Server::start("relay-died");
    let o = relay(
        &server,
        "__exit-thread\x1f\n--dev\x1f/dev/null\x1fgpu-alloc\x1f64K\x1f\n",
    );
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"end rc=4"), "{out}");
    let after = &lines[lines.iter().position(|l| *l == "end rc=4").unwrap() + 1..];
    assert_eq!(after.first(), Some(&"1 error=ENOTTY errno=25"), "{out}");
    assert_eq!(after.last(), Some(&"end rc=1"), "{out}");
}

#[test]
fn relay_needs_a_server() {
    let o = Command::new(env!("CARGO_BIN_EXE_simtest"))
        .arg("relay")
        .env_remove("SIMTEST_SERVER")
        .output()
        .expect("run simtest relay");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("SIMTEST_SERVER is not set"),
        "{}",
        stderr(&o)
    );
}
