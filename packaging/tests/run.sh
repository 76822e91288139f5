#!/usr/bin/env bash
# "A && B || die ...": die when either fails, which is what is meant here.
# shellcheck disable=SC2015
# SPDX-License-Identifier: GPL-2.0
#
# make packaging-test: every packaging item, exercised without touching the
# host. Writes only below $PKG_OUT (default build/packaging) and a temp dir:
# dkms runs with --dkmstree/--sourcetree/--installtree in the temp dir,
# --no-depmod, no module signing; modprobe only in dry-run against a scratch
# module root; nothing is loaded, installed or enabled on this machine.
#
# Environment:
#   PACKAGING_KDIR  Rust-enabled kernel build tree (default: the test bed's,
#                   tests/kernel/build-kernel.sh, cached)
#   PACKAGING_VM=0  skip booting tests/vm/suites/packaging.suite (make test
#                   boots it itself with PEERMEM_VM_EXTRA=$PKG_OUT/vm-extra)
#   PACKAGING_JOBS  make -j for the DKMS build (default 2)
#   PACKAGING_TESTS only these tests (names as in summary.txt, separated by
#                   spaces; host-untouched always runs). The kernel tree is
#                   then taken from PACKAGING_KDIR only, never built.
#
# Results: $PKG_OUT/test/*.log, summary.txt; last line
# "packaging: N passed, N failed"; exit 0 only when all passed.
set -uo pipefail

# The builds below must see what dkms on a node sees, not the flags (-s,
# -j, variables) of the make that started this script.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
pkg=$(cd "$(dirname "$0")/.." && pwd)
repo=$(dirname "$pkg")
out=${PKG_OUT:-$repo/build/packaging}
res=$out/test
name=nvidia-peermem-rs
version=$(cat "$repo/VERSION")
jobs=${PACKAGING_JOBS:-2}
rm -rf "$res"
mkdir -p "$res"
T=$(mktemp -d /tmp/peermem-pkgtest.XXXXXX)
trap 'rm -rf "$T"' EXIT

passed=0
failed=0
ok() {
	echo "ok   $*" | tee -a "$res/summary.txt"
	passed=$((passed + 1))
}
bad() {
	echo "FAIL $*" | tee -a "$res/summary.txt"
	failed=$((failed + 1))
}
# selected NAME: NAME is to run (PACKAGING_TESTS empty, or lists it).
selected() {
	[ -z "${PACKAGING_TESTS:-}" ] || [ "$1" = host-untouched ] || [[ " $PACKAGING_TESTS " == *" $1 "* ]]
}
# t NAME COMMAND...: one test; its output goes to $res/NAME.log.
t() {
	local n=$1
	shift
	selected "$n" || return 0
	# A subshell: a test that trips over `set -u` fails alone.
	if ("$@") >"$res/$n.log" 2>&1; then
		ok "$n"
	else
		bad "$n (log: $res/$n.log)"
		tail -n 15 "$res/$n.log" | sed 's/^/     | /'
	fi
}
# In a test body (a subshell, see t): say why, and end that test failed.
die() {
	echo "error: $*"
	exit 1
}
# The tool's package takes the release build (test_deb_tool makes it).
tool_bin=$repo/target/release/peermem-check
# The named build unless the caller says PEERMEM_DROPIN=1 (a later
# assignment on make's command line wins); the default's own tests call
# make without it.
mk() { make --no-print-directory -f "$pkg/packaging.mk" PKG_OUT="$out" PKG_TOOL_BIN="$tool_bin" PEERMEM_DROPIN=0 "$@"; }

# --- inputs ----------------------------------------------------------------
kdir=${PACKAGING_KDIR:-}
if [ -z "$kdir" ] && [ -z "${PACKAGING_TESTS:-}" ]; then
	kdir=$("$repo/tests/kernel/build-kernel.sh" 2>"$res/kernel.log") || kdir=
fi
kver=
[ -n "$kdir" ] && kver=$(cat "$kdir/include/config/kernel.release" 2>/dev/null)
echo "packaging-test: version $version, kernel ${kver:-none} (${kdir:-no KDIR})"

# --- static checks ---------------------------------------------------------
test_shellcheck() {
	command -v shellcheck >/dev/null || die "shellcheck missing (packaging/deps.txt)"
	shellcheck -s sh "$pkg/libexec/nvidia-peermem-rs-guard" "$pkg/libexec/nvidia-peermem-rs-rebuild" "$pkg/deb/build-deb.sh" "$pkg/deb/build-tool-deb.sh" \
		"$repo/tests/scenarios/packaging_dkms_load.sh" &&
		shellcheck -s bash "$repo/scripts/print-build-env.sh" &&
		shellcheck -s bash "$pkg/tests/run.sh" &&
		for s in postinst prerm postrm; do
			sed -e "s/@NAME@/$name/g" -e "s/@VERSION@/$version/g" "$pkg/deb/$s.in" >"$T/$s"
			shellcheck -s sh "$T/$s" || return 1
		done
}

test_dkms_conf() {
	# dkms sources dkms.conf with these set; read it the same way, for a
	# kernel with what the build needs (Rust metadata, the exporters in
	# modules.symbols) and, without them, AUTOINSTALL off.
	local k=$T/dc/k
	mkdir -p "$k/rust" "$T/dc/lib/modules/6.12.0-test" && touch "$k/rust/libkernel.rmeta" &&
		printf 'CONFIG_RUST=y\n' >"$k/.config" &&
		printf 'alias symbol:%s %s\n' nvidia_p2p_get_pages nvidia ib_register_peer_memory_client ib_uverbs \
			>"$T/dc/lib/modules/6.12.0-test/modules.symbols" || return 1
	(
		# shellcheck disable=SC2034
		kernelver=6.12.0-test kernel_source_dir=$k ksourcedir_fromcli=1 dkms_tree=/d
		# shellcheck disable=SC2030,SC2031,SC2034
		PEERMEM_SYSROOT=$T/dc PEERMEM_BUILD_CONF=$T/none
		# shellcheck disable=SC1091
		. "$pkg/dkms/dkms.conf" || exit 1
		set -x
		[ "$PACKAGE_NAME" = "$name" ] &&
			[ -n "$PACKAGE_VERSION" ] &&
			[ "${BUILT_MODULE_NAME[0]}" = nvidia_peermem_rs ] &&
			[ "${DEST_MODULE_LOCATION[0]}" = /updates/dkms ] &&
			[[ "${MAKE[0]}" == *"KDIR=$k"* ]] &&
			[[ "${MAKE[0]}" == *"KVER=6.12.0-test"* ]] &&
			[ "$BUILD_EXCLUSIVE_CONFIG" = CONFIG_RUST ] &&
			[ "$AUTOINSTALL" = yes ]
	) || return 1
	rm "$k/rust/libkernel.rmeta"
	(
		# shellcheck disable=SC2034
		kernelver=6.12.0-test kernel_source_dir=$k ksourcedir_fromcli=1 dkms_tree=/d
		# shellcheck disable=SC2030,SC2031,SC2034
		PEERMEM_SYSROOT=$T/dc PEERMEM_BUILD_CONF=$T/none
		# shellcheck disable=SC1091
		. "$pkg/dkms/dkms.conf" || exit 1
		set -x
		[ -z "$AUTOINSTALL" ]
	)
}

# A plain `make` (the top-level Makefile) without a kernel tree stops with
# the DKMS Makefile's one-line reason, not with make's "No such file".
test_make_no_kernel() {
	local o
	o=$(make --no-print-directory -C "$repo" KDIR="$T/no-kernel-tree" module 2>&1)
	echo "$o"
	[[ "$o" == *"nvidia-peermem-rs: error: no kernel build tree at KDIR=$T/no-kernel-tree"* ]] ||
		die "make without a kernel tree did not give the build's error"
	[[ "$o" != *"No such file or directory"* ]] || die "make went on into the missing tree"
}

