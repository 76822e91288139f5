#!/usr/bin/env bash
# `make print-build-env`: can this node's kernel build nvidia_peermem_rs?
# One screen: each requirement, what was found, and a closing verdict with
# what to do. Reads the kernel build tree KDIR (default: the running
# kernel's /lib/modules/$(uname -r)/build); RUSTC, BINDGEN and CC override
# the tools looked for (as they would in the kernel make).
#
# On Ubuntu (ID=ubuntu in /etc/os-release) it also names the packages to
# install, one `apt install` line: linux-headers-<release>,
# linux-lib-rust-<release> (the kernel's compiled Rust crates, under
# /usr/src/linux-lib-rust-<release>/rust), rustc-1.NN (the release the
# kernel records in CONFIG_RUSTC_VERSION_TEXT), bindgen, libclang-dev and
# dkms; and it says when the kernel cannot build Rust modules at all (Rust
# off, or a flavour built without linux-lib-rust): boot the generic kernel.
#
# PEERMEM_SYSROOT=<dir> reads /etc/os-release, /boot, /usr/src, /usr/lib
# and /lib/modules under <dir> (tests); KVER=<release> names the kernel
# when it is not the running one.
# Exit 0 when the module can be built here, 1 when it cannot.
set -uo pipefail
root=${PEERMEM_SYSROOT:-}
kver=${KVER:-}
if [ -z "$kver" ] && [ -n "${KDIR:-}" ] && [ -f "$KDIR/include/config/kernel.release" ]; then
	kver=$(cat "$KDIR/include/config/kernel.release")
fi
[ -n "$kver" ] || kver=$(uname -r)
kdir=${KDIR:-$root/lib/modules/$kver/build}
bindgen=${BINDGEN:-bindgen}
bad=0
warn=0
# Ubuntu packages to install, in `apt install` order.
apt=()
need() {
	local p
	for p in "$@"; do
		[[ " ${apt[*]} " == *" $p "* ]] || apt+=("$p")
	done
}

row() { printf '  %-5s %-22s %s\n' "$1" "$2" "$3"; }
ok() { row ok "$1" "$2"; }
no() { row NO "$1" "$2"; bad=$((bad + 1)); }
note() { row warn "$1" "$2"; warn=$((warn + 1)); }

# has_libclang: libclang, which bindgen loads, is installed.
has_libclang() {
	compgen -G "$root/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null ||
		compgen -G "$root/usr/lib/*-linux-gnu/libclang-*.so*" >/dev/null ||
		compgen -G "$root/usr/lib64/libclang.so*" >/dev/null
}

# The kernel's config: the build tree's, else the one the kernel package
# installs in /boot (Ubuntu nodes without the headers still have it).
kconfig=$kdir/.config
[ -f "$kconfig" ] || kconfig=$root/boot/config-$kver
# Else the running kernel's own config (CONFIG_IKCONFIG_PROC), where the
# kernel came with no /boot nor headers (a cloud provider's, say).
running=$(cat "$root/proc/sys/kernel/osrelease" 2>/dev/null || uname -r)
if [ ! -f "$kconfig" ] && [ "$kver" = "$running" ] && [ -f "$root/proc/config.gz" ]; then
	proc_config=$(mktemp)
	trap 'rm -f "$proc_config"' EXIT
	gzip -dc "$root/proc/config.gz" >"$proc_config" 2>/dev/null && kconfig=$proc_config
fi
# conf NAME: the value of CONFIG_NAME in the kernel's config ("" if unset).
conf() {
	sed -n "s/^CONFIG_$1=//p" "$kconfig" 2>/dev/null | sed 's/^"\(.*\)"$/\1/' | head -n 1
}

# Ubuntu, and the flavour of its kernel (7.0.0-14-generic: generic). A
# kernel on Ubuntu whose release is not of that shape is not Ubuntu's: its
# archive has no headers nor lib-rust package for it, and none is named.
os_id=$(sed -n 's/^ID=//p' "$root/etc/os-release" 2>/dev/null | tr -d '"' | head -n 1)
os_ver=$(sed -n 's/^VERSION_ID=//p' "$root/etc/os-release" 2>/dev/null | tr -d '"' | head -n 1)
flavour=
if [ "$os_id" = ubuntu ] && [[ $kver =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?-[0-9]+-(.+)$ ]]; then
	flavour=${BASH_REMATCH[2]}
