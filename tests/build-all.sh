#!/usr/bin/env bash
# Build everything the VM runs: the test kernel (cached), the fixtures, the
# module and its KUnit module (PEERMEM_KUNIT=1), the guest binaries and the verdict.
# Prints the test kernel tree (KDIR) on stdout.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=kernel/toolchain.sh
. tests/kernel/toolchain.sh
jobs=$(nproc)

# The cargo builds (host tools, guest binaries) run beside the
# kernel build (cold: its serial link steps) and the kernel-module builds
# below, most of which are one rustc or a short C build at a time and leave
# a core idle.
cargo_builds() {
	echo "build: host tools (vm-verdict) and guest binaries" >&2
	cargo build -q --release -p vm-verdict >&2
	if [ -f tests/sim-client/Cargo.toml ]; then
		# Static and not position-independent: the scenarios exec simtest
		# for nearly every step, and a static-pie binary relocates
		# itself at every start. Measured in the VM (40 calls,
		# TCG + KASAN): 42-45 ms a call as static-pie, 29-30 ms as a
		# static executable, 23-24 ms for an empty static C program.
		RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" cargo build -q --release \
			--target x86_64-unknown-linux-gnu -p peermem-sim --bin simtest >&2
	fi
	if [ -f tools/peermem-check/Cargo.toml ] && [ "${PEERMEM_VM_TOOL:-1}" = 1 ]; then
		# As users build it (libibverbs, libcuda resolved at run time): the
		# VM runs this one, with the libraries it links (mkinitramfs).
		cargo build -q --release -p peermem-check >&2
	fi
}
cargo_builds &
cargo_pid=$!
# wait_cargo: the build fails if the cargo builds did.
wait_cargo() {
	wait "$cargo_pid" || { echo "build: the cargo builds failed (see above)" >&2; exit 1; }
}
# Whatever way this script ends, no build of it outlives it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
kdir=$(tests/kernel/build-kernel.sh)

# copy_sources DEST [PATH ...]: the module's sources, and PATHs, into DEST
# without build outputs. mtimes are kept: an unchanged tree rebuilds
# nothing.
copy_sources() {
	local dest=$1
	shift
	mkdir -p "$dest"
	tar -cf - --exclude='*.o' --exclude='.*.cmd' --exclude='*.mod*' --exclude='*.ko' \
		--exclude='*_generated.rs' --exclude='compat*.cfg' --exclude='*.o.d' --exclude='*.rmeta' \
		--exclude=Module.symvers --exclude=modules.order \
		VERSION Kbuild kmod ffi "$@" | tar -C "$dest" -xf -
}

# build_variant DIR SWITCH TARGET WHAT SYMVERS: builds TARGET in DIR (a
# copy of the sources) with SWITCH=1, against the exports in SYMVERS; the
# module's own notes on what it detected are left out of the log.
build_variant() {
	make -s -C "$kdir" M="$1" "${PEERMEM_KMAKE_ARGS[@]}" "KBUILD_EXTRA_SYMBOLS=$5" "$2=1" \
		-j"$jobs" "$3" 2>&1 | grep -v "^nvidia_peermem_rs:" >&2 || true
	[ -f "$1/$3" ] || { echo "build: $4 did not build" >&2; exit 1; }
}

if [ "$PEERMEM_KERNEL" != "$PEERMEM_PRIMARY_KERNEL" ]; then
	# Another kernel of the matrix (make ... KERNEL=<id>): the module, its
	# KUnit module and the fixtures, from a copy of their sources (mtimes
	# kept: an unchanged tree rebuilds nothing), into
	# $PEERMEM_MODULE_TREE_REL, where mkinitramfs.sh takes them from.
	tree=$repo/$PEERMEM_MODULE_TREE_REL
	copy_sources "$tree" tests/fixtures
	echo "build: kernel $PEERMEM_KERNEL: fixtures, nvidia_peermem_rs (in $PEERMEM_MODULE_TREE_REL)" >&2
	make -s -C "$kdir" M="$tree/tests/fixtures" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
	make -s -C "$kdir" M="$tree/tests/fixtures/r525" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
	make -s -C "$kdir" M="$tree/tests/fixtures/pd_exports" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
	make -s -C "$kdir" M="$tree/tests/fixtures/driver-copy" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
	case $PEERMEM_KERNEL in
	*-ubuntu)
		# An Ubuntu-shaped kernel: the module, its drop-in and its KUnit
		# module from the installed layout alone, through dkms and the
		# Debian package (tests/ubuntu/README.md); the fixtures above
		# are the .ko files that layout holds.
		wait_cargo
		tests/ubuntu/build-modules.sh "$kdir" "$tree"
		echo "$kdir"
		exit 0
		;;
	esac
	make -s -C "$kdir" M="$tree" "${PEERMEM_KMAKE_ARGS[@]}" \
		"KBUILD_EXTRA_SYMBOLS=$tree/tests/fixtures/Module.symvers" PEERMEM_KUNIT=1 -j"$jobs" modules >&2
	# The drop-in and the stand-in for the driver's copy, as for the
	# primary kernel below (build/dropin and tests/fixtures/driver-copy of
	# the tree, where mkinitramfs.sh looks): the module's refusal to load
	# beside another client and what NCCL and UCX see of each build are
	# checked on every kernel.
	echo "build: kernel $PEERMEM_KERNEL: nvidia-peermem.ko (drop-in)" >&2
	copy_sources "$tree/build/dropin"
	build_variant "$tree/build/dropin" PEERMEM_DROPIN nvidia-peermem.ko "the drop-in" \
		"$tree/tests/fixtures/Module.symvers"
	# The test build (delay points), as for the primary kernel below.
	copy_sources "$tree/build/test-delays"
	build_variant "$tree/build/test-delays" PEERMEM_TEST_DELAYS nvidia_peermem_rs.ko "the test build" \
		"$tree/tests/fixtures/Module.symvers"
	wait_cargo
	echo "$kdir"
	exit 0
