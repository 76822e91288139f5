// SPDX-License-Identifier: GPL-2.0

//! Compiles against every kernel crate: if this fails, the kernel's Rust
//! metadata cannot be used at all (another rustc, a missing lib-rust).

#[allow(unused_imports)]
use kernel::prelude::*;