fi
# The generic kernel of the release: 24.04's GA 6.8 is older than the
# module supports, its HWE kernel is not.
generic=linux-generic
[ "$os_ver" != 24.04 ] || generic=linux-generic-hwe-24.04
boot_generic="boot the generic kernel: sudo apt install $generic, reboot into it, then run this again"
lib_rust=$root/usr/src/linux-lib-rust-$kver/rust

echo "nvidia_peermem_rs: can this node build the module? (KDIR=$kdir)"
[ -z "$os_id" ] || echo "  os: $os_id ${os_ver}${flavour:+, kernel flavour $flavour}"
[ "$os_id" != ubuntu ] || [ -n "$flavour" ] ||
	echo "  os: kernel $kver is not one of Ubuntu's (its archive has no packages for it)"

# A kernel without Rust, or an Ubuntu flavour built without linux-lib-rust
# (DGX OS's linux-nvidia, the cloud kernels): nothing to install helps.
if [ -f "$kconfig" ] && [ "$(conf RUST)" != y ]; then
	why=
	[[ $flavour != nvidia* ]] || why=" (DGX OS's linux-nvidia kernels are built without Rust)"
	no "CONFIG_RUST" "not set in $kver$why: this kernel cannot build or load Rust modules"
	if [ -n "$flavour" ]; then
		echo "verdict: NO: $boot_generic"
	elif [ "$os_id" = ubuntu ]; then
		echo "verdict: NO: boot a kernel built with CONFIG_RUST=y, such as Ubuntu's generic kernel (sudo apt install $generic, reboot into it, then run this again)"
	else
		echo "verdict: NO: boot a kernel built with CONFIG_RUST=y (README: 'Does it run on my node?')"
	fi
	exit 1
fi
case ${flavour%-64k} in
azure | gcp | gke | aws | oracle | nvidia)
	if [ ! -e "$lib_rust/libkernel.rmeta" ] && [ ! -e "$kdir/rust/libkernel.rmeta" ]; then
		no "linux-lib-rust" "Ubuntu builds its -${flavour%-64k} kernels without linux-lib-rust: no Rust crates to build against"
		echo "verdict: NO: $boot_generic"
		exit 1
	fi
	;;
esac

