#!/usr/bin/env bash
# `make soak`: boots each suite of tests/vm/soak.list SOAK_N times (default
# 20), each boot with fresh seeds, and prints suite x runs x failures with
# the seed(s) and the log of every failed run; writes results/soak.json.
# A boot with a skipped test (other than a line the cut for the kernel
# declared) is a failed run unless PEERMEM_ALLOW_SKIPS=1: it did not test
# all it names.
# Not part of `make test` (it is long). SOAK_SUITES="a b" overrides the list.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo" || exit 2
results="${RESULTS:-$repo/results}/soak"
n=${SOAK_N:-20}
case "$n" in '' | *[!0-9]*) echo "error: SOAK_N=$n is not a number" >&2; exit 2 ;; esac
rm -rf "$results"
mkdir -p "$results"
# Every scenario scans for leaks itself in a soak (make test leaves that to
# each boot's final scan): a leak then fails the scenario that leaked.
export PEERMEM_KMEMLEAK=${PEERMEM_KMEMLEAK:-each}

# A soak.list line is "NAME" (booted SOAK_N times) or "NAME runs=K" (K
# times whatever SOAK_N is, for a suite too long to boot SOAK_N times).
if [ -n "${SOAK_SUITES:-}" ]; then
	read -ra names <<<"$SOAK_SUITES"
else
	mapfile -t names < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/[[:space:]]\+/:/' \
		-e 's/[[:space:]]*$//' tests/vm/soak.list)
fi
files=()
declare -A runs_of=()
for s in "${names[@]}"; do
	k=$n
	case "$s" in
	*:runs=*)
		k=${s#*:runs=}
		s=${s%%:*}
		case "$k" in '' | *[!0-9]*) echo "error: soak.list: '$s runs=$k': runs is not a number" >&2; exit 2 ;; esac
		[ "$k" -le "$n" ] || k=$n
		;;
	*:*) echo "error: soak.list: '${s/:/ }': expected NAME or NAME runs=K" >&2; exit 2 ;;
	esac
	f=tests/vm/suites/$s.suite
	[ -f "$f" ] || f=tests/vm/soak-suites/$s.suite
	[ -f "$f" ] || { echo "error: no suite '$s' (tests/vm/suites or tests/vm/soak-suites)" >&2; exit 2; }
	files+=("$f")
	runs_of[$f]=$k
done

kdir=$(tests/build-all.sh) || { echo "error: the build failed" >&2; exit 1; }
# The suites as this kernel can run them (tests/vm/cut-for-kernel.sh).
rm -rf "$results/suites-for-kernel"
mapfile -t cut < <(tests/vm/cut-for-kernel.sh "$kdir" "$results/suites-for-kernel" "${files[@]}")
[ "${#cut[@]}" = "${#files[@]}" ] || { echo "error: the suites could not be cut for this kernel" >&2; exit 2; }
for i in "${!files[@]}"; do runs_of[${cut[$i]}]=${runs_of[${files[$i]}]}; done
files=("${cut[@]}")
initramfs="$results/initramfs.cpio"
PEERMEM_VM_SUITES="$results/suites-for-kernel" tests/vm/mkinitramfs.sh "$initramfs" "$kdir" || exit 2

start=$(date +%s)
# Boots run PEERMEM_VM_JOBS at a time (default: cores + 1, as make test),
# the longest suites first (their timeouts order them); each boot has its
# own results folder, so runs of one suite never share files.
jobs=${PEERMEM_VM_JOBS:-}
if [ -z "$jobs" ]; then
	jobs=1
	[ "$(nproc)" -ge 2 ] && jobs=$(($(nproc) + 1))
fi
verdict="$repo/target/release/vm-verdict"
mapfile -t ordered < <(for f in "${files[@]}"; do
	echo "$("$verdict" suite-field --suite "$f" timeout 2>/dev/null || echo 600) $f"
done | sort -rn | cut -d' ' -f2-)
declare -A running=()
# reap: waits for one boot to end and says how it went.
reap() {
	local pid st
	wait -n -p pid
	st=$?
	[ -n "${pid:-}" ] || return 0
	echo "$st" >"${running[$pid]}/rc"
	echo "soak: ${running[$pid]#"$results"/} $([ "$st" = 0 ] && echo ok || echo FAILED)" >&2
	unset "running[$pid]"
}
for i in $(seq 1 "$n"); do
	for f in "${ordered[@]}"; do
		[ "$i" -le "${runs_of[$f]}" ] || continue
		while [ "${#running[@]}" -ge "$jobs" ]; do reap; done
		dir="$results/$(basename "$f" .suite)/run-$i"
		mkdir -p "$dir"
		(
			t0=$(date +%s)
			tests/vm/run-suite.sh "$f" "$initramfs" "$kdir" "$dir" >"$dir/run.out" 2>&1
			rc=$?
			echo $(($(date +%s) - t0)) >"$dir/seconds"
			exit $rc
		) &
		running[$!]=$dir
	done
done
while [ "${#running[@]}" -gt 0 ]; do reap; done

json="$results/soak.json"
echo '{"runs_per_suite": '"$n"', "jobs": '"$jobs"', "suites": [' >"$json"
first=1
total_fail=0
printf '%-30s %5s %9s  %s\n' suite runs failures "failed runs (seeds, log)" >"$results/table.txt"
for f in "${files[@]}"; do
	name=$(basename "$f" .suite)
	fails=0
	failed=()
	secs=0
	k=${runs_of[$f]}
	for i in $(seq 1 "$k"); do
		dir="$results/$name/run-$i"
		secs=$((secs + $(cat "$dir/seconds" 2>/dev/null || echo 0)))
		log="$dir/$name/console.log"
		seeds=$(grep -o 'seed=[0-9]*' "$log" 2>/dev/null | sort -u | tr '\n' ' ')
		if [ "$(cat "$dir/rc" 2>/dev/null)" != 0 ]; then
			fails=$((fails + 1))
			failed+=("run $i: ${seeds:-no seed printed}log $log")
			echo "soak: $name run $i/$k FAILED (${seeds:-no seed}) log: $log" >&2
			grep -E '^\s+(FAIL|log line)|  SKIP  |skipped \(SKIP above\)' "$dir/run.out" | head -n 5 >&2
		else
			rm -f "$log"	# keep only the logs of failed runs
		fi
	done
	total_fail=$((total_fail + fails))
	printf '%-30s %5s %9s  %s\n' "$name" "$k" "$fails" "${failed[*]:-}" >>"$results/table.txt"
	[ $first = 1 ] || echo ',' >>"$json"
	first=0
	python3 - "$name" "$k" "$fails" "$secs" "${failed[@]}" >>"$json" <<'EOP'
import json, sys
name, runs, fails, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(json.dumps({"suite": name, "runs": runs, "failures": fails, "boot_seconds": secs,
                  "failed_runs": sys.argv[5:]}), end="")
EOP
done
echo ']}' >>"$json"
echo "==> soak: ${#files[@]} suites x $n runs (fewer where soak.list says runs=) in $(( $(date +%s) - start ))s (results/soak.json)" >&2
cat "$results/table.txt"
runs=0
for f in "${files[@]}"; do runs=$((runs + runs_of[$f])); done
echo "$((runs - total_fail)) passed, $total_fail failed"
[ "$total_fail" = 0 ]
