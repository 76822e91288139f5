// SPDX-License-Identifier: GPL-2.0
//! The tool's error type: a failed call of the CUDA driver, of libibverbs or
//! of the simulated stack, or a plain message (a file, a plot), and how each
//! becomes a failed check with its likely cause and fix.
//!
//! The bindings keep their own detailed errors (`CudaError`, `VerbsError`,
//! `SimError`); everything above them speaks `Error`.

use std::fmt;

use serde_json::json;

use peermem_sim::SimError;

#[cfg(feature = "real")]
use crate::causes::Cause;
use crate::causes::{explain, Op};
#[cfg(feature = "real")]
use crate::real::{cuda::CudaError, verbs::VerbsError};
use crate::report::Check;

#[derive(Debug, Clone)]
pub enum Error {
    /// A CUDA driver call (real backend).
    #[cfg(feature = "real")]
    Cuda(CudaError),
    /// A libibverbs call (real backend).
    #[cfg(feature = "real")]
    Verbs(VerbsError),
    /// An operation of the simulated stack (sim backend).
    Sim(SimError),
    /// Anything else, said in full by its message.
    Msg(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "real")]
            Error::Cuda(e) => e.fmt(f),
            #[cfg(feature = "real")]
            Error::Verbs(e) => e.fmt(f),
            Error::Sim(e) => e.fmt(f),
            Error::Msg(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(m: String) -> Self {
        Error::Msg(m)
    }
}

/// `From` a binding's error, owned or borrowed, into variant `$v`.
macro_rules! from_binding {
    ($(#[$m:meta])* $t:ty => $v:ident) => {
        $(#[$m])*
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::$v(e)
            }
        }

        $(#[$m])*
        impl From<&$t> for Error {
            fn from(e: &$t) -> Self {
                Error::$v(e.clone())
            }
        }
    };
}

from_binding!(SimError => Sim);
from_binding!(#[cfg(feature = "real")] CudaError => Cuda);
from_binding!(#[cfg(feature = "real")] VerbsError => Verbs);

/// Which step of the cause table a failed operation of the simulated stack
/// is.
fn sim_op(e: &SimError) -> Op {
    match e.op {
        "open" => Op::SimOpen,
        "gpu_alloc" => Op::SimGpuAlloc,
        "mr_reg" => Op::SimMrReg,
        "mr_dereg" => Op::SimMrDereg,
        "hca_write" => Op::SimHcaWrite,
        "hca_read" => Op::SimHcaRead,
        "gpu_free" => Op::SimGpuFree,
        _ => Op::SimGpuCopy,
    }
}

#[cfg(feature = "real")]
fn cuda_check(id: &'static str, title: &str, e: &CudaError) -> Check {
    let c = match e.call {
        "dlopen" => explain(Op::LoadCuda, 0),
        "cuMemGetHandleForAddressRange" => explain(Op::ExportDmabuf, 0),
        _ => Cause {
            cause: "the CUDA driver refused the call".into(),
            fix: "check nvidia-smi and dmesg (Xid errors)".into(),
        },
    };
    // A missing libcuda is said by its cause alone: the loader's message
    // adds nothing a user can act on.
    let detail = if e.call == "dlopen" {
        c.cause.clone()
    } else {
        format!("{e}: {}", c.cause)
    };
    Check::fail(id, title, detail)
        .fix(c.fix)
        .data(json!({"call": e.call, "error": e.name}))
}

impl Error {
    /// The failed check `id` titled `title` that says this error, its likely
    /// cause and its fix.
    pub fn check(&self, id: &'static str, title: &str) -> Check {
        match self {
            #[cfg(feature = "real")]
            Error::Cuda(e) => cuda_check(id, title, e),
            #[cfg(feature = "real")]
            Error::Verbs(e) => {
                let c = explain(e.op, e.errno);
                Check::fail(id, title, format!("{e}: {}", c.cause))
                    .fix(c.fix)
                    .data(json!({"call": e.call, "errno": e.errno, "errno_name": peermem_sim::errno::name(e.errno)}))
            }
            Error::Sim(e) => {
                let c = explain(sim_op(e), e.errno);
                Check::fail(id, title, format!("{e}: {}", c.cause))
                    .fix(c.fix)
                    .data(json!({"op": e.op, "errno": e.errno, "errno_name": e.errno_name()}))
            }
            Error::Msg(m) => Check::fail(id, title, m.clone()),
        }
    }
}

/// The failed check for `e` (see [`Error::check`]).
pub fn fail(id: &'static str, title: &str, e: impl Into<Error>) -> Check {
    e.into().check(id, title)
}
