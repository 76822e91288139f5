// SPDX-License-Identifier: GPL-2.0

//! Compiles where `as_char_ptr` comes from the trait `CStrExt`.

#[allow(unused_imports)]
use kernel::str::CStrExt;
