#!/usr/bin/env bash
# `make bench`: build everything, boot the bench suite in the VM on each
# kernel, collect the BENCH-RESULT lines of the consoles, and report (a
# table per kernel on the terminal, JSON and PNG under $RESULTS/bench). How
# to read it: tests/bench/README.md.
#
# The kernels (issues 15, 32):
#   production  the bench kernel (tests/kernel/bench.fragment: the test
#               kernel's configuration with every debug facility off); the
#               headline. Results under $RESULTS/bench/production/.
#   production-<id>  the same for another kernel of the matrix
#               (tests/kernel/kernels, e.g. production-7.2: GCC-built 7.2).
#               Results under $RESULTS/bench/production-<id>/.
#   debug       the test kernel (KASAN, lockdep, DMA-API debugging, ...).
#               Results under $RESULTS/bench/ as before.
# Each kernel gets its own build of the modules: the debug one the in-tree
# build (tests/build-all.sh, the one make test uses), the production one a
# copy of the sources under build/bench-production/.
#
#   RESULTS=DIR             output root (default: <repo>/results)
#   BENCH_KERNELS="production debug"  which kernels, in this order (default:
#                           every kernel's production one, then debug)
#   BENCH_PROFILE=quick     few iterations: a smoke test of the pipeline
#   BENCH_SUITE=FILE        another suite file (e.g. one adding coalesce_sg=1)
#   BENCH_CLOCK=icount      (default) QEMU -icount shift=0,sleep=off: guest
#                           time = 1 ns per emulated instruction, immune to
#                           the host's load; wall: plain TCG, host time
#   BENCH_COST=v100         (default) the simulated provider charges the
#                           driver's own pin, unpin and DMA map costs
#                           (tests/fixtures/README.md); off: only the
#                           fixture's code (the figures before the model);
#                           b200, aws: other published pin/unpin times at
#                           64 KiB (tests/fixtures/README.md)
#   PEERMEM_NVIDIA_SRC=DIR  also NVIDIA's nvidia-peermem of a 560+ release
#                           from a checkout of NVIDIA/open-gpu-kernel-modules
#                           (its top or kernel-open/ directory), unmodified;
#                           its client `nvidia` then runs in both modes
#                           (tests/nvidia/build-nvidia-peermem.sh)
#   BENCH_PARALLEL=1        (default) both kernels' VMs at once (under icount
#                           the figures do not depend on it); 0: one by one
#   BENCH_BUILD_ONLY=1      build only, print the kernel tree (KDIR) and exit
#
# Exit status: 0 when the suite ran green on every kernel (every bench ran,
# no splat, no leak) and the reports were written; the figures themselves
# never fail it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
# shellcheck source=../kernel/toolchain.sh
. tests/kernel/toolchain.sh
results=${RESULTS:-$repo/results}
# Another kernel of the matrix (PEERMEM_KERNEL=<id>): its own module copies.
bench_tree_suffix=
[ "$PEERMEM_KERNEL" = "$PEERMEM_PRIMARY_KERNEL" ] || bench_tree_suffix=-$PEERMEM_KERNEL
out="$results/bench"
profile=${BENCH_PROFILE:-full}
case $profile in
full) suite_default=tests/bench/bench.suite ;;
quick) suite_default=tests/bench/bench-quick.suite ;;
*)
	echo "run-bench: BENCH_PROFILE must be full or quick" >&2
	exit 2
	;;
esac
suite=${BENCH_SUITE:-$suite_default}
cost=${BENCH_COST:-v100}
case $cost in
v100 | b200 | aws | off) ;;
*)
	echo "run-bench: BENCH_COST must be v100, b200, aws or off" >&2
	exit 2
	;;
esac
export PEERMEM_PROVIDER_COST=$cost
clock=${BENCH_CLOCK:-icount}
case $clock in
icount) qemu_extra="-icount shift=0,sleep=off" ;;
wall) qemu_extra= ;;
*)
	echo "run-bench: BENCH_CLOCK must be icount or wall" >&2
	exit 2
	;;
esac
# The matrix's other kernels (a production-<id> each by default).
other_kernels=$(awk '!/^#/ && NF { print $1 }' "$PEERMEM_KERNELS_TABLE" | tail -n +2 | tr '\n' ' ')
default_kernels=production
if [ "$PEERMEM_KERNEL" = "$PEERMEM_PRIMARY_KERNEL" ]; then
	for id in $other_kernels; do default_kernels="$default_kernels production-$id"; done
