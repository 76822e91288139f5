// SPDX-License-Identifier: GPL-2.0
//! `simtest load-module [--fail-nth N] PATH [PARAM=VALUE ...]`: one
//! `finit_module(2)` call and nothing else (added by the reliability
//! engineer, see docs/lab-notes/simtest-reliability.md).
//!
//! busybox `insmod` retries a failed `finit_module` with `init_module` on the
//! same image, so a module whose init fails runs its init twice and a fault
//! injected once is hidden by the retry. This command tries once. With
//! `--fail-nth N` it arms `/proc/thread-self/fail-nth` right before the
//! call, so the Nth fault-injection site passed by the load (failslab with
//! its filters) fails.
//!
//! Needs no /dev/peermem_sim. Prints `ok=1`, or `error=ENAME errno=N` and
//! exits 1; usage errors exit 2.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::process::ExitCode;

use peermem_sim::errno;

const USAGE: &str = "usage: simtest load-module [--fail-nth N] PATH [PARAM=VALUE ...]";

fn usage(msg: &str) -> ExitCode {
    eprintln!("simtest load-module: {msg}\n{USAGE}");
    ExitCode::from(2)
}

fn os_error(what: &str, e: std::io::Error) -> ExitCode {
    let n = e.raw_os_error().unwrap_or(libc::EIO);
    println!("error={} errno={n}", errno::name(n));
    eprintln!("simtest load-module: {what}: {e}");
    ExitCode::from(1)
}

pub fn run(argv: &[String]) -> ExitCode {
    let mut fail_nth: Option<u32> = None;
    let mut rest = argv;
    if rest.first().map(String::as_str) == Some("--fail-nth") {
        let Some(n) = rest.get(1).and_then(|v| v.parse::<u32>().ok()) else {
            return usage("--fail-nth needs a number");
        };
        fail_nth = Some(n);
        rest = &rest[2..];
    }
    let Some((path, params)) = rest.split_first() else {
        return usage("missing PATH");
    };
    let Ok(params) = CString::new(params.join(" ")) else {
        return usage("a parameter contains a NUL byte");
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return os_error(&format!("open {path}"), e),
    };
    if let Some(n) = fail_nth {
        if let Err(e) = std::fs::write("/proc/thread-self/fail-nth", n.to_string()) {
            return os_error("arm /proc/thread-self/fail-nth", e);
        }
    }
    // SAFETY: plain syscall; the fd and the NUL-terminated string outlive it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            params.as_ptr(),
            0 as libc::c_int,
        )
    };
    let err = std::io::Error::last_os_error();
    // `injected=1` when the armed fault fired (fail-nth counted down to 0).
    let injected = fail_nth.map(|_| {
        let left = std::fs::read_to_string("/proc/thread-self/fail-nth").unwrap_or_default();
        // Disarm whatever the load did not reach.
        let _ = std::fs::write("/proc/thread-self/fail-nth", "0");
        u32::from(left.trim() == "0")
    });
    let note = injected.map_or(String::new(), |i| format!(" injected={i}"));
    if rc != 0 {
        let n = err.raw_os_error().unwrap_or(libc::EIO);
        println!("error={} errno={n}{note}", errno::name(n));
        eprintln!("simtest load-module: finit_module {path}: {err}");
        return ExitCode::from(1);
    }
    println!("ok=1{note}");
    ExitCode::SUCCESS
}
