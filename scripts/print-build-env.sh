#!/usr/bin/env bash
# `make print-build-env`: can this node's kernel build nvidia_peermem_rs?
# One screen: each requirement, what was found, and a closing verdict with
# what to do. Reads the kernel build tree KDIR (default: the running
# kernel's /lib/modules/$(uname -r)/build); RUSTC, BINDGEN and CC override
# the tools looked for (as they would in the kernel make).
# Exit 0 when the module can be built here, 1 when it cannot.
set -uo pipefail
kdir=${KDIR:-/lib/modules/$(uname -r)/build}
rustc=${RUSTC:-rustc}
bindgen=${BINDGEN:-bindgen}
bad=0
warn=0

row() { printf '  %-5s %-22s %s\n' "$1" "$2" "$3"; }
ok() { row ok "$1" "$2"; }
no() { row NO "$1" "$2"; bad=$((bad + 1)); }
note() { row warn "$1" "$2"; warn=$((warn + 1)); }

# conf NAME: the value of CONFIG_NAME in the tree's .config ("" if unset).
conf() {
	sed -n "s/^CONFIG_$1=//p" "$kdir/.config" 2>/dev/null | sed 's/^"\(.*\)"$/\1/' | head -n 1
}

echo "nvidia_peermem_rs: can this node build the module? (KDIR=$kdir)"
if [ ! -f "$kdir/.config" ] || [ ! -f "$kdir/Makefile" ]; then
	no "kernel build tree" "none at $kdir (install the headers package of your kernel, or set KDIR)"
	echo "verdict: NO: no kernel build tree"
	exit 1
fi
release=$(cat "$kdir/include/config/kernel.release" 2>/dev/null || echo '?')
ok "kernel" "$release ($kdir)"

# Architecture: x86_64 and arm64 (Kbuild refuses the others).
if [ "$(conf X86_64)" = y ]; then
	ok "architecture" "x86_64"
elif [ "$(conf ARM64)" = y ]; then
	note "architecture" "arm64: supported by Kbuild, never built nor tested by this project"
else
	no "architecture" "$(sed -n 's/^# Linux\/\([^ ]*\) .*/\1/p' "$kdir/.config" | head -n 1): unsupported (x86_64, arm64 only)"
fi

# Rust support in the kernel.
if [ "$(conf RUST)" = y ]; then
	ok "CONFIG_RUST" "y"
else
	no "CONFIG_RUST" "not set: this kernel cannot load Rust modules (rebuild it with CONFIG_RUST=y)"
fi

# The C compiler the kernel was built with.
# GCC's version text starts with the command (gcc-12,
# x86_64-linux-gnu-gcc-16); clang's does not: clang-<major>, else clang.
cc_text=$(conf CC_VERSION_TEXT)
if [ "$(conf CC_IS_CLANG)" = y ]; then
	cc_kind=clang
	major=$(($(conf CLANG_VERSION) / 10000))
	cc_bin=${CC:-clang-$major}
	command -v "$cc_bin" >/dev/null || [ -n "${CC:-}" ] || cc_bin=clang
else
	cc_kind=gcc
	cc_bin=${CC:-$(awk '{ print $1 }' <<<"$cc_text")}
fi
if [ -z "$cc_text" ]; then
	note "C compiler" "CONFIG_CC_VERSION_TEXT unset"
elif command -v "$cc_bin" >/dev/null; then
	ok "C compiler" "$cc_text ($cc_kind; $cc_bin found$([ "$cc_kind" = gcc ] || echo ": build with LLVM=-$major"))"
else
	no "C compiler" "$cc_text: '$cc_bin' not found (install it, or pass CC=; LLVM=1 for clang kernels)"
fi

# rustc: the very version the kernel's Rust crates were compiled with.
want_rustc=$(conf RUSTC_VERSION_TEXT)
have_rustc=$("$rustc" --version 2>/dev/null || true)
if [ -z "$have_rustc" ]; then
	no "rustc" "'$rustc' not found (the kernel wants: ${want_rustc:-?})"
elif [ -n "$want_rustc" ] && [ "$have_rustc" != "$want_rustc" ]; then
	no "rustc" "$have_rustc, the kernel's is $want_rustc (.rmeta files only load in the rustc that wrote them: E0514)"
else
	ok "rustc" "$have_rustc (as the kernel's)"
fi

# bindgen (this module runs it over its own C headers).
want_bindgen=$(conf BINDGEN_VERSION_TEXT)
have_bindgen=$("$bindgen" --version 2>/dev/null | head -n 1 || true)
if [ -z "$have_bindgen" ]; then
	no "bindgen" "'$bindgen' not found (cargo install bindgen-cli; the kernel used ${want_bindgen:-?})"
elif [ -n "$want_bindgen" ] && [ "$have_bindgen" != "$want_bindgen" ]; then
	note "bindgen" "$have_bindgen, the kernel's is $want_bindgen (usually fine: only our own bindings)"
else
	ok "bindgen" "$have_bindgen"
fi

# The kernel crate as compiled: what an out-of-tree Rust module links to.
missing=()
for f in rust/libkernel.rmeta rust/libcore.rmeta rust/libmacros.so rust/libffi.rmeta; do
	[ -e "$kdir/$f" ] || missing+=("$f")
done
[ "$(conf X86_64)" != y ] || [ -e "$kdir/scripts/target.json" ] || missing+=(scripts/target.json)
if [ ${#missing[@]} -eq 0 ]; then
	ok "Rust build artefacts" "rust/libkernel.rmeta, libmacros.so, ... present"
else
	no "Rust build artefacts" "missing ${missing[*]} (distribution headers packages ship none: docs/compatibility.md)"
fi

# The kernel crate's sources: kmod/compat.mk probes them for the API
# differences between kernels.
src=$(sed -n "s@^include \(/.*\)/Makefile\$@\1@p" "$kdir/Makefile" | head -n 1)
[ -n "$src" ] || src=$kdir
[ -e "$kdir/source" ] && src=$(readlink -f "$kdir/source")
if [ -f "$src/rust/kernel/lib.rs" ]; then
	ok "kernel Rust sources" "$src/rust (kmod/compat.mk probes them)"
else
	no "kernel Rust sources" "no $src/rust/kernel/lib.rs (kmod/compat.mk needs the kernel crate's sources)"
fi

# Informational: what the loader will ask of the module.
[ -f "$kdir/Module.symvers" ] || note "Module.symvers" "missing: undefined kernel symbols cannot be checked at build time"
[ "$(conf MODULE_SIG_FORCE)" != y ] || note "module signing" "CONFIG_MODULE_SIG_FORCE=y: sign the module (DKMS's MOK key) or it will not load"

if [ "$bad" -eq 0 ]; then
	echo "verdict: YES: 'make KDIR=$kdir' (or the DKMS package) can build nvidia_peermem_rs here$( [ "$warn" -eq 0 ] || echo " ($warn warning(s) above)")"
	exit 0
fi
echo "verdict: NO: $bad requirement(s) not met (NO above); see docs/compatibility.md"
exit 1
