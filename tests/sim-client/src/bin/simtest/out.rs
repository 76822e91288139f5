// SPDX-License-Identifier: GPL-2.0
//! Where a command's output goes: this process's stdout and stderr, or,
//! for a command that `simtest serve` runs for a client, that request's
//! buffers (per thread: each request runs on a thread of its own, and the
//! worker threads a command starts attach to their request's).

use std::cell::RefCell;
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A request's stdout and stderr.
#[derive(Default)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Where a request's output goes, shared by the threads that work for it
/// (a command's own worker threads attach to it: their lines are the
/// request's, not the server's console's).
#[derive(Clone)]
pub struct Sink(Arc<Mutex<Captured>>);

thread_local! {
    static CAPTURE: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// Runs `f` with its output (on this thread, and on the threads that
/// [`attach`] to [`sink`]) captured, and returns both.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, Captured) {
    let sink = Sink(Arc::default());
    CAPTURE.with(|c| *c.borrow_mut() = Some(sink.clone()));
    let value = f();
    CAPTURE.with(|c| c.borrow_mut().take());
    let captured = std::mem::take(&mut *sink.0.lock().unwrap_or_else(|p| p.into_inner()));
    (value, captured)
}

/// This thread's sink, for a worker thread to [`attach`] to: `None` where
/// output goes to this process's own stdout and stderr.
pub fn sink() -> Option<Sink> {
    CAPTURE.with(|c| c.borrow().clone())
}

/// Sends this thread's lines where `sink` says (a worker of a request).
pub fn attach(sink: Option<Sink>) {
    CAPTURE.with(|c| *c.borrow_mut() = sink);
}

/// Where a line goes.
#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// One line on `stream`: the request's buffer, or this process's own.
fn line(stream: Stream, args: fmt::Arguments<'_>) {
    let captured = CAPTURE.with(|c| match c.borrow().as_ref() {
        Some(sink) => {
            let mut cap = sink.0.lock().unwrap_or_else(|p| p.into_inner());
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

#[cfg(test)]
mod tests {
    /// A command's worker thread attached to its request writes into the
    /// request's output, not the server's console.
    #[test]
    fn a_worker_attached_to_a_request_writes_into_it() {
        let ((), cap) = super::capture(|| {
            let sink = super::sink();
            std::thread::scope(|s| {
                s.spawn(move || {
                    super::attach(sink);
                    errln!("from a worker");
                });
            });
            errln!("from the request");
        });
        assert_eq!(
            String::from_utf8(cap.stderr).unwrap(),
            "from a worker\nfrom the request\n"
        );
        assert!(
            super::sink().is_none(),
            "the capture ended with its request"
        );
    }
}