fi
kernels=${BENCH_KERNELS:-$default_kernels debug}
for k in $kernels; do
	case $k in
	production | debug) ;;
	production-*)
		if [ "$PEERMEM_KERNEL" != "$PEERMEM_PRIMARY_KERNEL" ] ||
			[[ " $other_kernels " != *" ${k#production-} "* ]]; then
			echo "run-bench: $k: no such kernel besides the primary one (tests/kernel/kernels: $other_kernels)" >&2
			exit 2
		fi
		;;
	*)
		echo "run-bench: BENCH_KERNELS takes production, production-<id> (${other_kernels% }) and debug, not '$k'" >&2
		exit 2
		;;
	esac
done
name=$(basename "$suite" .suite)
if [ "$(cd "$(dirname "$suite")" && pwd)" != "$repo/tests/bench" ]; then
	# the initramfs takes bench suites from tests/bench only
	echo "run-bench: $suite must live in tests/bench/" >&2
	exit 2
fi
mkdir -p "$out"
jobs=$(nproc)

# outdir KERNEL: where a kernel's results go
outdir() {
	case $1 in
	debug) echo "$out" ;;
	*) echo "$out/$1" ;;
	esac
}

# build_copy KDIR DIR: the fixtures the bench loads and the module, built
# against KDIR in a copy of their sources at DIR (sources only, mtimes kept:
# an unchanged tree rebuilds nothing; the in-tree objects stay the test
# kernel's).
build_copy() {
	local kdir=$1 dst=$2
	mkdir -p "$dst"
	tar -cf - --exclude='*.o' --exclude='.*.cmd' --exclude='*.mod*' --exclude='*.ko' \
		--exclude='*_generated.rs' --exclude='*.o.d' --exclude='*.rmeta' \
		--exclude='Module.symvers' --exclude='modules.order' \
		--exclude='tests/fixtures/r525' --exclude='tests/fixtures/driver-copy' \
		VERSION Kbuild kmod ffi tests/fixtures | tar -C "$dst" -xf -
	make -s -C "$kdir" M="$dst/tests/fixtures" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" \
		FIXTURES_ONLY="nvidia_p2p_sim.o peerdirect_sim.o peermem_sim.o peermem_refclient.o" \
		modules >&2
	make -s -C "$kdir" M="$dst" "${PEERMEM_KMAKE_ARGS[@]}" -j"$jobs" \
		"KBUILD_EXTRA_SYMBOLS=$dst/tests/fixtures/Module.symvers" modules 2>&1 |
		grep -v "^nvidia_peermem_rs:" >&2 || true
	for ko in tests/fixtures/nvidia_p2p_sim.ko tests/fixtures/peerdirect_sim.ko \
		tests/fixtures/peermem_sim.ko tests/fixtures/peermem_refclient.ko nvidia_peermem_rs.ko; do
		[ -f "$dst/$ko" ] || { echo "run-bench: $dst/$ko was not built" >&2; exit 1; }
	done
	# NVIDIA's own nvidia-peermem (client nvidia, the headline's baseline;
	# issue 33), against this kernel and these fixtures
	tests/nvidia/build-nvidia-peermem.sh "$kdir" "$dst/nvidia-peermem" \
		"$dst/tests/fixtures/Module.symvers" >/dev/null
}

echo "bench: building (kernels cached, fixtures, module, simtest, report)" >&2
kdir_debug=$(tests/build-all.sh)
cargo build -q --release -p bench-report >&2
for ko in tests/fixtures/nvidia_p2p_sim.ko tests/fixtures/peerdirect_sim.ko \
	tests/fixtures/peermem_sim.ko tests/fixtures/peermem_refclient.ko nvidia_peermem_rs.ko; do
	[ -f "$ko" ] || { echo "run-bench: $ko was not built" >&2; exit 1; }
done
kdir_production=
case " $kernels " in
*" production "*)
	kdir_production=$(tests/kernel/build-kernel.sh bench)
	echo "bench: fixtures and module for the production kernel (build/bench-production$bench_tree_suffix)" >&2
	build_copy "$kdir_production" "$repo/build/bench-production$bench_tree_suffix"
	;;
