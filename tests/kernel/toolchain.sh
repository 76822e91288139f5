# shellcheck shell=bash
# The one toolchain the test kernel and every module are built with.
# Sourced by the build scripts and the top-level Makefile's helpers.
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
PEERMEM_BINDGEN="${PEERMEM_BINDGEN:-$(command -v bindgen || echo "$HOME/.cargo/bin/bindgen")}"
PEERMEM_RUST_LIB_SRC=/usr/src/rustc-1.96.0/library
PEERMEM_KMAKE_ARGS=(LLVM=-19 RUSTC=/usr/bin/rustc "BINDGEN=$PEERMEM_BINDGEN"
	"RUST_LIB_SRC=$PEERMEM_RUST_LIB_SRC")
PEERMEM_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/nvidia-peermem-rs"
export PEERMEM_BINDGEN PEERMEM_RUST_LIB_SRC PEERMEM_CACHE
