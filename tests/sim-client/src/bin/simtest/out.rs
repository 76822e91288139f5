// SPDX-License-Identifier: GPL-2.0
//! Where a command's output goes: this process's stdout and stderr, or,
//! for a command that `simtest serve` runs for a client, that request's
//! buffers (per thread: each request runs on a thread of its own).

use std::cell::RefCell;
use std::fmt;
use std::io::Write;

/// A request's stdout and stderr.
#[derive(Default)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Runs `f` with its output (on this thread) captured, and returns both.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, Captured) {
    CAPTURE.with(|c| *c.borrow_mut() = Some(Captured::default()));
    let value = f();
    let captured = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (value, captured)
}

/// Where a line goes.
#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// One line on `stream`: the request's buffer, or this process's own.
fn line(stream: Stream, args: fmt::Arguments<'_>) {
    let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(cap) => {
            let buf = match stream {
                Stream::Out => &mut cap.stdout,
                Stream::Err => &mut cap.stderr,
            };
            let _ = writeln!(buf, "{args}");
            true
        }
        None => false,
    });
    match (captured, stream) {
        (true, _) => {}
        (false, Stream::Out) => println!("{args}"),
        (false, Stream::Err) => eprintln!("{args}"),
    }
}

/// One line on stdout (`outln!`).
pub fn out_line(args: fmt::Arguments<'_>) {
    line(Stream::Out, args);
}

/// One line on stderr (`errln!`).
pub fn err_line(args: fmt::Arguments<'_>) {
    line(Stream::Err, args);
}

/// `println!`, to the request's output where there is one.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::out_line(format_args!($($arg)*))
    };
}

/// `eprintln!`, to the request's output where there is one.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err_line(format_args!($($arg)*))
    };
}