fi

if [ -f tests/fixtures/Kbuild ] || [ -f tests/fixtures/Makefile ]; then
	echo "build: fixtures" >&2
	make -s -C "$kdir" M="$repo/tests/fixtures" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
fi
# NVIDIA's own nvidia-peermem.c of each fetched release, unmodified, against
# the fixtures (issue 33; client=nv535 ... in the scenarios). Without the
# fetched sources (make deps) the build says so and goes on: suite
# nvidia-vs-ours then fails on the missing modules.
if [ -f tests/fixtures/Module.symvers ]; then
	tests/nvidia/build-nvidia-peermem.sh "$kdir" "$repo/build/nvidia-peermem" \
		"$repo/tests/fixtures/Module.symvers" >/dev/null ||
		echo "build: WARNING: NVIDIA's nvidia-peermem modules not built (see above)" >&2
fi
if [ -f tests/fixtures/r525/Kbuild ]; then
	echo "build: fixtures (provider as driver r525)" >&2
	make -s -C "$kdir" M="$repo/tests/fixtures/r525" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
fi
if [ -f tests/fixtures/pd_exports/Kbuild ]; then
	echo "build: fixtures (the simulated core generations' optional exports)" >&2
	make -s -C "$kdir" M="$repo/tests/fixtures/pd_exports" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
fi
if [ -f tests/fixtures/driver-copy/Kbuild ]; then
	echo "build: fixtures (stand-in for the driver's nvidia-peermem.ko)" >&2
	make -s -C "$kdir" M="$repo/tests/fixtures/driver-copy" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" modules >&2
fi
if [ -f Kbuild ]; then
	syms=()
	[ -f tests/fixtures/Module.symvers ] && syms=("KBUILD_EXTRA_SYMBOLS=$repo/tests/fixtures/Module.symvers")
	# The drop-in (PEERMEM_DROPIN=1: nvidia-peermem.ko, module
	# nvidia_peermem), built from a copy so its objects stay apart; the copy
	# is taken before the module's own build writes beside the sources, and
	# the two builds (one rustc each, mostly) run at the same time.
	dropin=$repo/build/dropin
	copy_sources "$dropin"
	echo "build: nvidia_peermem_rs and nvidia-peermem.ko (drop-in)" >&2
	# The test build (PEERMEM_TEST_DELAYS=1: delay points in the module's
	# own race windows), from a copy too; only the forced-window scenarios
	# load it (/fixtures/test-delays in the VM).
	testdelays=$repo/build/test-delays
	copy_sources "$testdelays"
	make -s -C "$kdir" M="$repo" "${PEERMEM_KMAKE_ARGS[@]}" "${syms[@]}" PEERMEM_KUNIT=1 -j"$jobs" modules >&2 &
	module_pid=$!
	build_variant "$dropin" PEERMEM_DROPIN nvidia-peermem.ko "the drop-in" "$repo/tests/fixtures/Module.symvers"
	build_variant "$testdelays" PEERMEM_TEST_DELAYS nvidia_peermem_rs.ko "the test build" \
		"$repo/tests/fixtures/Module.symvers"
	wait "$module_pid" || { echo "build: nvidia_peermem_rs did not build" >&2; exit 1; }
fi

wait_cargo
echo "$kdir"
