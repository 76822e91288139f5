#!/usr/bin/env bash
# Run VM suites against an already built tree.
#   run-vm-suites.sh KDIR RESULTS_DIR SUITE_FILE...
# Boots up to PEERMEM_VM_JOBS suites at a time (default: cores + 1 when the
# host has at least 2, see below), the longest first (the last run's
# times, kept in the cache, else tests/vm/suite-seconds/<kernel>.txt, else
# each suite's timeout). Each suite's output
# is printed when it ends; RESULTS_DIR/timings.json has every suite's wall
# time. Exit 0 only if every suite is green.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
kdir=$1
results=$2
shift 2
mkdir -p "$results"
initramfs="$results/initramfs.cpio"
# PEERMEM_INITRAMFS_READY=1: the caller packed it already (run-tests.sh,
# whose self-test boots it meanwhile: it must not be rewritten under them).
if [ "${PEERMEM_INITRAMFS_READY:-0}" != 1 ] || [ ! -f "$initramfs" ]; then
	"$repo/tests/vm/mkinitramfs.sh" "$initramfs" "$kdir" || exit 2
fi
verdict="$repo/target/release/vm-verdict"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/nvidia-peermem-rs"
# (PEERMEM_SUITE_HISTORY: another kernel's, tests/vm/run-kernel-matrix.sh)
history="${PEERMEM_SUITE_HISTORY:-$cache/suite-seconds.txt}"
# Without a history (a new machine): the committed figures of the kernel
# (tests/vm/suite-seconds/README.md), then the suite's timeout.
kernel=${PEERMEM_KERNEL:-$(awk '!/^#/ && NF { print $1; exit }' "$repo/tests/kernel/kernels")}
defaults="$repo/tests/vm/suite-seconds/$kernel.txt"
# One QEMU more than the host has cores: a QEMU uses about 0.9 of a core
# (scenario scripts are mostly one thread; guest sleeps, the edu device's
# 100 ms DMA timer and kmemleak's age wait leave the rest idle). Measured
# on 2 cores, warm make test: 2 at a time 21m14, 3 at a time 18m21, same
# 276 tests green.
jobs=${PEERMEM_VM_JOBS:-}
if [ -z "$jobs" ]; then
	jobs=1
	[ "$(nproc)" -ge 2 ] && jobs=$(($(nproc) + 1))
fi

# Longest first: "seconds path" lines, sorted.
ordered=()
declare -A expected=()
while read -r t f; do
	ordered+=("$f")
	expected[$f]=$t
done < <(
	for f in "$@"; do
		n=$(basename "$f" .suite)
		t=$(awk -v n="$n" '$1 == n { t = $2 } END { print t }' "$history" 2>/dev/null)
		[ -n "$t" ] || t=$(awk -v n="$n" '$1 == n { t = $2 } END { print t }' "$defaults" 2>/dev/null)
		[ -n "$t" ] || t=$("$verdict" suite-field --suite "$f" timeout 2>/dev/null || echo 600)
		echo "$t $f"
	done | sort -rn)

# PEERMEM_VM_SLOTS=DIR: runs started side by side (make test: the primary
# kernel's suites, the other kernels' matrix suites, the harness self-test
# and the packaging boot) share one pool of $jobs QEMUs: each boot starts
# once it holds one of DIR's slots (tests/vm/pool-slot.sh), longest first
# across the runs too.
slots=${PEERMEM_VM_SLOTS:-}
[ -z "$slots" ] || { mkdir -p "$slots" && echo "$jobs" >"$slots/jobs"; }

rc=0
declare -A running=()
# reap: waits for one suite to end, prints its output, records its status.
reap() {
	local pid st n
	wait -n -p pid
	st=$?
	[ -n "${pid:-}" ] || return 0
	[ "$st" = 0 ] || rc=1
	n=$(basename "${running[$pid]}" .suite)
	cat "$results/$n.run.out"
	rm -f "$results/$n.run.out"
	unset "running[$pid]"
}
for f in "${ordered[@]}"; do
	while [ "${#running[@]}" -ge "$jobs" ]; do reap; done
	n=$(basename "$f" .suite)
	"$repo/tests/vm/pool-slot.sh" "${expected[$f]}" "$kernel/$n" \
		"$repo/tests/vm/run-suite.sh" "$f" "$initramfs" "$kdir" "$results" >"$results/$n.run.out" 2>&1 &
	running[$!]=$f
done
while [ "${#running[@]}" -gt 0 ]; do reap; done

# timings.json, and the history the next run orders by.
python3 - "$results" "$history" "$@" <<'EOP'
import json, os, sys
results, history, suites = sys.argv[1], sys.argv[2], sys.argv[3:]
t = {}
for f in suites:
    n = os.path.basename(f)[:-len(".suite")]
    try:
        t[n] = int(open(os.path.join(results, n, "seconds")).read())
    except (OSError, ValueError):
        pass
old = {}
try:
    old = json.load(open(os.path.join(results, "timings.json")))
except (OSError, ValueError):
    pass
old.update(t)
json.dump(old, open(os.path.join(results, "timings.json"), "w"), indent=1, sort_keys=True)
hist = {}
try:
    for line in open(history):
        k, v = line.split()
        hist[k] = v
except (OSError, ValueError):
    pass
hist.update({k: str(v) for k, v in t.items()})
os.makedirs(os.path.dirname(history), exist_ok=True)
with open(history, "w") as h:
    for k in sorted(hist):
        h.write(f"{k} {hist[k]}\n")
EOP

# NVIDIA's nvidia-peermem beside ours (issue 33), when its suite ran: each
# of its scenarios joined with our run of the same scenario in any verdict
# of this results directory (make test: every suite; make vm-test: that
# boot's and whatever earlier boots left there). Its tests are already in
# the verdicts: the table only shows them side by side.
for f in "$@"; do
	[ "$(basename "$f")" = nvidia-vs-ours.suite ] || continue
	[ -f "$results/nvidia-vs-ours/verdict.json" ] || break
	"$verdict" nvidia-vs-ours --json "$results/nvidia-vs-ours.json" "$results"/*/verdict.json \
		>"$results/nvidia-vs-ours.txt" 2>&1 || true
	cat "$results/nvidia-vs-ours.txt"
done
exit $rc