# --- make print-build-env on Ubuntu-shaped nodes -------------------------------
# Staged trees laid out as Ubuntu's packages lay them out: the kernel's
# config in /boot, linux-headers-<v> without Rust sources and with its
# rust link, linux-lib-rust-<v>/rust with the compiled crates, the kernel's
# rustc as rustc-1.NN. The programs come from a PATH holding only stubs and
# the few tools the script uses, so the host's own rustc, bindgen and dkms
# never count.
test_print_build_env_ubuntu() {
	local d=$T/pbe tools=$T/pbe-tools o rc
	rm -rf "$d" "$tools" && mkdir -p "$d" "$tools" || return 1
	local tool
	for tool in bash sh sed cat head tr readlink awk uname grep sort env dirname basename gzip mktemp rm \
		modinfo objdump zstd xz; do
		ln -s "$(command -v "$tool")" "$tools/$tool" || die "no $tool on this host"
	done
	stub() { # ROOT NAME OUTPUT
		mkdir -p "$1/bin" && printf '#!/bin/sh\necho "%s"\n' "$3" >"$1/bin/$2" && chmod 755 "$1/bin/$2"
	}
	node() { # NAME VERSION_ID KVER RUST(y|n) RUSTC_TEXT: /etc/os-release and /boot/config
		local r=$d/$1
		mkdir -p "$r/etc" "$r/boot" "$r/lib/modules/$3"
		printf 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="%s"\n' "$2" >"$r/etc/os-release"
		{
			echo CONFIG_X86_64=y
			if [ "$4" = y ]; then echo CONFIG_RUST=y; else echo '# CONFIG_RUST is not set'; fi
			echo "CONFIG_RUSTC_VERSION_TEXT=\"$5\""
			echo 'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-15 (Ubuntu 15.2.0-4ubuntu4) 15.2.0"'
			echo 'CONFIG_BINDGEN_VERSION_TEXT="bindgen 0.72.1"'
			echo CONFIG_MODVERSIONS=y
			echo CONFIG_DEBUG_INFO_BTF_MODULES=y
			echo CONFIG_PAHOLE_VERSION=125
		} >"$r/boot/config-$3"
	}
	installed() { # NAME KVER RUSTC_PKG RUSTC_TEXT RUST_LINK: what apt install puts there
		local r=$1 h=$d/$1/usr/src/linux-headers-$2
		r=$d/$r
		mkdir -p "$h/include/config" "$h/scripts" "$r/usr/src/linux-lib-rust-$2/rust" "$r/usr/lib/llvm-21/lib"
		# (vmlinux: the BTF-only one Ubuntu's headers ship)
		cp "$r/boot/config-$2" "$h/.config" && touch "$h/Makefile" "$h/scripts/target.json" "$h/vmlinux" &&
			echo "$2" >"$h/include/config/kernel.release" || return 1
		ln -sfn "$5" "$h/rust"
		rm -rf "$r/lib/modules/$2/build" && ln -s "$h" "$r/lib/modules/$2/build"
		local f
		for f in libkernel.rmeta libcore.rmeta libmacros.so libffi.rmeta; do
			touch "$r/usr/src/linux-lib-rust-$2/rust/$f"
		done
		touch "$r/usr/lib/llvm-21/lib/libclang.so.1"
		# The archive's DOCA-OFED (exports in ib_uverbs) and NVIDIA's
		# precompiled driver, where their packages put them.
		local m=$r/lib/modules/$2/kernel
		pd_mod "$m/doca-ofed-3.4/ib_uverbs.ko.zst" ib_uverbs ib_register_peer_memory_client=0x1 &&
			pd_mod "$m/doca-ofed-3.4/ib_core.ko.zst" ib_core ib_register_client=0x2 &&
			pd_mod "$m/nvidia-580-open/nvidia.ko" nvidia nvidia_p2p_get_pages=0x3 &&
			pd_mod "$m/nvidia-580-open/nvidia-peermem.ko" nvidia_peermem &&
			depmod -b "$r" "$2" 2>/dev/null || return 1
		stub "$r" pahole "v1.30" &&
			stub "$r" "$3" "$4" && stub "$r" bindgen "bindgen 0.72.1" && stub "$r" dkms "dkms-3.2.0" &&
			stub "$r" x86_64-linux-gnu-gcc-15 "x86_64-linux-gnu-gcc-15 (Ubuntu 15.2.0-4ubuntu4) 15.2.0"
	}
	pbe() { # NAME KVER: run the script as `make print-build-env` does on that node
		o=$(env -i PATH="$d/$1/bin:$tools" PEERMEM_SYSROOT="$d/$1" KVER="$2" \
			KDIR="$d/$1/lib/modules/$2/build" bash "$repo/scripts/print-build-env.sh" 2>&1)
		rc=$?
		echo "--- $1 ($2): exit $rc"
		echo "$o"
	}
	has() { [[ "$o" == *"$1"* ]] || die "expected: $1"; }
	local ga=7.0.0-14-generic hwe=6.17.0-14-generic
	local r2604="rustc 1.93.1 (01f6ddf75 2026-02-11) (built from a source tarball)"
	local rhwe="rustc 1.82.0 (f6e511eec 2024-10-15) (built from a source tarball)"
	# 26.04 GA, nothing installed but the kernel: every package named.
	node ga 26.04 "$ga" y "$r2604"
	pbe ga "$ga"
	[ "$rc" = 1 ] || die "a node without headers passed"
	has "install: sudo apt install linux-headers-$ga linux-lib-rust-$ga rustc-1.93 bindgen libclang-dev dkms dwarves"
	# Everything installed: the kernel's rustc found as rustc-1.93, the
	# crates through the headers' rust link.
	installed ga "$ga" rustc-1.93 "$r2604" "../linux-lib-rust-$ga/rust" || return 1
	pbe ga "$ga"
	[ "$rc" = 0 ] || die "the 26.04 node with every package installed cannot build"
	has "ok    rustc                  $r2604 (as the kernel's)"
	has "verdict: YES"
	[[ "$o" != *"install:"* ]] || die "asks to install something on a complete node"
	has "PeerDirect core        $d/ga/lib/modules/$ga/kernel/doca-ofed-3.4/ib_uverbs.ko.zst exports ib_register_peer_memory_client"
	has "NVIDIA driver          modprobe loads $d/ga/lib/modules/$ga/kernel/nvidia-580-open/nvidia.ko"
	has "pahole                 version 130"
	has "nvidia-peermem         modprobe loads $d/ga/lib/modules/$ga/kernel/nvidia-580-open/nvidia-peermem.ko (the driver's) until the drop-in is installed"
	# Running that kernel with the inbox stack still loaded since boot.
	mkdir -p "$d/ga/proc/sys/kernel" "$d/ga/sys/module/ib_uverbs"
	echo "$ga" >"$d/ga/proc/sys/kernel/osrelease"
	printf '0000000000000000 T ib_umem_get\t[ib_uverbs]\n' >"$d/ga/proc/kallsyms"
	pbe ga "$ga"
	has "loaded RDMA stack      has no PeerDirect"
	has "reboot (or reload the RDMA stack)"
	printf '0000000000000000 T ib_register_peer_memory_client\t[ib_uverbs]\n' >>"$d/ga/proc/kallsyms"
	pbe ga "$ga"
	has "loaded RDMA stack      has PeerDirect (ib_register_peer_memory_client	[ib_uverbs])"
	# The drop-in installed by DKMS: it is what modprobe nvidia-peermem loads.
	pd_mod "$d/ga/lib/modules/$ga/updates/dkms/nvidia_peermem.ko" nvidia_peermem &&
		mkdir -p "$T/pbe-depmod.d" && cp "$pkg/depmod.d/$name-dropin.conf" "$T/pbe-depmod.d/" &&
		echo 'search updates ubuntu built-in' >"$T/pbe-depmod.d/ubuntu.conf" &&
		depmod -b "$d/ga" -C "$T/pbe-depmod.d" "$ga" 2>/dev/null || return 1
	pbe ga "$ga"
	has "nvidia-peermem         modprobe loads the drop-in, $d/ga/lib/modules/$ga/updates/dkms/nvidia_peermem.ko"
	# No pahole: the one thing missing, named.
	rm "$d/ga/bin/pahole"
	pbe ga "$ga"
	[ "$rc" = 1 ] || die "a BTF kernel without pahole passed"
	has "pahole                 not found"
	has "install: sudo apt install dwarves"
	stub "$d/ga" pahole "v1.30"
	# Only the inbox stack: no PeerDirect core, and what to install.
	rm -r "$d/ga/lib/modules/$ga/kernel/doca-ofed-3.4"
	pd_mod "$d/ga/lib/modules/$ga/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" ib_uverbs ib_umem_get=0x4 &&
		depmod -b "$d/ga" "$ga" 2>/dev/null || return 1
	pbe ga "$ga"
	[ "$rc" = 1 ] || die "a node without PeerDirect passed"
	has "NO    PeerDirect core        modprobe would load $d/ga/lib/modules/$ga/kernel/drivers/infiniband/core/ib_uverbs.ko.zst, without ib_register_peer_memory_client"
	has "install DOCA-OFED"
	rm -rf "$d/ga/proc" "$d/ga/sys"
	# Only the kernel's rustc missing (a rustup rustc of the same number is not it).
	rm "$d/ga/bin/rustc-1.93" && stub "$d/ga" rustc "rustc 1.93.1 (01f6ddf75 2026-02-11)"
	pbe ga "$ga"
	[ "$rc" = 1 ] || die "a rustup rustc was taken for the kernel's"
	has "install: sudo apt install rustc-1.93"
	# 24.04 HWE 6.17: the headers' rust link dangles; the build uses
	# linux-lib-rust, and the fix for other builds is spelled out.
	node hwe 24.04 "$hwe" y "$rhwe"
	installed hwe "$hwe" rustc-1.82 "$rhwe" "../linux-hwe-6.17-lib-rust-$hwe/rust" || return 1
	pbe hwe "$hwe"
	[ "$rc" = 0 ] || die "the HWE node cannot build"
	has "points to the missing ../linux-hwe-6.17-lib-rust-$hwe/rust"
	has "sudo ln -s linux-lib-rust-$hwe /usr/src/linux-hwe-6.17-lib-rust-$hwe"
	has "$d/hwe/usr/src/linux-lib-rust-$hwe/rust: libkernel.rmeta"
	# DGX OS's linux-nvidia: Rust off.
	node nv 24.04 6.8.0-1020-nvidia n ""
	pbe nv 6.8.0-1020-nvidia
	[ "$rc" = 1 ] || die "linux-nvidia passed"
	has "DGX OS's linux-nvidia kernels are built without Rust"
	has "verdict: NO: boot the generic kernel: sudo apt install linux-generic-hwe-24.04"
	# An azure kernel: no linux-lib-rust for that flavour.
	node az 26.04 7.0.0-1004-azure y "$r2604"
	pbe az 7.0.0-1004-azure
	[ "$rc" = 1 ] || die "azure without lib-rust passed"
	has "Ubuntu builds its -azure kernels without linux-lib-rust"
	has "verdict: NO: boot the generic kernel: sudo apt install linux-generic,"
	# A cloud machine's kernel on Ubuntu 24.04 (as on a GPU node seen):
	# not Ubuntu's, no /boot nor /lib/modules, its config only in
	# /proc/config.gz, Rust off. No Ubuntu package is named for it.
	local fc=6.18.44-fc-v657-gpu
	mkdir -p "$d/fc/etc" "$d/fc/proc/sys/kernel"
	printf 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n' >"$d/fc/etc/os-release"
	echo "$fc" >"$d/fc/proc/sys/kernel/osrelease"
	printf 'CONFIG_X86_64=y\nCONFIG_RUSTC_VERSION=0\nCONFIG_MODULES=y\n' | gzip >"$d/fc/proc/config.gz"
	pbe fc "$fc"
	[ "$rc" = 1 ] || die "a kernel without Rust passed"
	has "kernel $fc is not one of Ubuntu's"
	has "CONFIG_RUST            not set in $fc"
	has "verdict: NO: boot a kernel built with CONFIG_RUST=y, such as Ubuntu's generic kernel (sudo apt install linux-generic-hwe-24.04"
	[[ "$o" != *"linux-headers-$fc"* ]] || die "names an Ubuntu package for a kernel not Ubuntu's"
	# The same kernel with Rust: no build tree, and still no package named.
	printf 'CONFIG_X86_64=y\nCONFIG_RUST=y\n' | gzip >"$d/fc/proc/config.gz"
	pbe fc "$fc"
	[ "$rc" = 1 ] || die "a node without a build tree passed"
	has "kernel build tree      none at"
	[[ "$o" != *"apt install"* ]] || die "names an Ubuntu package for a kernel not Ubuntu's"
}

# --- systemd unit -------------------------------------------------------------
test_systemd_verify() {
	systemd-analyze verify --man=no "$pkg/systemd/$name.service"
	local rc=$?
	# verify prints problems but may still exit 0 on some: any output fails.
	[ $rc = 0 ] && [ -z "$(systemd-analyze verify --man=no "$pkg/systemd/$name.service" 2>&1)" ]
}

