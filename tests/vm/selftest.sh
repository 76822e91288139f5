#!/usr/bin/env bash
# The harness proves it can fail: each planted failure must make its suite
# red, for the right reason. Writes RESULTS_DIR/harness-selftest.json in the
# verdict format, with one test per planted failure.
#   selftest.sh KDIR RESULTS_DIR
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
kdir=$1
results=$2/selftest
mkdir -p "$results"
initramfs="$2/initramfs.cpio"
[ -f "$initramfs" ] || "$repo/tests/vm/mkinitramfs.sh" "$initramfs" "$kdir" || exit 2

# suite file, the test that must fail, a word describing the plant, and
# the kind of splat its evidence must name (- for none): the three plants
# of selftest-plants share one boot, so each is told by its own test or
# evidence line, not by the boot's colour alone.
plants=(
	"selftest-plants vm:selftest-plants:splats WARN warning"
	"selftest-plants kunit:harness_selftest:harness_selftest_fails failing-KUnit-case -"
	"selftest-plants vm:selftest-plants:splats kmemleak kmemleak"
	"selftest-timeout vm:selftest-timeout:completed timeout -"
)
# The boots run PEERMEM_VM_JOBS (default 2) at a time, in make test's pool
# of QEMUs where it has one (PEERMEM_VM_SLOTS); judged in order.
jobs=${PEERMEM_VM_JOBS:-2}
booted=" "
for plant in "${plants[@]}"; do
	read -r suite _ <<<"$plant"
	[[ $booted != *" $suite "* ]] || continue
	booted="$booted$suite "
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	(
		"$repo/tests/vm/pool-slot.sh" 120 "selftest/$suite" \
			"$repo/tests/vm/run-suite.sh" "$repo/tests/vm/selftest/$suite.suite" "$initramfs" \
			"$kdir" "$results" >"$results/$suite.out" 2>&1
		echo $? >"$results/$suite.rc"
	) &
done
wait
tests=()
rc=0
for plant in "${plants[@]}"; do
	read -r suite must_fail what kind <<<"$plant"
	suite_rc=$(cat "$results/$suite.rc" 2>/dev/null || echo 2)
	ok=false
	reason="suite exited $suite_rc"
	if [ "$suite_rc" -eq 1 ] && [ -f "$results/$suite/verdict.json" ] &&
		python3 - "$results/$suite/verdict.json" "$must_fail" "$kind" <<'EOP'
import json, sys
v = json.load(open(sys.argv[1]))
name, kind = sys.argv[2], sys.argv[3]
failed = [t for t in v["tests"] if t["name"] == name and not t["passed"]]
if kind != "-":
    failed = [t for t in failed if any(f"[{kind}]" in e for e in t["evidence"])]
sys.exit(0 if failed else 1)
EOP
	then
		ok=true
		reason=""
	elif [ "$suite_rc" -eq 0 ]; then
		reason="the planted $what went unnoticed: the suite came out green"
	fi
	echo "harness self-test: planted $what -> $([ $ok = true ] && echo detected || echo "NOT DETECTED ($reason)")" >&2
	[ $ok = true ] || rc=1
	tests+=("{\"name\":\"harness:detects-$what\",\"passed\":$ok,\"reason\":\"$reason\",\"figures\":{},\"evidence\":[]}")
done
(IFS=,; echo "{\"suite\":\"harness-selftest\",\"tests\":[${tests[*]}]}") >"$2/harness-selftest.json"
exit $rc
