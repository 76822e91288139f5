#!/usr/bin/env bash
# `make bench`: build everything, boot the bench suite in the test VM, collect
# the BENCH-RESULT lines of its console, and report (table on the terminal,
# JSON and PNG under $RESULTS/bench). How to read it: tests/bench/README.md.
#
#   RESULTS=DIR             output root (default: <repo>/results)
#   BENCH_PROFILE=quick     few iterations: a smoke test of the pipeline
#   BENCH_SUITE=FILE        another suite file (e.g. one adding coalesce_sg=1)
#   BENCH_CLOCK=icount      (default) QEMU -icount shift=0,sleep=off: guest
#                           time = 1 ns per emulated instruction, immune to
#                           the host's load; wall: plain TCG, host time
#
# Exit status: 0 when the suite ran green (every bench ran, no splat, no
# leak) and the report was written; the figures themselves never fail it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
results=${RESULTS:-$repo/results}
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
clock=${BENCH_CLOCK:-icount}
case $clock in
icount) qemu_extra="-icount shift=0,sleep=off" ;;
wall) qemu_extra= ;;
*)
	echo "run-bench: BENCH_CLOCK must be icount or wall" >&2
	exit 2
	;;
esac
name=$(basename "$suite" .suite)
mkdir -p "$out"

echo "bench: building (kernel cached, fixtures, module, simtest, report)" >&2
kdir=$(tests/build-all.sh)
cargo build -q --release -p bench-report >&2
for ko in tests/fixtures/nvidia_p2p_sim.ko tests/fixtures/peerdirect_sim.ko \
	tests/fixtures/peermem_sim.ko tests/fixtures/peermem_refclient.ko nvidia_peermem_rs.ko; do
	[ -f "$ko" ] || { echo "run-bench: $ko was not built" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(cd "$(dirname "$suite")" && pwd)" != "$repo/tests/bench" ]; then
	# the initramfs takes bench suites from tests/bench only
	echo "run-bench: $suite must live in tests/bench/" >&2
	exit 2
fi
tests/vm/mkinitramfs.sh "$work/initramfs.cpio.gz" "$kdir" >&2

# The runner, with the extra QEMU arguments: through its
# PEERMEM_QEMU_EXTRA hook when it has one (tests/vm/NEEDS-bench.md), else
# through a copy with them added to its QEMU command line.
runner=tests/vm/run-suite.sh
if [ -n "$qemu_extra" ] && ! grep -q PEERMEM_QEMU_EXTRA "$runner"; then
	mkdir -p "$work/vm"
	sed "s|^repo=.*|repo=\"$repo\"|; s|-append \"\$cmdline\"|$qemu_extra &|" \
		"$runner" > "$work/vm/run-suite.sh"
	chmod +x "$work/vm/run-suite.sh"
	if grep -q -- "$qemu_extra" "$work/vm/run-suite.sh"; then
		runner=$work/vm/run-suite.sh
	else
		echo "run-bench: cannot add $qemu_extra to $runner: timing by the wall clock" >&2
		clock=wall
	fi
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench: booting suite $name, clock $clock (takes minutes: TCG)" >&2
start=$(date +%s)
set +e
PEERMEM_QEMU_EXTRA=$qemu_extra "$runner" "$suite" "$work/initramfs.cpio.gz" "$kdir" "$out" >&2
suite_rc=$?
set -e
echo "bench: VM done in $(( $(date +%s) - start ))s (suite verdict rc $suite_rc)" >&2

# what the figures were measured on
{
	printf '{"date":"%s","git":"%s","profile":"%s","suite":"%s","clock":"%s",' \
		"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
		"$profile" "$name" "$clock"
	printf '"host_cpus":%s,"host_load_before":"%s","host_load_after":"%s","qemu":"%s",' \
		"$(nproc)" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
		"$(qemu-system-x86_64 --version | head -n 1 | tr -d '"')"
	printf '"vm":"q35 TCG, 2 vCPUs, %s MiB","kernel":"%s","kernel_debug":"%s"}\n' \
		"$(sed -n 's/^memory[[:space:]]*\([0-9]*\).*/\1/p' "$suite" | head -n 1)" \
		"$(cat "$kdir/include/config/kernel.release")" \
		"$(grep -E '^CONFIG_(KASAN|PROVE_LOCKING|DEBUG_SPINLOCK|DMA_API_DEBUG|DEBUG_KMEMLEAK|FAILSLAB)=y' "$kdir/.config" |
			sed 's/^CONFIG_//; s/=y//' | tr '\n' ' ' | sed 's/ $//')"
} > "$out/meta.json"


log="$out/$name/console.log"
tr -d '\r' < "$log" | grep -o 'BENCH-RESULT {.*' > "$out/raw.jsonl" || true
grep -h '^SCENARIO-LOG' "$log" | tr -d '\r' >&2 || true
if ! [ -s "$out/raw.jsonl" ]; then
	echo "run-bench: no BENCH-RESULT in $log" >&2
	exit 1
fi
echo >&2
target/release/bench-report "$out/raw.jsonl" "$out" --meta "$out/meta.json"
echo "raw:     $out/raw.jsonl"
echo "console: $log"
if [ $suite_rc -ne 0 ]; then
	echo "run-bench: the bench suite was not green (see $out/$name/verdict.json)" >&2
	exit 1
fi