esac
# production-<id>: that kernel's own build (its toolchain), by this script
# run for it, which prints its bench kernel's tree.
declare -A kdir_other
for k in $kernels; do
	case $k in
	production-*)
		id=${k#production-}
		echo "bench: the production kernel of $id, its fixtures and module (build/bench-production-$id)" >&2
		kdir_other[$k]=$(PEERMEM_KERNEL=$id BENCH_KERNELS=production BENCH_BUILD_ONLY=1 \
			"$repo/tests/bench/run-bench.sh")
		;;
	esac
done
# BENCH_BUILD_ONLY=1: stop here (tests/bench/run-trace.sh boots its own VMs).
if [ "${BENCH_BUILD_ONLY:-0}" = 1 ]; then
	echo "${kdir_production:-$kdir_debug}"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# run_vm KERNEL: pack its initramfs, boot the suite, write meta.json and
# raw.jsonl; exit status the suite's verdict.
run_vm() {
	local k=$1 kdir modules="" dir id=$PEERMEM_KERNEL
	dir=$(outdir "$k")
	mkdir -p "$dir"
	case $k in
	debug) kdir=$kdir_debug ;;
	production)
		kdir=$kdir_production
		modules=$repo/build/bench-production$bench_tree_suffix
		;;
	production-*)
		id=${k#production-}
		kdir=${kdir_other[$k]}
		modules=$repo/build/bench-$k
		;;
	esac
	PEERMEM_KERNEL=$id PEERMEM_VM_MODULES=$modules tests/vm/mkinitramfs.sh "$work/$k.cpio" "$kdir" >&2
	echo "bench: $k kernel: booting suite $name, clock $clock (takes minutes: TCG)" >&2
	local start rc
	start=$(date +%s)
	set +e
	# The production kernel has no kmemleak: its boot's leak scan is a skip
	# by design, which the verdict accepts only when asked.
	PEERMEM_ALLOW_SKIPS=1 PEERMEM_KERNEL=$id PEERMEM_QEMU_EXTRA=$qemu_extra tests/vm/run-suite.sh "$suite" "$work/$k.cpio" \
		"$kdir" "$dir" >"$work/$k.vm.log" 2>&1
	rc=$?
	set -e
	sed "s/^/[$k] /" "$work/$k.vm.log" >&2
	echo "bench: $k kernel: VM done in $(($(date +%s) - start))s (suite verdict rc $rc)" >&2
	local debug_opts
	debug_opts=$(grep -E '^CONFIG_(KASAN|PROVE_LOCKING|DEBUG_SPINLOCK|DMA_API_DEBUG|DEBUG_KMEMLEAK|FAILSLAB|DEBUG_LIST|DETECT_HUNG_TASK)=y' \
		"$kdir/.config" | sed 's/^CONFIG_//; s/=y//' | tr '\n' ' ' | sed 's/ $//' || true)
	{
		printf '{"date":"%s","git":"%s","profile":"%s","suite":"%s","clock":"%s","provider_cost":"%s",' \
			"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
			"$profile" "$name" "$clock" "$cost"
		printf '"host_cpus":%s,"host_load_before":"%s","host_load_after":"%s","qemu":"%s",' \
			"$(nproc)" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
			"$(qemu-system-x86_64 --version | head -n 1 | tr -d '"')"
		printf '"vm":"q35 TCG, 2 vCPUs, %s MiB","kernel_flavour":"%s","kernel":"%s","kernel_debug":"%s"}\n' \
			"$(sed -n 's/^memory[[:space:]]*\([0-9]*\).*/\1/p' "$suite" | head -n 1)" \
			"$k" "$(cat "$kdir/include/config/kernel.release")" "$debug_opts"
	} >"$dir/meta.json"
	local log="$dir/$name/console.log"
	tr -d '\r' <"$log" | grep -o 'BENCH-RESULT {.*' >"$dir/raw.jsonl" || true
	grep -h '^SCENARIO-LOG' "$log" | tr -d '\r' | sed "s/^/[$k] /" >&2 || true
	return $rc
}

declare -A rcs
if [ "${BENCH_PARALLEL:-1}" = 1 ]; then
	declare -A pids
	for k in $kernels; do
		run_vm "$k" &
		pids[$k]=$!
	done
	for k in $kernels; do
		set +e
		wait "${pids[$k]}"
		rcs[$k]=$?
		set -e
	done
else
	for k in $kernels; do
		set +e
		run_vm "$k"
		rcs[$k]=$?
		set -e
	done
fi

# The reports, the headline (production) first.
status=0
first=1
for k in $kernels; do
	dir=$(outdir "$k")
	echo
	if [ $first = 1 ] && [[ $k = production* ]]; then
		echo "######## $k kernel (headline) ########"
	else
		echo "######## $k kernel ########"
	fi
	first=0
	if ! [ -s "$dir/raw.jsonl" ]; then
		echo "run-bench: no BENCH-RESULT in $dir/$name/console.log" >&2
		status=1
		continue
	fi
	target/release/bench-report "$dir/raw.jsonl" "$dir" --meta "$dir/meta.json" || status=1
	echo "raw:     $dir/raw.jsonl"
	echo "console: $dir/$name/console.log"
	if [ "${rcs[$k]}" -ne 0 ]; then
		echo "run-bench: the bench suite was not green on the $k kernel (see $dir/$name/verdict.json)" >&2
		status=1
	fi
done
exit $status
