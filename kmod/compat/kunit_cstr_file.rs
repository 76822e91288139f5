// SPDX-License-Identifier: GPL-2.0

//! Compiles where `kunit_assert!` takes the file as a C string literal.

#[allow(dead_code)]
fn probe() {
    kernel::kunit_assert!("pm_probe", c"probe", 0, true);
}