# The unit's conditions, evaluated by systemd itself against fake roots:
# it runs only with the RDMA core and (the nvidia module or /proc/driver/nvidia).
test_systemd_conditions() {
	local unit=$pkg/systemd/$name.service conds=() c
	mapfile -t conds < <(grep '^Condition' "$unit")
	[ ${#conds[@]} -ge 3 ] || die "expected 3 conditions, got: ${conds[*]}"
	check_case() { # EXPECT(0 run|1 skip) PATHS-THAT-EXIST...
		local want=$1 root=$T/cond.$RANDOM args=()
		shift
		mkdir -p "$root"
		for p in "$@"; do mkdir -p "$root$p"; done
		for c in "${conds[@]}"; do
			args+=("$(printf '%s' "$c" | sed "s#=\(|\{0,1\}\)/#=\1$root/#")")
		done
		systemd-analyze condition "${args[@]}" >/dev/null 2>&1
		local got=$?
		[ "$got" -eq 0 ] && got=0 || got=1
		echo "exists: ${*:-nothing} -> $([ $got = 0 ] && echo runs || echo skipped)"
		[ "$got" = "$want" ] || die "expected $([ "$want" = 0 ] && echo runs || echo skipped)"
	}
	check_case 1 &&
		check_case 1 /sys/module/ib_core &&
		check_case 1 /sys/module/nvidia /proc/driver/nvidia &&
		check_case 0 /sys/module/ib_core /sys/module/nvidia &&
		check_case 0 /sys/module/ib_core /proc/driver/nvidia &&
		grep -q '^After=.*openibd.service' "$unit" &&
		grep -q '^After=.*nvidia-persistenced.service' "$unit" &&
		grep -q '^Type=oneshot' "$unit" &&
		grep -q '^ExecStart=/sbin/modprobe nvidia_peermem_rs$' "$unit"
}

# --- the guard ------------------------------------------------------------------
test_guard() {
	local g=$pkg/libexec/$name-guard sys=$T/guard-sys kmsg=$T/kmsg err=$T/guard.err
	mkdir -p "$sys/module"
	: >"$kmsg"
	run() { NVIDIA_PEERMEM_RS_SYSFS=$sys NVIDIA_PEERMEM_RS_KMSG=$kmsg "$g" "$@" 2>"$err"; }
	expect() { # STATUS [MODULE]
		run "${@:2}"
		local rc=$?
		echo "guard ${2:-} with [$(find "$sys/module" -mindepth 1 -printf '%f ')] -> $rc: $(cat "$err")"
		[ "$rc" = "$1" ] || die "expected exit $1"
	}
	expect 0 nvidia_peermem_rs && expect 0 nvidia_peermem && expect 0 nv_peer_mem &&
		mkdir "$sys/module/nvidia_peermem" &&
		expect 1 nvidia_peermem_rs &&
		grep -q "refusing to load nvidia_peermem_rs: nvidia_peermem is loaded" "$err" &&
		grep -q "^<4>$name-guard: refusing to load nvidia_peermem_rs" "$kmsg" &&
		expect 0 nvidia_peermem &&
		rmdir "$sys/module/nvidia_peermem" && mkdir "$sys/module/nv_peer_mem" &&
		expect 1 nvidia-peermem-rs &&
		grep -q "nv_peer_mem is loaded" "$err" &&
		rmdir "$sys/module/nv_peer_mem" && mkdir "$sys/module/nvidia_peermem_rs" &&
		expect 0 nvidia_peermem_rs &&
		expect 1 nvidia_peermem && expect 1 nv-peer-mem &&
		expect 2 && expect 2 ib_core
}

# --- make install / uninstall ------------------------------------------------------
# The expected list (packaging/expected/install-files.txt) with @PREFIX@ and
# @VERSION@ filled in and @MODULE_SOURCES@ expanded to the module's files
# as committed to git, less the KUnit module's sources (test-only: the
# KUnit module is built only with PEERMEM_KUNIT=1, never by DKMS).
test_only_sources='^(kmod/nvidia_peermem_rs_kunit\.rs|kmod/kunit\.rs|kmod/kunit/.*|ffi/shim_kunit\.c)$'
expected_files() { # PREFIX(without leading /) SYSTEMD_DIR DOC_DIR
	local prefix=$1 unitdir=$2 docdir=$3 srcs
	srcs=$(cd "$repo" && git ls-files --cached -- VERSION Kbuild kmod ffi |
		grep -Ev "$test_only_sources" |
		LC_ALL=C sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
	sed -e '/^#/d' -e '/^$/d' -e "s|@UNITDIR@|$unitdir|" -e "s|@DOCDIR@|$docdir|" \
		-e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$pkg/expected/install-files.txt" |
		while read -r l; do
			case "$l" in
			*@MODULE_SOURCES@) for f in $srcs; do echo "${l%@MODULE_SOURCES@}$f"; done ;;
			*) echo "$l" ;;
			esac
		done | LC_ALL=C sort
}

staged_install() { # PREFIX (e.g. /usr/local)
	local prefix=$1 d=$T/destdir$RANDOM p
	p=${prefix#/}
	mk install DESTDIR="$d" PREFIX="$prefix" || return 1
	local got=$res/install-${p//\//_}.files
	(cd "$d" && find . \( -type f -o -type l \) | sed 's|^\./||' | LC_ALL=C sort) >"$got"
	expected_files "$p" "$p/lib/systemd/system" "$p/share/doc/$name" >"$T/expected"
	echo "--- files installed with PREFIX=$prefix (vs packaging/expected/install-files.txt)"
	diff -u "$T/expected" "$got" || die "installed file list differs from the expected list"
	mk -s packaging-print-files PREFIX="$prefix" >"$T/printed"
	diff -u "$T/expected" "$T/printed" || die "packaging-print-files differs"
	# Contents: the DKMS tree holds the repository's files unchanged.
	local src=$d/usr/src/$name-$version f
	for f in $(cd "$src" && find VERSION Kbuild kmod ffi -type f); do
		cmp "$repo/$f" "$src/$f" || die "$f differs from the repository"
	done
	# Paths inside the files follow PREFIX.
	grep -q "$prefix/libexec/$name/$name-guard nvidia_peermem_rs;" "$d/etc/modprobe.d/$name.conf" ||
		die "modprobe.d file does not call $prefix/libexec/$name/$name-guard"
	grep -q "^Documentation=file:$prefix/share/doc/$name/README.md" \
		"$d/$p/lib/systemd/system/$name.service" || die "unit's Documentation= not under $prefix"
	grep -q "^PEERMEM_BUILD_CONF ?= /etc/$name/build.conf" "$src/Makefile" || die "build.conf path"
	[ "$(stat -c %a "$d/$p/libexec/$name/$name-guard")" = 755 ] || die "guard is not 0755"
	[ -z "$(find "$d" -type f ! -path "*/libexec/*" -perm /111)" ] || die "executable data files"
	systemd-analyze verify --man=no "$d/$p/lib/systemd/system/$name.service" || die "installed unit"
	mk uninstall DESTDIR="$d" PREFIX="$prefix" || return 1
	local left
	left=$(cd "$d" && find . -type f -o -type l)
	[ -z "$left" ] || die "left after uninstall: $left"
	echo "uninstall removed every file"
}
test_install_usr_local() { staged_install /usr/local; }
test_install_usr() { staged_install /usr; }

# --- modprobe.d, dry-run against a scratch module root ----------------------------------
# modprobe runs the install line (kmod would skip it if the module had a
# softdep); the line runs the guard, loads ib_core and nvidia, then the
# module itself with the options.
test_modprobe() {
	local root=$T/mproot kv=6.12.0-mptest ko conf=$T/modprobe.d
	ko=$(find "$kdir" "$repo/tests/fixtures" -name '*.ko' 2>/dev/null | head -n 1)
	[ -n "$ko" ] || die "no .ko to stand in for modules"
	mkdir -p "$root/lib/modules/$kv/kernel" "$root/lib/modules/$kv/updates/dkms" "$conf"
	for m in ib_core nvidia nvidia_peermem nv_peer_mem; do
		cp "$ko" "$root/lib/modules/$kv/kernel/$m.ko"
	done
	cp "$ko" "$root/lib/modules/$kv/updates/dkms/nvidia_peermem_rs.ko"
	depmod -b "$root" "$kv" 2>/dev/null || die "depmod -b"
	# No active softdep for a module with an install line: kmod ignores the
	# install line of a module that has one (checked here too).
	grep -Eq '^softdep +(nvidia_peermem_rs|nvidia_peermem|nv_peer_mem) ' "$pkg/modprobe.d/$name.conf" &&
		die "a softdep line would switch the install guard off"
	mkdir -p "$T/softdep.d"
	printf 'install nvidia_peermem_rs /bin/true\nsoftdep nvidia_peermem_rs pre: ib_core\n' >"$T/softdep.d/x.conf"
	modprobe -n -v -C "$T/softdep.d" -d "$root" -S "$kv" nvidia_peermem_rs 2>&1 | grep -q '^install' &&
		die "this kmod runs install lines despite a softdep: the softdep could be restored"
	sed 's/^#options /options /' "$pkg/modprobe.d/$name.conf" >"$conf/$name.conf"
	modprobe -n -v -C "$conf" -d "$root" -S "$kv" nvidia_peermem_rs >"$T/dry" 2>&1
	cat "$T/dry"
	[ "$(wc -l <"$T/dry")" = 1 ] && [ "$(cut -c1-8 "$T/dry")" = "install " ] ||
		die "modprobe does not run the install line"
	# Run the install line the way modprobe does (sh -c, $CMDLINE_OPTS
	# replaced by the options), with a stub modprobe and the repository's
	# guard, against a fake /sys.
	local cmd stub=$T/stub-modprobe sys=$T/mp-sys
	mkdir -p "$sys/module"
	printf '#!/bin/sh\necho "$@" >>%s/stub.log\n' "$T" >"$stub"
	chmod 755 "$stub"
	# The dry run prints "install <command> <options>"; kmod runs <command>
	# with $CMDLINE_OPTS replaced by <options>.
	local tmpl opts
	tmpl=$(sed -n 's/^install nvidia_peermem_rs //p' "$conf/$name.conf")
	opts=$(sed 's/ *$//' "$T/dry")
	opts=${opts#"install $tmpl"}
	opts=${opts# }
	[ "$opts" = "peerdirect_support=0 persistent_api_support=1" ] ||
		die "modprobe does not pass the options line (got '$opts')"
	# shellcheck disable=SC2016 # the literal text $CMDLINE_OPTS
	cmd=${tmpl//'$CMDLINE_OPTS'/$opts}
	cmd=${cmd//\/sbin\/modprobe/$stub}
	cmd=${cmd//\/usr\/libexec\/$name\/$name-guard/$pkg\/libexec\/$name-guard}
	export NVIDIA_PEERMEM_RS_SYSFS=$sys NVIDIA_PEERMEM_RS_KMSG=$T/mp-kmsg
	: >"$T/stub.log"
	sh -c "$cmd" || die "install line failed with no other client loaded"
	printf -- '-q ib_core\n-q nvidia\n--ignore-install nvidia_peermem_rs peerdirect_support=0 persistent_api_support=1\n' >"$T/want"
	diff -u "$T/want" "$T/stub.log" || die "install line did not load ib_core, nvidia, then the module"
	echo "no other client: modprobe ran: $(tr '\n' ';' <"$T/stub.log")"
	# A failing modprobe of the driver (driver loaded from a container, no
	# nvidia.ko on the host) does not stop the module's own load.
	printf '#!/bin/sh\necho "$@" >>%s/stub.log\ncase "$*" in *nvidia_peermem_rs*) exit 0;; esac\nexit 1\n' "$T" >"$stub"
	: >"$T/stub.log"
	sh -c "$cmd" || die "install line failed because modprobe nvidia/ib_core failed"
	mkdir "$sys/module/nvidia_peermem"
	: >"$T/stub.log"
	if sh -c "$cmd" 2>"$T/refused"; then die "install line loaded beside nvidia_peermem"; fi
	cat "$T/refused"
	[ ! -s "$T/stub.log" ] || die "modprobe ran despite the guard: $(cat "$T/stub.log")"
	grep -q "refusing to load nvidia_peermem_rs: nvidia_peermem is loaded" "$T/refused" || die "no clear message"
	# Package removed, conffile kept: the line still loads the module.
	cmd=${cmd//$pkg\/libexec\/$name-guard/$T\/no-such-guard}
	: >"$T/stub.log"
	sh -c "$cmd" && grep -q -- "--ignore-install nvidia_peermem_rs" "$T/stub.log" ||
		die "without the guard script the install line must still load the module"
	# The competitors get the same guard.
	local other
	for other in nvidia_peermem nv_peer_mem; do
		modprobe -n -v -C "$conf" -d "$root" -S "$kv" "$other" >"$T/dry-$other" 2>&1
		cat "$T/dry-$other"
		grep -q "guard $other; } && /sbin/modprobe --ignore-install $other " "$T/dry-$other" ||
			die "$other is not guarded"
	done
	unset NVIDIA_PEERMEM_RS_SYSFS NVIDIA_PEERMEM_RS_KMSG
}

# --- the drop-in (issue 16): depmod's search order picks DKMS's copy -------------------
# A staged tree with the driver's own nvidia-peermem.ko (kernel/) and the
# drop-in where DKMS installs it (updates/dkms/): `modprobe nvidia-peermem`
# resolves to the drop-in; removing it gives the driver's copy back.
test_dropin_override() {
	local root=$T/dropin-root kv=6.12.0-dropin ours theirs shown
	ours=$repo/build/dropin/nvidia-peermem.ko
	[ -f "$ours" ] || ours=$(find "$kdir" "$repo/tests/fixtures" -name '*.ko' 2>/dev/null | head -n 1)
	theirs=$(find "$repo/tests/fixtures" -name '*.ko' 2>/dev/null | head -n 1)
	[ -n "$ours" ] && [ -n "$theirs" ] || die "no .ko to stage"
	mkdir -p "$root/lib/modules/$kv/kernel/drivers/video" "$root/lib/modules/$kv/updates/dkms"
	cp "$theirs" "$root/lib/modules/$kv/kernel/drivers/video/nvidia-peermem.ko"
	cp "$ours" "$root/lib/modules/$kv/updates/dkms/nvidia-peermem.ko"
	depmod -b "$root" "$kv" || die "depmod -b"
	shown=$(modprobe -d "$root" -S "$kv" --show-depends nvidia-peermem 2>&1)
	echo "installed: $shown"
	case "$shown" in
	*"/updates/dkms/nvidia-peermem.ko"*) ;;
	*) die "modprobe nvidia-peermem does not pick the drop-in: $shown" ;;
	esac
	# The drop-in's DKMS tree says so to dkms.
	mk -s dkms-source PEERMEM_DROPIN=1 >/dev/null || die "make dkms-source PEERMEM_DROPIN=1"
	local conf
	conf=$out/dkms/$name-dropin-$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$pkg/dkms/dkms.conf")/dkms.conf
	grep -q '^PACKAGE_NAME="nvidia-peermem-rs-dropin"' "$conf" &&
		grep -q '^MAKE\[0\]="make PEERMEM_DROPIN=1 ' "$conf" &&
		grep -q '^BUILT_MODULE_NAME\[0\]="nvidia-peermem"' "$conf" ||
		die "the drop-in's dkms.conf: $(grep -E '^(PACKAGE_NAME|MAKE|BUILT_MODULE_NAME)' "$conf")"
	rm "$root/lib/modules/$kv/updates/dkms/nvidia-peermem.ko"
	depmod -b "$root" "$kv" || die "depmod -b"
	shown=$(modprobe -d "$root" -S "$kv" --show-depends nvidia-peermem 2>&1)
	echo "removed: $shown"
	case "$shown" in
	*"/kernel/drivers/video/nvidia-peermem.ko"*) ;;
	*) die "removing the drop-in does not give the driver's copy back: $shown" ;;
	esac
}

# --- the drop-in beside a DKMS-built NVIDIA driver ------------------------------------
# Ubuntu's nvidia-dkms-* installs its nvidia-peermem.ko into the same
# updates/dkms as the drop-in: dkms puts every module there on Debian and
# Ubuntu, whatever DEST_MODULE_LOCATION says. Both go through the real
# dkms: the drop-in's DKMS tree as `make dkms-source` stages it (only its
# MAKE line replaced by a copy of a stand-in module, so no kernel is
# compiled) and a DKMS tree shaped like the driver's (BUILT_MODULE_NAME
# nvidia-peermem, DEST_MODULE_LOCATION /kernel/drivers/video), both
# installed in either order into one module tree. Then kmod's depmod, with
# the depmod.d directory of the drop-in's `make install`, and modprobe and
# modinfo must resolve nvidia-peermem to the drop-in, the driver's file
# must be left as its package wrote it, and removing the drop-in must give
# the driver's copy back.
dd_mod() { # OUT.ko VERSION: a module file with just a .modinfo section
	printf '%s\n' "static const char v[] __attribute__((section(\".modinfo\"), used, aligned(1))) = \"version=$2\";" \
		'static const char l[] __attribute__((section(".modinfo"), used, aligned(1))) = "license=GPL";' \
		'static const char n[] __attribute__((section(".modinfo"), used, aligned(1))) = "name=nvidia_peermem";' \
		>"$1.c" && gcc -c -o "$1" "$1.c"
}
test_dropin_vs_driver_dkms() {
	local d=$T/dvd kv=7.0.0-14-generic ours_v theirs_v=580.95.05 order
	ours_v=$version
	rm -rf "$d" && mkdir -p "$d/kernel/include" "$d/stage" || return 1
	# A kernel tree only as far as dkms reads it (BUILD_EXCLUSIVE_CONFIG,
	# and dkms.conf's look for the Rust metadata); the NVIDIA and OFED
	# exports as a build.conf would name them (nothing reads them here).
	mkdir -p "$d/kernel/rust" && touch "$d/kernel/rust/libkernel.rmeta"
	printf 'CONFIG_RUST=y\nCONFIG_MODULES=y\n' >"$d/kernel/.config"
	touch "$d/kernel/Makefile"
	printf 'NVIDIA_KO=%s\nOFED_DIR=%s\n' /none/nvidia.ko /none/ofa_kernel >"$d/build.conf"
	dd_mod "$d/ours.ko" "$ours_v" && dd_mod "$d/theirs.ko" "$theirs_v" || die "cannot make stand-in modules (gcc)"
	# Ours: the drop-in's tree and its make install (for depmod.d).
	mk -s dkms-source PEERMEM_DROPIN=1 >/dev/null || die "make dkms-source PEERMEM_DROPIN=1"
	mk -s install PEERMEM_DROPIN=1 DESTDIR="$d/stage" PREFIX=/usr \
		PKG_DKMS_FORCE_DIR=/usr/share/dkms/modules_to_force_install >/dev/null || die "make install PEERMEM_DROPIN=1"
	cp -r "$out/dkms/$name-dropin-$version" "$d/ours-src" || return 1
	cp "$d/ours.ko" "$d/ours-src/standin.bin"
	sed -i -e 's|^MAKE\[0\]=.*|MAKE[0]="cp standin.bin nvidia-peermem.ko"|' -e '$a CLEAN="true"' "$d/ours-src/dkms.conf"
	# Theirs: what nvidia-dkms-580 registers, reduced to nvidia-peermem.
	mkdir -p "$d/theirs-src"
	cp "$d/theirs.ko" "$d/theirs-src/standin.bin"
	printf '%s\n' 'PACKAGE_NAME="nvidia"' "PACKAGE_VERSION=\"$theirs_v\"" \
		'MAKE[0]="cp standin.bin nvidia-peermem.ko"' 'CLEAN="true"' \
		'BUILT_MODULE_NAME[0]="nvidia-peermem"' 'DEST_MODULE_LOCATION[0]="/kernel/drivers/video"' \
		'AUTOINSTALL="yes"' >"$d/theirs-src/dkms.conf"
	dv() { # the dkms of one order, into its own trees
		env sign_file="$T/no-sign-file" PEERMEM_BUILD_CONF="$d/build.conf" dkms "$@" --dkmstree "$d/$order/dkms" --sourcetree "$d/$order/src" \
			--installtree "$d/$order/root/lib/modules" --kernelsourcedir "$d/kernel" --no-depmod
	}
	# Installs as the packages do: ours with dkms's version check skipped
	# (the drop-in package's modules_to_force_install entry), theirs plain.
	inst() { # ours|theirs
		local m=$name-dropin v=$version force=(--force-version-override)
		[ "$1" = theirs ] && m=nvidia v=$theirs_v force=()
		dv build -m "$m" -v "$v" -k "$kv" >/dev/null || die "dkms build ($1)"
		dv install -m "$m" -v "$v" -k "$kv" "${force[@]}" || die "dkms install ($1)"
	}
	resolve() { # EXPECT(ours|theirs) WHEN
		local mods=$d/$order/root/lib/modules/$kv file ver
		depmod -b "$d/$order/root" -C "$d/stage/etc/depmod.d" "$kv" 2>/dev/null || die "depmod -b"
		file=$(modinfo -b "$d/$order/root" -k "$kv" -n nvidia-peermem 2>&1)
		ver=$(modinfo -b "$d/$order/root" -k "$kv" -F version nvidia-peermem 2>&1)
		echo "$order, $2: modprobe nvidia-peermem -> $(modprobe -d "$d/$order/root" -S "$kv" --show-depends nvidia-peermem 2>&1) (version $ver)"
		modprobe -d "$d/$order/root" -S "$kv" --show-depends nvidia-peermem 2>&1 | grep -qx "insmod $file *" ||
			die "$order, $2: modprobe and modinfo disagree"
		case $1 in
		ours) [ "$ver" = "$ours_v" ] || die "$order, $2: nvidia-peermem is $file (version $ver), not the drop-in" ;;
		theirs) [ "$ver" = "$theirs_v" ] || die "$order, $2: nvidia-peermem is $file (version $ver), not the driver's" ;;
		esac
		# The driver's file, where its dkms put it, still the driver's.
		if [ -e "$mods/updates/dkms/nvidia-peermem.ko" ]; then
			[ "$(modinfo -F version "$mods/updates/dkms/nvidia-peermem.ko")" = "$theirs_v" ] ||
				die "$order, $2: the driver's updates/dkms/nvidia-peermem.ko was overwritten by the drop-in"
		fi
	}
	for order in driver-first dropin-first; do
		mkdir -p "$d/$order/dkms" "$d/$order/src" "$d/$order/root/lib/modules/$kv"
		dv add "$d/ours-src" >/dev/null && dv add "$d/theirs-src" >/dev/null || die "dkms add"
		if [ $order = driver-first ]; then inst theirs && inst ours; else inst ours && inst theirs; fi
		[ -f "$d/$order/root/lib/modules/$kv/updates/dkms/nvidia-peermem.ko" ] ||
			die "$order: the driver's nvidia-peermem.ko is not installed (dkms kept it out or removed it)"
		resolve ours "both installed" || return 1
		dv remove -m "$name-dropin" -v "$version" --all >/dev/null || die "dkms remove (ours)"
		resolve theirs "drop-in removed" || return 1
		[ -f "$d/$order/root/lib/modules/$kv/updates/dkms/nvidia-peermem.ko" ] ||
			die "$order: removing the drop-in took the driver's nvidia-peermem.ko with it"
	done
	# The driver's package removed while the drop-in stays: the drop-in.
	order=driver-removed
	mkdir -p "$d/$order/dkms" "$d/$order/src" "$d/$order/root/lib/modules/$kv"
	dv add "$d/ours-src" >/dev/null && dv add "$d/theirs-src" >/dev/null || die "dkms add"
	inst theirs && inst ours && dv remove -m nvidia -v "$theirs_v" --all >/dev/null || die "dkms remove (theirs)"
	resolve ours "driver's package removed"
}

# --- the PeerDirect exporter, as the DKMS Makefile finds it -------------------------
# Module trees laid out as the packages lay them out, with stand-in modules
# (a .modinfo name, a __ksymtab entry and a __kcrctab CRC per export: what
# the Makefile and depmod read of a module), indexed by the real depmod.
# The Makefile must take the PeerDirect exports, with their CRCs, from the
# module modprobe would load, whichever of ib_uverbs (OFED 24.07 on) or
# ib_core (older) has them, compressed or not, or stop with one line saying
# what it looked at and what to install. No kernel is needed: a tree with
# just a .config and rust/libkernel.rmeta passes the kernel checks.
pd_mod() { # OUT NAME [SYMBOL=CRC...]: a stand-in module exporting SYMBOLs
	local out=$1 name=$2 s
	shift 2
	mkdir -p "$(dirname "$out")"
	{
		printf 'static const char n[] __attribute__((section(".modinfo"), used, aligned(1))) = "name=%s";\n' "$name"
		printf 'static const char l[] __attribute__((section(".modinfo"), used, aligned(1))) = "license=GPL";\n'
		for s in "$@"; do
			printf 'int %s(void) { return 0; }\n' "${s%=*}"
			printf 'const int __ksymtab_%s[3] __attribute__((section("__ksymtab"), used)) = { 0 };\n' "${s%=*}"
			printf 'const unsigned int __crc_%s __attribute__((section("__kcrctab"), used)) = %s;\n' "${s%=*}" "${s#*=}"
		done
	} >"$out.c" && gcc -c -o "${out%.ko*}.o" "$out.c" && rm -f "$out.c" || return 1
	case "$out" in
	*.zst) zstd -q --rm -f "${out%.ko*}.o" -o "$out" ;;
	*.xz) xz -c "${out%.ko*}.o" >"$out" && rm -f "${out%.ko*}.o" ;;
	*) mv "${out%.ko*}.o" "$out" ;;
	esac
}
test_peerdirect_exporter() {
	local d=$T/pd kv=7.0.0-31-generic o rc
	local pd=ib_register_peer_memory_client
	rm -rf "$d" && mkdir -p "$d/kdir/rust" "$d/build" || return 1
	printf 'CONFIG_RUST=y\nCONFIG_MODVERSIONS=y\n' >"$d/kdir/.config"
	touch "$d/kdir/Makefile" "$d/kdir/rust/libkernel.rmeta"
	cp "$pkg/dkms/Makefile" "$d/build/Makefile"
	node() { # NAME: an empty node with NVIDIA's precompiled driver, as Ubuntu ships it
		rm -rf "${d:?}/${1:?}" && mkdir -p "$d/$1/etc/depmod.d"
		pd_mod "$d/$1/lib/modules/$kv/kernel/nvidia-580-open/nvidia.ko" nvidia \
			nvidia_p2p_get_pages=0x0badcafe
	}
	inbox() { # NAME EXT: the kernel's own RDMA stack, no PeerDirect
		pd_mod "$d/$1/lib/modules/$kv/kernel/drivers/infiniband/core/ib_core.ko$2" ib_core ib_register_client=0x00000001 &&
			pd_mod "$d/$1/lib/modules/$kv/kernel/drivers/infiniband/core/ib_uverbs.ko$2" ib_uverbs ib_umem_get=0x00000002
	}
	# (depmod's warnings about the files a kernel package would add: not ours)
	index() { depmod -b "$d/$1" -C "$d/$1/etc/depmod.d" "$kv" 2>/dev/null || die "depmod -b $d/$1"; }
	# build NAME [MAKE-ARGS...]: the exports as dkms's make would take them
	# (pd_target=check-build-env: only the checks, where a tree is used as is)
	local pd_target=
	build() {
		rm -rf "$d/build/.ofed-exports" "$d/build/.nvidia-exports"
		o=$(make --no-print-directory -C "$d/build" PEERMEM_BUILD_CONF="$T/none" PEERMEM_SYSROOT="$d/$1" \
			KVER="$kv" KDIR="$d/kdir" "${@:2}" print-build-env \
			"${pd_target:-$d/build/.ofed-exports/Module.symvers}" 2>&1)
		rc=$?
		echo "--- $1: exit $rc"
		echo "$o"
	}
	took() { # NAME FILE CRC: built, from FILE, with FILE's CRC for the symbol
		[ "$rc" = 0 ] || die "$1: the build stopped"
		[[ "$o" == *"PEERDIRECT_KO=$2"* ]] || die "$1: expected the exports of $2"
		grep -qx "$3	$pd	$(basename "${2%%.ko*}")	EXPORT_SYMBOL	" "$d/build/.ofed-exports/Module.symvers" ||
			die "$1: not $3 ($2's CRC) in: $(cat "$d/build/.ofed-exports/Module.symvers" 2>/dev/null)"
	}
	refused() { # NAME TEXT...: stopped with one error line holding every TEXT
		local t line
		[ "$rc" != 0 ] || die "$1: built without a PeerDirect core"
		line=$(grep -c '^nvidia-peermem-rs: error: ' <<<"$o")
		[ "$line" = 1 ] || die "$1: $line error lines"
		for t in "${@:2}"; do
			grep '^nvidia-peermem-rs: error: ' <<<"$o" | grep -qF -- "$t" || die "$1: the error does not say: $t"
		done
	}
	local doca=kernel/doca-ofed-3.4 m
	# Canonical's archive DOCA-OFED (24.07+): the exports in ib_uverbs.ko.zst
	# under kernel/doca-ofed-<ver>/, no ofa_kernel tree, no inbox copy.
	node doca
	m=$d/doca/lib/modules/$kv
	pd_mod "$m/$doca/ib_core.ko.zst" ib_core ib_register_client=0x00000011 &&
		pd_mod "$m/$doca/ib_uverbs.ko.zst" ib_uverbs $pd=0x2407aaaa ib_unregister_peer_memory_client=0x2407bbbb || return 1
	index doca
	build doca
	took "DOCA 24.07+ in kernel/doca-ofed-<ver>/" "$m/$doca/ib_uverbs.ko.zst" 0x2407aaaa
	# The same beside the inbox stack, which also exports the symbol with
	# another CRC (as Ubuntu 22.04's does): the CRCs are those of the copy
	# depmod picked, whichever it is.
	inbox doca .zst && pd_mod "$m/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" ib_uverbs $pd=0x05150000 || return 1
	echo "override ib_uverbs * $doca" >"$d/doca/etc/depmod.d/doca.conf"
	index doca
	build doca
	took "DOCA picked by depmod" "$m/$doca/ib_uverbs.ko.zst" 0x2407aaaa
	echo "override ib_uverbs * kernel/drivers/infiniband/core" >"$d/doca/etc/depmod.d/doca.conf"
	index doca
	build doca
	took "inbox picked by depmod" "$m/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" 0x05150000
	# An inbox stack without PeerDirect picked over DOCA's: say so, and how.
	inbox doca .zst
	index doca
	build doca
	refused "inbox without PeerDirect picked over DOCA's" "modprobe would load" \
		"$m/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" "$m/$doca/ib_uverbs.ko.zst" "depmod $kv" "override"
	# DOCA-Host 3.2+: the tree in /usr/src/ofa_kernel-dkms/<arch>/<kver>,
	# the exports listed against ib_uverbs; a stale ofa_kernel/default of
	# another kernel, without them, does not count.
	node dkms
	inbox dkms .zst
	index dkms
	mkdir -p "$d/dkms/usr/src/ofa_kernel-dkms/$(uname -m)/$kv" "$d/dkms/usr/src/ofa_kernel/default"
	printf '0x3200cccc\t%s\tdrivers/infiniband/core/ib_uverbs\tEXPORT_SYMBOL\t\n' $pd \
		>"$d/dkms/usr/src/ofa_kernel-dkms/$(uname -m)/$kv/Module.symvers"
	printf '0x00000001\tib_register_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n' \
		>"$d/dkms/usr/src/ofa_kernel/default/Module.symvers"
	pd_target=check-build-env build dkms
	[ "$rc" = 0 ] && [[ "$o" == *"OFED_DIR=$d/dkms/usr/src/ofa_kernel-dkms/$(uname -m)/$kv"* ]] ||
		die "DOCA-Host's ofa_kernel-dkms tree not taken"
	# MLNX_OFED up to 24.04: the exports in ib_core, from DKMS (updates/),
	# uncompressed, then xz-compressed; ib_uverbs without them.
	local ext
	for ext in "" .xz; do
		node old
		inbox old "$ext"
		pd_mod "$d/old/lib/modules/$kv/updates/dkms/ib_core.ko$ext" ib_core $pd=0x23100ddd || return 1
		index old
		build old
		took "MLNX_OFED ib_core.ko$ext" "$d/old/lib/modules/$kv/updates/dkms/ib_core.ko$ext" 0x23100ddd
	done
	# The old name of the override still works.
	build old IB_CORE_KO="$d/old/lib/modules/$kv/updates/dkms/ib_core.ko.xz"
	took "IB_CORE_KO=" "$d/old/lib/modules/$kv/updates/dkms/ib_core.ko.xz" 0x23100ddd
	# Neither module exports it: the inbox stack only.
	node none
	inbox none .zst
	index none
	build none
	refused "inbox only" "no MLNX_OFED/DOCA-OFED PeerDirect core found for kernel $kv" \
		"$d/none/lib/modules/$kv/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" \
		"$d/none/lib/modules/$kv/kernel/drivers/infiniband/core/ib_core.ko.zst" \
		"without $pd" "ofa_kernel-dkms" "Install MLNX_OFED/DOCA-OFED"
	# No RDMA module at all, and modules depmod has not indexed yet.
	node empty
	index empty
	build empty
	refused "no RDMA stack" "no ib_uverbs or ib_core module under" "Install MLNX_OFED/DOCA-OFED"
	rm -f "$d/none/lib/modules/$kv"/modules.*
	build none
	refused "not indexed" "depmod has not indexed them" "Run depmod $kv"
	# NVIDIA's precompiled package ships an nvidia-peermem.ko (built without
	# an OFED tree: a stub that refuses to load) in kernel/nvidia-580-open/;
	# with Ubuntu's search order and the drop-in's depmod.d line, modprobe
	# nvidia-peermem loads the drop-in from updates/dkms.
	node stub
	pd_mod "$d/stub/lib/modules/$kv/kernel/nvidia-580-open/nvidia-peermem.ko" nvidia_peermem &&
		pd_mod "$d/stub/lib/modules/$kv/updates/dkms/nvidia_peermem.ko" nvidia_peermem || return 1
	echo 'search updates ubuntu built-in' >"$d/stub/etc/depmod.d/ubuntu.conf"
	cp "$pkg/depmod.d/$name-dropin.conf" "$d/stub/etc/depmod.d/"
	index stub
	o=$(modinfo -b "$d/stub" -k "$kv" -n nvidia-peermem)
	echo "modprobe nvidia-peermem -> $o"
	[ "$o" = "$d/stub/lib/modules/$kv/updates/dkms/nvidia_peermem.ko" ] ||
		die "NVIDIA's precompiled nvidia-peermem.ko wins over the drop-in"
}

# --- the DKMS source tree and its Makefile's checks -----------------------------------
test_dkms_source() {
	local st=$out/dkms/$name-$version
	mk dkms-source || return 1
	(cd "$st" && find . -type f | sed 's|^\./||' | LC_ALL=C sort) >"$res/dkms-source.files"
	expected_files usr/local x x | sed -n "s|^usr/src/$name-$version/||p" >"$T/exp-src"
	diff -u "$T/exp-src" "$res/dkms-source.files" || die "DKMS tree is not exactly dkms.conf Makefile VERSION Kbuild kmod/ ffi/"
	# Nothing test-only goes to /usr/src: no KUnit source, no notes.
	# (kmod/compat/ probes name the kernel facility they probe, such as
	# kunit_assert!, and belong to every build.)
	! grep -v '^kmod/compat/' "$res/dkms-source.files" | grep -Ei 'kunit|\.md$' ||
		die "test-only files in the DKMS tree"
	cmp "$pkg/dkms/dkms.conf" "$st/dkms.conf" && cmp "$pkg/dkms/Makefile" "$st/Makefile"
}

# Symbol trees in the layout of a real node, from the fixtures' exports:
# $T/sysroot/usr/src/ofa_kernel/default (peerdirect_sim = MOFED's ib_core)
# and $T/sysroot/usr/src/nvidia-<version> (nvidia_p2p_sim = nvidia.ko): a
# built NVIDIA driver tree of the oldest release tests/nvidia/versions names
# (535), with NVIDIA's own nvidia/nv-p2p.h from Debian's package (cached by
# make deps), so the DKMS builds below compile against NVIDIA's header as on
# a node with that driver.
fixture_symvers=$repo/tests/fixtures/Module.symvers
nvidia_tree=$("$repo/tests/nvidia/fetch-nvidia-src.sh" --list 2>/dev/null | head -n 1)
nvidia_ver=${nvidia_tree%% *}
nvidia_sysroot_src=$T/sysroot/usr/src/nvidia-$nvidia_ver
[ -f "$fixture_symvers" ] || fixture_symvers=$T/fx/tests/fixtures/Module.symvers
make_sysroot() {
	if [ ! -f "$fixture_symvers" ]; then
		echo "building the fixtures (for their Module.symvers) in $T/fx"
		mkdir -p "$T/fx/tests"
		cp -r "$repo/tests/fixtures" "$T/fx/tests/" && cp -r "$repo/ffi" "$T/fx/" || return 1
		# shellcheck source=/dev/null
		(. "$repo/tests/kernel/toolchain.sh" &&
			make -s -C "$kdir" M="$T/fx/tests/fixtures" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules) || return 1
	fi
	[ -n "$nvidia_tree" ] || die "NVIDIA's sources are not fetched: $("$repo/tests/nvidia/fetch-nvidia-src.sh" --list 2>&1)"
	mkdir -p "$T/sysroot/usr/src/ofa_kernel/default" "$nvidia_sysroot_src/nvidia"
	cp "${nvidia_tree#* }/nvidia/nv-p2p.h" "$nvidia_sysroot_src/nvidia/" || return 1
	awk -F'\t' '$3 ~ /peerdirect_sim$/' "$fixture_symvers" >"$T/sysroot/usr/src/ofa_kernel/default/Module.symvers"
	awk -F'\t' '$3 ~ /nvidia_p2p_sim$/' "$fixture_symvers" >"$nvidia_sysroot_src/Module.symvers"
	grep -q ib_register_peer_memory_client "$T/sysroot/usr/src/ofa_kernel/default/Module.symvers" &&
		grep -q nvidia_p2p_get_pages "$nvidia_sysroot_src/Module.symvers"
}

# A kernel crate probe whose rustc is killed (the OOM killer in a parallel
# dkms autoinstall) stops the build with its reason and caches no verdict:
# the next build probes again instead of building on a false "no".
test_compat_probe_killed() {
	local st=$T/compatck o
	rm -rf "$st" && cp -r "$out/dkms/$name-$version" "$st" || return 1
	printf '#!/bin/sh\ncase " $* " in *" pm_probe_module_authors "*) kill -9 $$ ;; esac\nexec /usr/bin/rustc "$@"\n' \
		>"$T/rustc-killed" && chmod 755 "$T/rustc-killed" || return 1
	# shellcheck source=/dev/null
	if o=$(. "$repo/tests/kernel/toolchain.sh" &&
		make -s -C "$kdir" M="$st" "${PEERMEM_KMAKE_ARGS[@]}" RUSTC="$T/rustc-killed" modules 2>&1); then
		die "the build succeeded with a probe's rustc killed"
	fi
	echo "$o" | grep -m 1 "probe module_authors did not finish" ||
		die "the build failed without saying why: $(echo "$o" | tail -n 5)"
	! ls "$st"/kmod/compat-*.cfg 2>/dev/null || die "a verdict was cached: $(ls "$st"/kmod/compat-*.cfg)"
}

# The DKMS Makefile's own diagnostics, each a one-line reason (no compiling).
test_build_env_checks() {
	local st=$T/envcheck
	rm -rf "$st" && cp -r "$out/dkms/$name-$version" "$st" || return 1
	env_make() { make --no-print-directory -s -C "$st" PEERMEM_BUILD_CONF="$T/none" KVER="$kver" "$@" 2>&1; }
	expect_error() { # PATTERN MAKE-ARGS...
		local pat=$1 o
		shift
		if o=$(env_make check-build-env "$@"); then die "no error for: $*"; fi
		echo "$o" | head -n 1
		echo "$o" | grep -q -- "$pat" || die "expected '$pat'"
	}
	# Found automatically in the sysroot, the right rustc/bindgen/clang picked.
	env_make print-build-env KDIR="$kdir" PEERMEM_SYSROOT="$T/sysroot" | tee "$T/env"
	grep -qx "OFED_DIR=$T/sysroot/usr/src/ofa_kernel/default" "$T/env" &&
		grep -qx "NVIDIA_SRC=$nvidia_sysroot_src" "$T/env" || die "detection"
	env_make check-build-env KDIR="$kdir" PEERMEM_SYSROOT="$T/sysroot" || die "good tree refused"
	# A per-kernel MOFED tree wins over default.
	mkdir -p "$T/sysroot2/usr/src/ofa_kernel/$(uname -m)/$kver" "$T/sysroot2/usr/src/ofa_kernel/default"
	cp "$T/sysroot/usr/src/ofa_kernel/default/Module.symvers" "$T/sysroot2/usr/src/ofa_kernel/default/"
	cp "$T/sysroot/usr/src/ofa_kernel/default/Module.symvers" "$T/sysroot2/usr/src/ofa_kernel/$(uname -m)/$kver/"
	env_make print-build-env KDIR="$kdir" PEERMEM_SYSROOT="$T/sysroot2" >"$T/env2"
	grep -qx "OFED_DIR=$T/sysroot2/usr/src/ofa_kernel/$(uname -m)/$kver" "$T/env2" ||
		die "per-kernel OFED tree not preferred: $(grep OFED_DIR "$T/env2")"
	# Failures, each with its reason.
	mkdir -p "$T/norust/include"
	grep -v '^CONFIG_RUST' "$kdir/.config" >"$T/norust/.config"
	touch "$T/norust/Makefile"
	expect_error "built without CONFIG_RUST=y" KDIR="$T/norust" &&
		expect_error "no kernel build tree at KDIR" KDIR="$T/nokernel" &&
		expect_error "no MLNX_OFED/DOCA-OFED PeerDirect core found" KDIR="$kdir" PEERMEM_SYSROOT="$T/empty" &&
		mkdir -p "$T/inbox" && grep -m 50 -v peer_memory "$kdir/Module.symvers" >"$T/inbox/Module.symvers" &&
		expect_error "has no PeerDirect support" KDIR="$kdir" OFED_DIR="$T/inbox" PEERMEM_SYSROOT="$T/sysroot" &&
		expect_error "no NVIDIA driver found" KDIR="$kdir" OFED_DIR="$T/sysroot/usr/src/ofa_kernel/default" \
			PEERMEM_SYSROOT="$T/empty" NVIDIA_KO= &&
		expect_error "but RUSTC=$T/fake-rustc is 'rustc 1.0.0 (fake)'" KDIR="$kdir" PEERMEM_SYSROOT="$T/sysroot" \
			RUSTC="$T/fake-rustc" || return 1
	# With no built NVIDIA tree, the exports come from nvidia.ko itself.
	local nvko
	nvko=$(find "$repo/tests/fixtures" "$T/fx" -name nvidia_p2p_sim.ko 2>/dev/null | head -n 1)
	[ -n "$nvko" ] || die "no nvidia_p2p_sim.ko to read exports from"
	xz -c "$nvko" >"$T/nvidia.ko.xz"
	env_make "$st/.nvidia-exports/Module.symvers" KDIR="$kdir" PEERMEM_SYSROOT="$T/empty" \
		OFED_DIR="$T/sysroot/usr/src/ofa_kernel/default" NVIDIA_KO="$T/nvidia.ko.xz" || die "exports from nvidia.ko.xz"
	# Symbol, CRC (0 on a kernel without MODVERSIONS) and type as modpost
	# wrote them when it built the module.
	diff <(cut -f1,2,4 "$st/.nvidia-exports/Module.symvers" | sort) \
		<(awk -F'\t' '$3 ~ /nvidia_p2p_sim$/ {print $1 "\t" $2 "\t" $4}' "$fixture_symvers" | sort) ||
		die "exports read from nvidia.ko differ from its Module.symvers"
	echo "exports read from nvidia.ko.xz: $(wc -l <"$st/.nvidia-exports/Module.symvers") symbols, same as Module.symvers"
}

# --- dkms add/build/install into scratch trees -------------------------------------------
dk() { dkms "$@" --dkmstree "$T/dkms" --sourcetree "$T/src"; }
dkms_env() {
	# No module signing (dkms would create /var/lib/dkms/mok.key), no host
	# build.conf, symbols from the scratch sysroot.
	env sign_file="$T/no-sign-file" PEERMEM_BUILD_CONF="$T/none" PEERMEM_SYSROOT="$T/sysroot" "$@"
}
test_dkms_build_install() {
	local st=$out/dkms/$name-$version base
	mkdir -p "$T/dkms" "$T/src" "$T/root/lib/modules/$kver"
	dkms_env dkms add "$st" --dkmstree "$T/dkms" --sourcetree "$T/src" || die "dkms add"
	[ -f "$T/src/$name-$version/dkms.conf" ] || die "dkms add did not copy the tree into --sourcetree"
	echo "--- dkms build"
	local t0=$SECONDS
	# From a shell that once built the test bed's test build: the module
	# dkms installs must still be the product.
	dkms_env env PEERMEM_TEST_DELAYS=1 dkms build -m "$name" -v "$version" -k "$kver" \
		--kernelsourcedir "$kdir" -j "$jobs" --dkmstree "$T/dkms" --sourcetree "$T/src"
	local rc=$?
	echo "dkms build: exit $rc in $((SECONDS - t0))s"
	base=$T/dkms/$name/$version/$kver/$(uname -m)
	cp "$base/log/make.log" "$res/dkms-make.log" 2>/dev/null ||
		cp "$T/dkms/$name/$version/build/make.log" "$res/dkms-make.log" 2>/dev/null
	[ "$rc" = 0 ] || die "dkms build failed (make.log: $res/dkms-make.log)"
	# Against the NVIDIA tree's own nv-p2p.h (NVIDIA_SRC comes first on the
	# include path): NVIDIA's header of $nvidia_ver, not ffi/include's.
	grep -q "NVIDIA P2P ABI from $nvidia_sysroot_src\$" "$res/dkms-make.log" ||
		die "the DKMS build did not take NVIDIA's ABI from $nvidia_sysroot_src"
	echo "built against NVIDIA $nvidia_ver's nv-p2p.h ($nvidia_sysroot_src/nvidia/nv-p2p.h)"
	echo "--- dkms install"
	dkms_env dkms install -m "$name" -v "$version" -k "$kver" --no-depmod \
		--dkmstree "$T/dkms" --sourcetree "$T/src" --installtree "$T/root/lib/modules" || die "dkms install"
	local ko=$T/root/lib/modules/$kver/updates/dkms/nvidia_peermem_rs.ko
	[ -f "$ko" ] || die "no $ko"
	dk status -m "$name" -v "$version" -k "$kver" --installtree "$T/root/lib/modules" | tee "$T/status"
	grep -q "installed" "$T/status" || die "dkms status does not say installed"
	local vm deps
	vm=$(modinfo -F vermagic "$ko")
	deps=$(modinfo -F depends "$ko")
	echo "module: $ko ($(stat -c %s "$ko") bytes) vermagic '$vm' depends '$deps'"
	[ "${vm%% *}" = "$kver" ] || die "vermagic is not $kver"
	[ "$(modinfo -F name "$ko")" = nvidia_peermem_rs ] || die "module name"
	# Module.symvers found by the Makefile: the loader knows where the
	# PeerDirect and P2P symbols come from.
	[[ ",$deps," == *,peerdirect_sim,* && ",$deps," == *,nvidia_p2p_sim,* ]] ||
		die "depends '$deps' lacks peerdirect_sim/nvidia_p2p_sim: symbols not resolved at build time"
	if modinfo -F parm "$ko" | grep -q "^test_delay" || [ -n "$(modinfo -F test_build "$ko")" ]; then
		die "PEERMEM_TEST_DELAYS=1 in dkms's environment made the installed module the test build"
	fi
	# The modprobe.d file documents every parameter the module has, and its
	# options line names only real ones.
	local parm
	for parm in $(modinfo -F parm "$ko" | cut -d: -f1); do
		grep -q "^#   $parm=" "$pkg/modprobe.d/$name.conf" || die "parameter $parm not documented in modprobe.d"
	done
	for parm in $(sed -n 's/^#options nvidia_peermem_rs //p' "$pkg/modprobe.d/$name.conf" | tr ' ' '\n' | cut -d= -f1); do
		modinfo -F parm "$ko" | grep -q "^$parm:" || die "options line names unknown parameter $parm"
	done
	echo "parameters: $(modinfo -F parm "$ko" | cut -d: -f1 | tr '\n' ' ')(all documented)"
	depmod -b "$T/root" "$kver" && grep -q "updates/dkms/nvidia_peermem_rs.ko" "$T/root/lib/modules/$kver/modules.dep" ||
		die "depmod -b on the install tree"
	# Hand the install tree to the VM test.
	rm -rf "$out/vm-extra" && mkdir -p "$out/vm-extra/dkms" "$out/vm-extra/packaging"
	cp -r "$T/root/lib" "$out/vm-extra/dkms/" &&
		cp "$pkg/libexec/$name-guard" "$pkg/modprobe.d/$name.conf" "$out/vm-extra/packaging/"
}

# A kernel without CONFIG_RUST: dkms skips it (exit 77) with its reason.
# The drop-in's DKMS tree, built and installed by dkms into an install tree
# that already holds the NVIDIA driver's nvidia-peermem.ko (a stand-in,
# version 580.95.05) under kernel/drivers/video. The drop-in's file,
# nvidia_peermem.ko, is not the driver's nvidia-peermem.ko: dkms installs
# it beside that copy without comparing versions, and the driver's file
# stays. The drop-in package's /usr/share/dkms/modules_to_force_install
# entry (--force-version-override here; the host's /usr/share/dkms stays
# untouched) still keeps dkms from refusing it over an older install of
# the same file. The installed module goes to the VM (module_dropin loads
# it and then gives the driver's copy back); dkms remove then deletes it
# and depmod finds the driver's copy again.
test_dkms_dropin() {
	local dn=$name-dropin st=$out/dkms/$name-dropin-$version root=$T/rootd ko theirs
	theirs=$repo/tests/fixtures/driver-copy/nvidia-peermem.ko
	[ -f "$theirs" ] || die "no stand-in for the driver's copy ($theirs): tests/build-all.sh builds it"
	mk -s dkms-source PEERMEM_DROPIN=1 >/dev/null || die "make dkms-source PEERMEM_DROPIN=1"
	mkdir -p "$T/dkmsd" "$T/srcd" "$root/lib/modules/$kver/kernel/drivers/video"
	cp "$theirs" "$root/lib/modules/$kver/kernel/drivers/video/"
	ddk() { dkms_env dkms "$@" --dkmstree "$T/dkmsd" --sourcetree "$T/srcd"; }
	ddk add "$st" || die "dkms add (drop-in)"
	ddk build -m "$dn" -v "$version" -k "$kver" --kernelsourcedir "$kdir" -j "$jobs" ||
		die "dkms build (drop-in): $(tail -5 "$T/dkmsd/$dn/$version/build/make.log" 2>/dev/null)"
	ko=$root/lib/modules/$kver/updates/dkms/nvidia_peermem.ko
	ddk install -m "$dn" -v "$version" -k "$kver" --no-depmod --force-version-override \
		--installtree "$root/lib/modules" || die "dkms install --force-version-override (drop-in)"
	[ -f "$ko" ] || die "no $ko"
	cmp -s "$theirs" "$root/lib/modules/$kver/kernel/drivers/video/nvidia-peermem.ko" ||
		die "dkms install of the drop-in changed the driver's copy"
	[ "$(modinfo -F name "$ko")" = nvidia_peermem ] || die "drop-in module name: $(modinfo -F name "$ko")"
	modinfo -F parm "$ko" | grep -q '^coalesce_sg:' || die "the installed nvidia-peermem.ko is not ours"
	depmod -b "$root" "$kver" || die "depmod -b"
	modprobe -d "$root" -S "$kver" --show-depends nvidia-peermem | grep -q "/updates/dkms/nvidia_peermem.ko" ||
		die "modprobe nvidia-peermem does not pick the DKMS-installed drop-in"
	# The VM's module_dropin loads the copy dkms built and installed.
	mkdir -p "$out/vm-extra/dropin" && cp "$ko" "$out/vm-extra/dropin/nvidia-peermem.ko" || die "hand-over to the VM"
	ddk remove -m "$dn" -v "$version" -k "$kver" --no-depmod --installtree "$root/lib/modules" >/dev/null ||
		die "dkms remove (drop-in)"
	[ ! -e "$ko" ] || die "dkms remove left $ko"
	depmod -b "$root" "$kver" || die "depmod -b"
	modprobe -d "$root" -S "$kver" --show-depends nvidia-peermem | grep -q "/kernel/drivers/video/nvidia-peermem.ko" ||
		die "after dkms remove, modprobe nvidia-peermem does not find the driver's copy"
	echo "dkms remove gave the driver's copy back"
}

# A kernel installed before linux-lib-rust-<kver> and the NVIDIA/DOCA modules
# for it: the real dkms's autoinstall, as the kernel's postinst hook runs
# it, must exit 0 with one line naming the missing packages, and leave
# nothing built or installed for that kernel; once the packages are there
# (the Rust metadata, nvidia.ko and ib_uverbs.ko exporting the symbols,
# indexed by depmod) the same autoinstall builds it. The source is the
# staged DKMS tree with its MAKE line cut to the Makefile's checks and a
# copy of a stand-in, so no compiler runs; the kernel tree is a .config and
# a Makefile.
test_dkms_new_kernel() {
	local d=$T/nk kv=7.0.0-99-generic o rc st=$out/dkms/$name-$version
	rm -rf "$d" && mkdir -p "$d/kdir/include" "$d/dk" "$d/src" "$d/root/lib/modules/$kv" || return 1
	printf 'CONFIG_RUST=y\nCONFIG_MODULES=y\n' >"$d/kdir/.config"
	touch "$d/kdir/Makefile"
	mk -s dkms-source >/dev/null || die "make dkms-source"
	cp -r "$st" "$d/tree" && dd_mod "$d/tree/standin.bin" "$version" || return 1
	# The Makefile's own checks run (they stop a build that lacks anything),
	# then the stand-in is the module. (dkms expands the variables.)
	# shellcheck disable=SC2016
	sed -i -e 's|^MAKE\[0\]=.*|MAKE[0]="make KDIR=${kernel_source_dir} KVER=${kernelver} check-build-env \&\& cp standin.bin nvidia_peermem_rs.ko"|' \
		-e '$a CLEAN="true"' "$d/tree/dkms.conf"
	# The kernel's own modules only: depmod gives it a modules.symbols.
	pd_mod "$d/root/lib/modules/$kv/kernel/drivers/infiniband/core/ib_uverbs.ko" ib_uverbs ib_umem_get=0x1 || return 1
	depmod -b "$d/root" "$kv" 2>/dev/null || die "depmod -b"
	ai() {
		env sign_file="$T/no-sign-file" PEERMEM_BUILD_CONF="$T/none" PEERMEM_SYSROOT="$d/root" \
			dkms "$@" --dkmstree "$d/dk" --sourcetree "$d/src" --installtree "$d/root/lib/modules" \
			--kernelsourcedir "$d/kdir" --no-depmod
	}
	ai add "$d/tree" >/dev/null || die "dkms add"
	# As the kernel's postinst hook (dkms_autoinstaller) calls it.
	o=$(ai autoinstall --kernelver "$kv" 2>&1)
	rc=$?
	echo "--- without the packages: exit $rc"
	echo "$o"
	[ "$rc" = 0 ] || die "dkms autoinstall for a kernel without linux-lib-rust exited $rc (the kernel's postinst fails)"
	[ "$(grep -c "^nvidia-peermem-rs: skipping kernel $kv" <<<"$o")" = 1 ] || die "not one skip line"
	grep "^nvidia-peermem-rs: skipping" <<<"$o" | grep -q "linux-lib-rust-$kv.*NVIDIA.*DOCA-OFED" ||
		die "the skip line does not name linux-lib-rust-$kv, the NVIDIA and the DOCA modules"
	[ ! -e "$d/dk/$name/$version/$kv" ] && [ ! -e "$d/root/lib/modules/$kv/updates" ] ||
		die "something was built or installed for $kv: $(find "$d/dk/$name/$version/$kv" "$d/root/lib/modules/$kv/updates" 2>/dev/null)"
	# What a package's postinst (common.postinst) runs for the newest
	# kernel: dkms build, where exit 77 is "Skipped." and anything else fails.
	o=$(ai build -m "$name" -v "$version" -k "$kv" 2>&1)
	rc=$?
	echo "--- dkms build without the packages (not the running kernel): exit $rc"
	echo "$o"
	[ "$rc" = 77 ] && [ "$(grep -c "^nvidia-peermem-rs: skipping kernel $kv" <<<"$o")" = 1 ] ||
		die "dkms build for a kernel without linux-lib-rust: exit $rc (common.postinst fails on anything but 0 and 77)"
	[ ! -e "$d/dk/$name/$version/$kv" ] || die "dkms build left $d/dk/$name/$version/$kv"
	# The packages arrive.
	mkdir -p "$d/root/usr/src/linux-lib-rust-$kv/rust" && touch "$d/root/usr/src/linux-lib-rust-$kv/rust/libkernel.rmeta"
	pd_mod "$d/root/lib/modules/$kv/kernel/nvidia-580-open/nvidia.ko" nvidia nvidia_p2p_get_pages=0x2 &&
		pd_mod "$d/root/lib/modules/$kv/kernel/doca-ofed-3.4/ib_uverbs.ko" ib_uverbs ib_register_peer_memory_client=0x3 &&
		echo "override ib_uverbs * kernel/doca-ofed-3.4" >"$d/doca.conf" || return 1
	mkdir -p "$d/depmod.d" && mv "$d/doca.conf" "$d/depmod.d/" && depmod -b "$d/root" -C "$d/depmod.d" "$kv" 2>/dev/null || die "depmod -b"
	o=$(ai autoinstall -k "$kv" 2>&1)
	rc=$?
	echo "--- with them: exit $rc"
	echo "$o"
	[ "$rc" = 0 ] && [ -f "$d/root/lib/modules/$kv/updates/dkms/nvidia_peermem_rs.ko" ] ||
		die "autoinstall did not build and install once the packages were there"
	! grep -q "skipping" <<<"$o" || die "still skipped"
	# A kernel without CONFIG_RUST (dkms build: BUILD_EXCLUSIVE, exit 77)
	# must not fail autoinstall either.
	mkdir -p "$d/norust/include" && printf 'CONFIG_MODULES=y\n' >"$d/norust/.config" && touch "$d/norust/Makefile"
	o=$(env sign_file="$T/no-sign-file" PEERMEM_BUILD_CONF="$T/none" PEERMEM_SYSROOT="$d/root" \
		dkms autoinstall -k 6.12.0-norust --dkmstree "$d/dk" --sourcetree "$d/src" --installtree "$d/root/lib/modules" \
		--kernelsourcedir "$d/norust" --no-depmod 2>&1)
	rc=$?
	echo "--- a kernel without CONFIG_RUST: exit $rc"
	echo "$o"
	[ "$rc" = 0 ] && [ "$(grep -c "^nvidia-peermem-rs: skipping kernel 6.12.0-norust: it has no CONFIG_RUST=y" <<<"$o")" = 1 ] ||
		die "autoinstall for a kernel without CONFIG_RUST: exit $rc, not one skip line"
}

# nvidia.ko or the PeerDirect exporter replaced under a built module (a
# driver respin, a DOCA upgrade) with other CRCs: the modprobe guard must
# refuse the load with one line naming the changed module and the dkms
# commands that rebuild, and let it load again once rebuilt. The real dkms
# builds and installs into scratch trees (the Makefile's checks and its
# record-deps, a stand-in as the module), against stand-in nvidia.ko and
# DOCA ib_uverbs.ko, indexed by depmod, as in dkms-new-kernel.
test_guard_changed_exporter() {
	local d=$T/gc kv=7.0.0-31-generic o rc st=$out/dkms/$name-$version doca=kernel/doca-ofed-3.4
	local m=$T/gc/root/lib/modules/7.0.0-31-generic
	rm -rf "$d" && mkdir -p "$d/kdir/rust" "$d/kdir/include" "$d/dk" "$d/src" "$d/depmod.d" "$m" || return 1
	printf 'CONFIG_RUST=y\nCONFIG_MODULES=y\nCONFIG_MODVERSIONS=y\n' >"$d/kdir/.config"
	touch "$d/kdir/Makefile" "$d/kdir/rust/libkernel.rmeta"
	mk -s dkms-source >/dev/null || die "make dkms-source"
	cp -r "$st" "$d/tree" && dd_mod "$d/tree/standin.bin" "$version" || return 1
	# shellcheck disable=SC2016
	sed -i -e 's|^MAKE\[0\]=.*|MAKE[0]="make KDIR=${kernel_source_dir} KVER=${kernelver} check-build-env record-deps \&\& cp standin.bin nvidia_peermem_rs.ko"|' \
		-e '$a CLEAN="true"' "$d/tree/dkms.conf"
	echo "override ib_uverbs * $doca" >"$d/depmod.d/doca.conf"
	pd_mod "$m/kernel/nvidia-580-open/nvidia.ko" nvidia nvidia_p2p_get_pages=0x58095050 &&
		pd_mod "$m/$doca/ib_uverbs.ko.zst" ib_uverbs ib_register_peer_memory_client=0x2407aaaa &&
		pd_mod "$m/kernel/drivers/infiniband/core/ib_uverbs.ko.zst" ib_uverbs ib_umem_get=0x1 || return 1
	index() { depmod -b "$d/root" -C "$d/depmod.d" "$kv" 2>/dev/null || die "depmod -b"; }
	index
	dv() {
		env sign_file="$T/no-sign-file" PEERMEM_BUILD_CONF="$T/none" PEERMEM_SYSROOT="$d/root" \
			dkms "$@" --dkmstree "$d/dk" --sourcetree "$d/src" --installtree "$d/root/lib/modules" \
			--kernelsourcedir "$d/kdir" --no-depmod
	}
	dv add "$d/tree" >/dev/null && dv install -m "$name" -v "$version" -k "$kv" >"$d/install.log" 2>&1 ||
		die "dkms install: $(cat "$d/install.log"; tail -5 "$d/dk/$name/$version/build/make.log")"
	guard() {
		o=$(NVIDIA_PEERMEM_RS_SYSFS="$d/sys" NVIDIA_PEERMEM_RS_KMSG="$d/kmsg" NVIDIA_PEERMEM_RS_DKMS_TREE="$d/dk" \
			NVIDIA_PEERMEM_RS_KVER="$kv" NVIDIA_PEERMEM_RS_MODROOT="$d/root" sh "$pkg/libexec/$name-guard" nvidia_peermem_rs 2>&1)
		rc=$?
		echo "--- $1: guard exit $rc${o:+: $o}"
	}
	echo "the build's record:"
	grep '^nvidia-peermem-rs: built against: ' "$d/dk/$name/kernel-$kv-$(uname -m)/log/make.log" ||
		die "no record in the installed build's make.log"
	guard "as built"
	[ "$rc" = 0 ] || die "the guard refused an unchanged build"
	refused() { # MODULE: refused with our line naming MODULE and the fix
		[ "$rc" = 1 ] || die "the guard let nvidia_peermem_rs load against a changed $1 (exit $rc)"
		[ "$(grep -c . <<<"$o")" = 1 ] || die "not one line"
		grep -q "refusing to load nvidia_peermem_rs: $1 changed since it was built for $kv" <<<"$o" &&
			grep -qF "dkms remove -m $name -v $version -k $kv && dkms install -m $name -v $version -k $kv" <<<"$o" ||
			die "the line does not name $1 and the dkms commands"
	}
	# A DOCA upgrade: ib_uverbs.ko with another CRC for the symbol.
	pd_mod "$m/$doca/ib_uverbs.ko.zst" ib_uverbs ib_register_peer_memory_client=0x2510cccc || return 1
	index
	guard "DOCA's ib_uverbs replaced"
	refused ib_uverbs
	# Rebuilt as the line says: loads again.
	dv remove -m "$name" -v "$version" -k "$kv" >/dev/null && dv install -m "$name" -v "$version" -k "$kv" >/dev/null 2>&1 ||
		die "rebuild"
	guard "rebuilt"
	[ "$rc" = 0 ] || die "the guard refused the rebuilt module"
	# A driver respin: nvidia.ko replaced.
	pd_mod "$m/kernel/nvidia-580-open/nvidia.ko" nvidia nvidia_p2p_get_pages=0x58095151 || return 1
	index
	guard "nvidia.ko replaced"
	refused nvidia
	# What the package's dpkg trigger asks before it rebuilds: the same
	# answer for a given kernel, whatever runs.
	NVIDIA_PEERMEM_RS_DKMS_TREE="$d/dk" NVIDIA_PEERMEM_RS_MODROOT="$d/root" \
		sh "$pkg/libexec/$name-guard" --stale nvidia_peermem_rs "$kv" 2>/dev/null && die "--stale: not stale"
	NVIDIA_PEERMEM_RS_DKMS_TREE="$d/dk" NVIDIA_PEERMEM_RS_MODROOT="$d/root" \
		sh "$pkg/libexec/$name-guard" --stale nvidia_peermem_rs 7.0.0-0-other || die "--stale: another kernel is stale"
	# depmod picking the inbox ib_uverbs instead (DOCA removed).
	rm -f "$d/depmod.d/doca.conf" "$m/$doca/ib_uverbs.ko.zst"
	index
	dv remove -m "$name" -v "$version" -k "$kv" >/dev/null
	pd_mod "$m/$doca/ib_uverbs.ko.zst" ib_uverbs ib_register_peer_memory_client=0x2510cccc &&
		echo "override ib_uverbs * $doca" >"$d/depmod.d/doca.conf" || return 1
	index
	dv install -m "$name" -v "$version" -k "$kv" >/dev/null 2>&1 || die "rebuild"
	rm -f "$d/depmod.d/doca.conf" "$m/$doca/ib_uverbs.ko.zst"
	index
	guard "DOCA removed, the inbox ib_uverbs back"
	refused ib_uverbs
}

test_dkms_build_exclusive() {
	mkdir -p "$T/norust/include"
	grep -v '^CONFIG_RUST' "$kdir/.config" >"$T/norust/.config"
	local o rc
	o=$(dkms_env dkms build -m "$name" -v "$version" -k 6.12.0-norust --kernelsourcedir "$T/norust" \
		--dkmstree "$T/dkms" --sourcetree "$T/src" 2>&1)
	rc=$?
	echo "$o"
	[ $rc = 77 ] || die "expected exit 77, got $rc"
	echo "$o" | grep -q "BUILD_EXCLUSIVE directive which does not match this kernel" || die "no reason given"
}

test_dkms_remove() {
	dkms_env dkms remove -m "$name" -v "$version" --all --no-depmod \
		--dkmstree "$T/dkms" --sourcetree "$T/src" --installtree "$T/root/lib/modules" || die "dkms remove"
	[ ! -e "$T/root/lib/modules/$kver/updates/dkms/nvidia_peermem_rs.ko" ] || die "module left installed"
	[ ! -e "$T/dkms/$name/$version" ] || die "dkms tree left"
	[ -z "$(dk status -m "$name" 2>/dev/null)" ] || die "dkms status still lists it"
	echo "removed from the scratch trees"
}

# make dkms-install / dkms-remove themselves, with every directory and the
# dkms trees moved into the temp dir, as a user runs them: the default
# install, the module by NVIDIA's name (file nvidia_peermem.ko), which NCCL and
# UCX see on a core without /sys/kernel/mm/memory_peers.
test_make_dkms_targets() {
	local r=$T/mkdkms
	mkdir -p "$r/lib/modules/$kver" "$r/dkms"
	local vars=(USRSRCDIR="$r/usr/src" SYSCONFDIR="$r/etc" PREFIX="$r/usr" KVER="$kver" SYSTEMCTL=true
		PKG_DKMS_FORCE_DIR="$r/usr/share/dkms/modules_to_force_install"
		DKMS="dkms --dkmstree $r/dkms --sourcetree $r/usr/src --installtree $r/lib/modules --kernelsourcedir $kdir --no-depmod -j $jobs")
	dkms_env make --no-print-directory -f "$pkg/packaging.mk" PKG_OUT="$out" dkms-install "${vars[@]}" >"$T/mkdkms.log" ||
		die "make dkms-install"
	[ -f "$r/lib/modules/$kver/updates/dkms/nvidia_peermem.ko" ] || die "make dkms-install did not install the default, nvidia_peermem.ko"
	[ ! -e "$r/lib/modules/$kver/updates/dkms/nvidia_peermem_rs.ko" ] || die "make dkms-install installed nvidia_peermem_rs.ko"
	grep -q "Load now with 'modprobe nvidia_peermem'" "$T/mkdkms.log" || die "make dkms-install names another module: $(tail -n 2 "$T/mkdkms.log")"
	[ -f "$r/etc/modprobe.d/$name.conf" ] && [ -f "$r/usr/src/$name-dropin-$version/dkms.conf" ] || die "files"
	grep -q '^ExecStart=/sbin/modprobe nvidia_peermem$' "$r/usr/lib/systemd/system/$name.service" || die "the unit does not load nvidia_peermem"
	dkms_env make --no-print-directory -f "$pkg/packaging.mk" PKG_OUT="$out" dkms-remove "${vars[@]}" || die "make dkms-remove"
	[ ! -e "$r/lib/modules/$kver/updates/dkms/nvidia_peermem.ko" ] || die "module left after make dkms-remove"
	local left
	left=$(find "$r" -type f ! -path "$r/lib/modules/*")
	[ -z "$left" ] || die "left after make dkms-remove: $left"
	echo "make dkms-install then dkms-remove: nvidia_peermem.ko installed, then everything removed"
}

# The default of every install target is the module by NVIDIA's name: make
# without PEERMEM_DROPIN stages the drop-in's DKMS tree, and make rpm
# packs it.
test_default_dropin() {
	make --no-print-directory -s -f "$pkg/packaging.mk" PKG_OUT="$out" dkms-source >/dev/null ||
		die "make dkms-source"
	local conf=$out/dkms/$name-dropin-$version/dkms.conf
	grep -q '^BUILT_MODULE_NAME\[0\]="nvidia-peermem"' "$conf" ||
		die "make dkms-source's default is not the drop-in: no $conf with nvidia-peermem"
	command -v rpmbuild >/dev/null || die "rpmbuild missing (packaging/deps.txt: rpm)"
	make --no-print-directory -f "$pkg/packaging.mk" PKG_OUT="$out" rpm >"$res/rpmbuild-default.log" 2>&1 ||
		{ tail -n 20 "$res/rpmbuild-default.log"; die "make rpm failed"; }
	local rpm=$out/rpm/RPMS/noarch/$name-$version-1.noarch.rpm files scripts
	# Whole outputs first: grep -q stops reading early, and under pipefail
	# the writer's SIGPIPE would fail the test.
	files=$(rpm -qpl "$rpm") && scripts=$(rpm -qp --scripts "$rpm") || die "rpm -qp $rpm"
	grep -qx "/usr/src/$name-dropin-$version/dkms.conf" <<<"$files" ||
		die "the default RPM lacks the drop-in's DKMS tree: $(grep dkms.conf <<<"$files")"
	grep -qx "/usr/share/dkms/modules_to_force_install/$name-dropin" <<<"$files" ||
		die "the default RPM lacks dkms's force-install entry"
	grep -qx "/etc/depmod.d/$name-dropin.conf" <<<"$files" ||
		die "the default RPM lacks the depmod.d file that makes depmod pick the drop-in"
	grep -q "dkms install -m $name-dropin -v $version" <<<"$scripts" ||
		die "the default RPM's scriptlets: $(grep dkms <<<"$scripts")"
	echo "default: drop-in DKMS tree (nvidia-peermem.ko); default RPM installs $name-dropin"
}

# --- the Debian package -------------------------------------------------------------------
test_deb() {
	local deb=$out/$name-dkms_$version-1_all.deb
	rm -f "$deb"
	mk deb || return 1
	[ -f "$deb" ] || die "no $deb"
	dpkg-deb -I "$deb" | tee "$res/deb-info.txt"
	dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $NF}' | sed 's|^\./||' | LC_ALL=C sort >"$res/deb.files"
	{
		expected_files usr lib/systemd/system "usr/share/doc/$name-dkms"
		echo "usr/share/doc/$name-dkms/changelog.Debian.gz"
		echo "usr/share/doc/$name-dkms/copyright"
		echo "usr/share/lintian/overrides/$name-dkms"
	} | LC_ALL=C sort >"$T/exp-deb"
	diff -u "$T/exp-deb" "$res/deb.files" || die "deb file list"
	[ "$(dpkg-deb -f "$deb" Package)" = "$name-dkms" ] &&
		[[ "$(dpkg-deb -f "$deb" Depends)" == *dkms* ]] &&
		[[ "$(dpkg-deb -f "$deb" Depends)" == *dwarves* ]] &&
		[ "$(dpkg-deb -f "$deb" Architecture)" = all ] || die "control fields"
	mkdir -p "$T/debx/DEBIAN" && dpkg-deb -x "$deb" "$T/debx" && dpkg-deb -e "$deb" "$T/debx/DEBIAN" &&
		grep -qx "/etc/modprobe.d/$name.conf" "$T/debx/DEBIAN/conffiles" &&
		grep -qx "/etc/$name/build.conf" "$T/debx/DEBIAN/conffiles" &&
		grep -q "common.postinst \"\$DKMS_NAME\" \"\$DKMS_VERSION\"" "$T/debx/DEBIAN/postinst" &&
		grep -q "dkms remove -m \"\$DKMS_NAME\" -v \"\$DKMS_VERSION\" --all" "$T/debx/DEBIAN/prerm" ||
		die "conffiles / maintainer scripts"
	# Packages that bring what a kernel's build needs wake the postinst,
	# which runs autoinstall again and never fails their install (a dkms
	# that fails, stubbed, for each kernel with a build tree here).
	printf '%s\n' "interest-noawait /usr/src" "interest-noawait /lib/modules" "interest-noawait /usr/lib/modules" |
		diff - "$T/debx/DEBIAN/triggers" || die "DEBIAN/triggers"
	mkdir -p "$T/failbin" && printf '#!/bin/sh\necho "dkms $*"; exit 11\n' >"$T/failbin/dkms" && chmod 755 "$T/failbin/dkms"
	PATH="$T/failbin:$PATH" sh "$T/debx/DEBIAN/postinst" triggered /usr/src || die "postinst triggered failed"
	grep -q "^	/usr/libexec/$name/$name-rebuild \"\$DKMS_NAME\" \"\$DKMS_VERSION\" || :" "$T/debx/DEBIAN/postinst" ||
		die "the postinst's trigger does not run $name-rebuild"
	rebuild_never_fails "$T/debx/usr/libexec/$name/$name-rebuild"
	[ "$(dpkg-deb -c "$deb" | awk '{print $2}' | sort -u)" = root/root ] || die "files not owned by root/root"
	grep -q "/usr/libexec/$name/$name-guard" "$T/debx/etc/modprobe.d/$name.conf" || die "guard path in deb"
	systemd-analyze verify --man=no "$T/debx/lib/systemd/system/$name.service" || die "unit in deb"
	echo "deb: $deb ($(stat -c %s "$deb") bytes)"
}

# The drop-in's package: its own name and DKMS tree, the module built by
# NVIDIA's name, the unit loading nvidia_peermem, the guard still in place,
# and each package conflicting with the other (never two clients, never two
# owners of /etc/modprobe.d/nvidia-peermem-rs.conf).
test_deb_dropin() {
	local deb=$out/$name-dropin-dkms_$version-1_all.deb x=$T/debdx
	rm -f "$deb"
	mk deb PEERMEM_DROPIN=1 >/dev/null || return 1
	[ -f "$deb" ] || die "no $deb"
	[ "$(dpkg-deb -f "$deb" Package)" = "$name-dropin-dkms" ] || die "drop-in Package field"
	[ "$(dpkg-deb -f "$deb" Conflicts)" = "$name-dkms" ] || die "drop-in Conflicts: $(dpkg-deb -f "$deb" Conflicts)"
	[ "$(dpkg-deb -f "$out/$name-dkms_$version-1_all.deb" Conflicts)" = "$name-dropin-dkms" ] ||
		die "the package does not conflict with the drop-in"
	mkdir -p "$x/DEBIAN" && dpkg-deb -x "$deb" "$x" && dpkg-deb -e "$deb" "$x/DEBIAN" || die "unpack"
	local src=$x/usr/src/$name-dropin-$version
	grep -q '^PACKAGE_NAME="nvidia-peermem-rs-dropin"' "$src/dkms.conf" &&
		grep -q '^BUILT_MODULE_NAME\[0\]="nvidia-peermem"' "$src/dkms.conf" &&
		grep -q '^MAKE\[0\]="make PEERMEM_DROPIN=1 ' "$src/dkms.conf" || die "drop-in dkms.conf"
	[ -f "$src/kmod/nvidia_peermem_rs.rs" ] || die "drop-in sources missing"
	grep -q '^DKMS_NAME=nvidia-peermem-rs-dropin$' "$x/DEBIAN/postinst" || die "postinst DKMS name"
	grep -q '^ExecStart=/sbin/modprobe nvidia_peermem$' "$x/lib/systemd/system/$name.service" ||
		die "the drop-in's unit does not load nvidia_peermem"
	grep -q "^install nvidia_peermem .*$name-guard nvidia_peermem;" "$x/etc/modprobe.d/$name.conf" ||
		die "the guard does not cover nvidia_peermem in the drop-in"
	grep -q '^DEST_MODULE_NAME\[0\]="nvidia_peermem"' "$src/dkms.conf" ||
		die "the drop-in's dkms.conf does not install nvidia_peermem.ko (the driver's DKMS package owns nvidia-peermem.ko)"
	cmp "$pkg/depmod.d/$name-dropin.conf" "$x/etc/depmod.d/$name-dropin.conf" &&
		grep -qx "/etc/depmod.d/$name-dropin.conf" "$x/DEBIAN/conffiles" ||
		die "the drop-in package lacks /etc/depmod.d/$name-dropin.conf (a conffile)"
	[ "$(cat "$x/usr/share/dkms/modules_to_force_install/$name-dropin" 2>/dev/null)" = "$name-dropin_version-override" ] ||
		die "the drop-in does not ask dkms to skip its version check (modules_to_force_install)"
	systemd-analyze verify --man=no "$x/lib/systemd/system/$name.service" || die "drop-in unit"
	lintian "$deb" >"$res/lintian-dropin.txt" 2>&1
	! grep -q '^E:' "$res/lintian-dropin.txt" || die "lintian errors: $(grep '^E:' "$res/lintian-dropin.txt")"
	echo "deb (drop-in): $deb ($(stat -c %s "$deb") bytes)"
}

# peermem-check's own package: the program the documentation tells users
# to run, built as users build it, version from VERSION.
test_deb_tool() {
	local arch deb x=$T/debtool
	arch=$(dpkg --print-architecture)
	deb=$out/peermem-check_$version-1_$arch.deb
	rm -f "$deb"
	(cd "$repo" && cargo build -q --release --locked -p peermem-check) || die "cargo build of peermem-check"
	mk deb-tool >/dev/null || return 1
	[ -f "$deb" ] || die "no $deb"
	dpkg-deb -I "$deb" | tee "$res/deb-tool-info.txt"
	dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $NF}' | sed 's|^\./||' | LC_ALL=C sort >"$res/deb-tool.files"
	printf '%s\n' usr/bin/peermem-check usr/share/doc/peermem-check/README.md \
		usr/share/doc/peermem-check/changelog.Debian.gz usr/share/doc/peermem-check/copyright |
		LC_ALL=C sort >"$T/exp-tool"
	diff -u "$T/exp-tool" "$res/deb-tool.files" || die "peermem-check deb file list"
	[ "$(dpkg-deb -f "$deb" Package)" = peermem-check ] &&
		[ "$(dpkg-deb -f "$deb" Version)" = "$version-1" ] &&
		[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] &&
		[[ "$(dpkg-deb -f "$deb" Depends)" == "libc6 (>= 2."*", libgcc-s1" ]] || die "control fields"
	mkdir -p "$x" && dpkg-deb -x "$deb" "$x" || die "unpack"
	[ "$(stat -c %a "$x/usr/bin/peermem-check")" = 755 ] || die "peermem-check is not 0755"
	# It runs from the package, says the package's version, and doctor
	# works on a fixture tree without libibverbs or libcuda.
	[ "$("$x/usr/bin/peermem-check" --version)" = "peermem-check $version" ] || die "version"
	"$x/usr/bin/peermem-check" doctor --no-cuda --root "$repo/tools/peermem-check/tests/fixtures/pass" >/dev/null ||
		die "the packaged peermem-check doctor fails on the pass fixture"
	# The DKMS package points at it.
	mk deb >/dev/null || return 1
	[ "$(dpkg-deb -f "$out/$name-dkms_$version-1_all.deb" Recommends)" = peermem-check ] ||
		die "the DKMS package does not recommend peermem-check"
	lintian "$deb" >"$res/lintian-tool.txt" 2>&1
	cat "$res/lintian-tool.txt"
	! grep -q '^E:' "$res/lintian-tool.txt" || die "lintian errors: $(grep '^E:' "$res/lintian-tool.txt")"
	echo "deb (tool): $deb ($(stat -c %s "$deb") bytes)"
}

# The RPM of the DKMS source, as far as a Debian host can check one: it
# builds with rpmbuild, is noarch, requires dkms, marks /etc as config,
# runs dkms add/install and remove in its scriptlets, and carries exactly
# the DKMS tree of make dkms-source and the files of make install. Not
# checked: installing it on an RPM distribution (none here).
# rebuild_never_fails SCRIPT: the trigger's rebuild exits 0 with a dkms
# that fails for every kernel (stubbed), and 2 on a usage error.
rebuild_never_fails() {
	mkdir -p "$T/failbin" && printf '#!/bin/sh\necho "dkms $*"; exit 11\n' >"$T/failbin/dkms" &&
		chmod 755 "$T/failbin/dkms" || die "dkms stub"
	PATH="$T/failbin:$PATH" sh "$1" "$name" "$version" || die "$1 failed with a failing dkms"
	sh "$1" >/dev/null 2>&1
	[ $? = 2 ] || die "$1 without arguments: not a usage error"
}

test_rpm() {
	local rpm=$out/rpm/RPMS/noarch/$name-$version-1.noarch.rpm x=$T/rpmx
	command -v rpmbuild >/dev/null || die "rpmbuild missing (packaging/deps.txt: rpm)"
	mk rpm >"$res/rpmbuild.log" 2>&1 || { tail -n 20 "$res/rpmbuild.log"; die "make rpm failed"; }
	[ -f "$rpm" ] || die "no $rpm"
	rpm -qpi "$rpm" | tee "$res/rpm-info.txt"
	[ "$(rpm -qp --qf '%{ARCH} %{VERSION} %{LICENSE}' "$rpm")" = "noarch $version GPL-2.0-only" ] ||
		die "rpm header: $(rpm -qp --qf '%{ARCH} %{VERSION} %{LICENSE}' "$rpm")"
	rpm -qp --requires "$rpm" | grep -qx 'dkms >= 3.0.11' || die "the RPM does not require dkms"
	rpm -qp --requires "$rpm" | grep -qx 'dwarves' || die "the RPM does not require dwarves (pahole)"
	[ "$(rpm -qpc "$rpm" | LC_ALL=C sort | tr '\n' ' ')" = "/etc/modprobe.d/$name.conf /etc/$name/build.conf " ] ||
		die "config files: $(rpm -qpc "$rpm")"
	# The file trigger: installs under /usr/src or /lib/modules (a kernel's
	# Rust metadata, NVIDIA's or DOCA-OFED's modules) run the rebuild.
	rpm -qp --filetriggers "$rpm" >"$res/rpm-filetriggers.txt"
	grep -q "^transfiletriggerin scriptlet (using /bin/sh) -- /lib/modules, /usr/lib/modules, /usr/src" "$res/rpm-filetriggers.txt" &&
		grep -qx "/usr/libexec/$name/$name-rebuild $name $version || :" "$res/rpm-filetriggers.txt" ||
		die "file trigger: $(cat "$res/rpm-filetriggers.txt")"
	rpm -qp --scripts "$rpm" >"$res/rpm-scripts.txt"
	grep -q "dkms add -m $name -v $version" "$res/rpm-scripts.txt" &&
		grep -q "dkms install -m $name -v $version" "$res/rpm-scripts.txt" &&
		grep -q "dkms remove -m $name -v $version --all" "$res/rpm-scripts.txt" ||
		die "scriptlets: $(cat "$res/rpm-scripts.txt")"
	rm -rf "$x" && mkdir -p "$x" && (cd "$x" && rpm2cpio "$rpm" | cpio -idm --quiet) || die "unpack"
	rebuild_never_fails "$x/usr/libexec/$name/$name-rebuild"
	(cd "$x" && find . -type f | sed 's|^\./||' | LC_ALL=C sort) >"$res/rpm.files"
	{
		expected_files usr usr/lib/systemd/system "usr/share/doc/$name"
		echo "usr/share/licenses/$name-$version/LICENSE"
	} | LC_ALL=C sort >"$T/exp-rpm"
	diff -u "$T/exp-rpm" "$res/rpm.files" || die "RPM file list"
	mk -s dkms-source >/dev/null || return 1
	diff -r "$out/dkms/$name-$version" "$x/usr/src/$name-$version" || die "the RPM's DKMS tree differs from make dkms-source"
	systemd-analyze verify --man=no "$x/usr/lib/systemd/system/$name.service" || die "unit in the RPM"
	echo "rpm: $rpm ($(stat -c %s "$rpm") bytes)"
}

test_lintian() {
	local deb=$out/$name-dkms_$version-1_all.deb
	command -v lintian >/dev/null || die "lintian missing (packaging/deps.txt)"
	lintian --info --tag-display-limit 0 "$deb" >"$res/lintian.txt" 2>&1
	cat "$res/lintian.txt"
	echo "lintian: $(grep -c '^E:' "$res/lintian.txt") errors, $(grep -c '^W:' "$res/lintian.txt") warnings," \
		"$(grep -c '^I:' "$res/lintian.txt") info"
	! grep -q '^E:' "$res/lintian.txt"
}

# --- the VM: the DKMS-installed module loads ------------------------------------------------
test_vm() {
	local k
	k=$("$repo/tests/build-all.sh") || die "tests/build-all.sh failed"
	PEERMEM_VM_EXTRA=$out/vm-extra "$repo/tests/run-vm-suites.sh" "$k" "$res/vm" \
		"$repo/tests/vm/suites/packaging.suite" || {
		grep -h "^PEERMEM-KTAP " "$res/vm/packaging/console.log" 2>/dev/null
		die "packaging.suite failed (log: $res/vm/packaging/console.log)"
	}
	grep -h "^PEERMEM-KTAP " "$res/vm/packaging/console.log"
}

# What a careless run would change on this machine: DKMS's state and keys,
# the module trees, the modprobe/systemd configuration, /usr/src.
host_state() {
	local d
	for d in /var/lib/dkms /usr/src /lib/modules /etc/modprobe.d /etc/dkms \
		/etc/systemd/system /lib/systemd/system /usr/local/lib/systemd/system \
		/usr/libexec /usr/local/libexec /etc/nvidia-peermem-rs; do
		[ -e "$d" ] && find "$d" -maxdepth 3 -newer "$T/stamp" 2>/dev/null
		[ -e "$d" ] && find "$d" -maxdepth 3 -name '*peermem*' 2>/dev/null
	done | LC_ALL=C sort -u
}

# --- run ------------------------------------------------------------------------------
touch "$T/stamp"
sleep 1
host_state >"$T/host-before"
printf '#!/bin/sh\necho "rustc 1.0.0 (fake)"\n' >"$T/fake-rustc"
chmod 755 "$T/fake-rustc"
t lint-shellcheck test_shellcheck
t dkms-conf test_dkms_conf
t make-no-kernel test_make_no_kernel
t print-build-env-ubuntu test_print_build_env_ubuntu
t systemd-verify test_systemd_verify
t systemd-conditions test_systemd_conditions
t guard test_guard
t install-usr-local test_install_usr_local
t install-usr test_install_usr
t deb-tool test_deb_tool
t deb test_deb
t lintian test_lintian
t rpm test_rpm
t default-dropin test_default_dropin
t deb-dropin test_deb_dropin
t dropin-vs-driver-dkms test_dropin_vs_driver_dkms
t peerdirect-exporter test_peerdirect_exporter
t dkms-new-kernel test_dkms_new_kernel
t guard-changed-exporter test_guard_changed_exporter
if [ -z "$kver" ]; then
	[ -n "${PACKAGING_TESTS:-}" ] ||
		bad "dkms (no Rust-enabled kernel tree: see $res/kernel.log)"
else
	t modprobe-dry-run test_modprobe
	t dropin-override test_dropin_override
	t dkms-source test_dkms_source
	t sysroot make_sysroot
	t build-env-checks test_build_env_checks
	t compat-probe-killed test_compat_probe_killed
	t dkms-build-install test_dkms_build_install
	t dkms-dropin test_dkms_dropin
	t dkms-build-exclusive test_dkms_build_exclusive
	t dkms-remove test_dkms_remove
	t make-dkms-install-remove test_make_dkms_targets
	if [ "${PACKAGING_VM:-1}" != 0 ]; then
		t vm-dkms-load test_vm
	fi
fi
host_state >"$T/host-after"
t host-untouched diff -u "$T/host-before" "$T/host-after"
echo "packaging: $passed passed, $failed failed" | tee -a "$res/summary.txt"
[ "$failed" = 0 ]