if [ ! -f "$kdir/.config" ] || [ ! -f "$kdir/Makefile" ]; then
	if [ -n "$flavour" ]; then
		no "kernel build tree" "none at $kdir"
		need "linux-headers-$kver" "linux-lib-rust-$kver"
		rpkg=$(sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\..*/rustc-\1.\2/p' <<<"$(conf RUSTC_VERSION_TEXT)")
		[ -z "$rpkg" ] || command -v "$rpkg" >/dev/null || need "$rpkg"
		command -v "$bindgen" >/dev/null || need bindgen
		has_libclang || need libclang-dev
		command -v dkms >/dev/null || need dkms
		echo "install: sudo apt install ${apt[*]}"
		echo "verdict: NO: install the packages above, then run this again"
		exit 1
	fi
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
# Distributions ship it versioned (Ubuntu: rustc-1.93 for "rustc 1.93.1
# ..."): that name first, unless RUSTC says which.
want_rustc=$(conf RUSTC_VERSION_TEXT)
rustc_pkg=$(sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\..*/rustc-\1.\2/p' <<<"$want_rustc")
rustc=${RUSTC:-}
if [ -z "$rustc" ]; then
	rustc=rustc
	[ -z "$rustc_pkg" ] || ! command -v "$rustc_pkg" >/dev/null || rustc=$rustc_pkg
fi
have_rustc=$("$rustc" --version 2>/dev/null || true)
if [ -z "$have_rustc" ]; then
	no "rustc" "'$rustc' not found (the kernel wants: ${want_rustc:-?})"
	[ -z "$rustc_pkg" ] || need "$rustc_pkg"
elif [ -n "$want_rustc" ] && [ "$have_rustc" != "$want_rustc" ]; then
	no "rustc" "$have_rustc, the kernel's is $want_rustc (.rmeta files only load in the rustc that wrote them: E0514)"
	[ -z "$rustc_pkg" ] || need "$rustc_pkg"
else
	ok "rustc" "$have_rustc (as the kernel's)"
fi

# bindgen (this module runs it over its own C headers).
want_bindgen=$(conf BINDGEN_VERSION_TEXT)
have_bindgen=$("$bindgen" --version 2>/dev/null | head -n 1 || true)
if [ -z "$have_bindgen" ]; then
	no "bindgen" "'$bindgen' not found (Ubuntu: apt install bindgen; else cargo install bindgen-cli; the kernel used ${want_bindgen:-?})"
	need bindgen
elif [ -n "$want_bindgen" ] && [ "$have_bindgen" != "$want_bindgen" ]; then
	note "bindgen" "$have_bindgen, the kernel's is $want_bindgen (usually fine: only our own bindings)"
else
	ok "bindgen" "$have_bindgen"
fi

# libclang, which bindgen loads at run time.
if has_libclang; then
	ok "libclang" "found (bindgen loads it)"
else
	no "libclang" "not found: bindgen cannot run (Debian/Ubuntu: apt install libclang-dev)"
	need libclang-dev
fi

# The kernel crate as compiled: what an out-of-tree Rust module links to.
# Ubuntu moves it out of the headers into linux-lib-rust-<release>, which
# the headers' rust link points to; on HWE kernels that link names a
# directory no package installs, and the build looks in linux-lib-rust
# itself.
rustdir=$kdir/rust
hwe_fix=
if [ -L "$rustdir" ] && [ ! -e "$rustdir" ]; then
	target=$(readlink "$rustdir")
	missing_dir=${target%/rust}
	if [[ $missing_dir == ../* ]] && [[ ${missing_dir#../} != */* ]]; then
		hwe_fix="sudo ln -s linux-lib-rust-$kver /usr/src/${missing_dir#../}"
	fi
	rustdir=$lib_rust
	note "rust link" "$kdir/rust points to the missing $target (Ubuntu HWE packaging): the build uses $lib_rust${hwe_fix:+; other out-of-tree Rust builds need: $hwe_fix}"
elif [ ! -e "$rustdir/libkernel.rmeta" ] && [ -e "$lib_rust/libkernel.rmeta" ]; then
	rustdir=$lib_rust
fi
missing=()
for f in libkernel.rmeta libcore.rmeta libmacros.so libffi.rmeta; do
	[ -e "$rustdir/$f" ] || missing+=("rust/$f")
done
[ "$(conf X86_64)" != y ] || [ -e "$kdir/scripts/target.json" ] || missing+=(scripts/target.json)
if [ ${#missing[@]} -eq 0 ]; then
	ok "Rust build artefacts" "$rustdir: libkernel.rmeta, libmacros.so, ... present"
elif [ -n "$flavour" ]; then
	no "Rust build artefacts" "missing ${missing[*]} (Ubuntu ships them in linux-lib-rust-$kver)"
	need "linux-lib-rust-$kver"
else
	no "Rust build artefacts" "missing ${missing[*]} (distribution headers packages ship none: docs/compatibility.md)"
fi

# DKMS builds the module for each new kernel.
if [ "$os_id" = ubuntu ] && ! command -v dkms >/dev/null; then
	no "dkms" "not installed: the package builds the module through it"
	need dkms
fi

# Informational: what the loader will ask of the module.
[ -f "$kdir/Module.symvers" ] || note "Module.symvers" "missing: undefined kernel symbols cannot be checked at build time"
[ "$(conf MODULE_SIG_FORCE)" != y ] || note "module signing" "CONFIG_MODULE_SIG_FORCE=y: sign the module (DKMS's MOK key) or it will not load"

if [ "$bad" -eq 0 ]; then
	echo "verdict: YES: 'make KDIR=$kdir' (or the DKMS package) can build nvidia_peermem_rs here$( [ "$warn" -eq 0 ] || echo " ($warn warning(s) above)")"
	exit 0
fi
[ ${#apt[@]} -eq 0 ] || echo "install: sudo apt install ${apt[*]}"
echo "verdict: NO: $bad requirement(s) not met (NO above); see docs/compatibility.md"
exit 1
