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

# suite file, the test that must fail, a word describing the plant
plants=(
	"selftest-warn vm:selftest-warn:splats WARN"
	"selftest-kunit kunit:harness_selftest:harness_selftest_fails failing-KUnit-case"
	"selftest-timeout vm:selftest-timeout:completed timeout"
	"selftest-leak vm:selftest-leak:splats kmemleak"
)
# The boots run PEERMEM_VM_JOBS (default 2) at a time; judged in order.
jobs=${PEERMEM_VM_JOBS:-2}
for plant in "${plants[@]}"; do
	read -r suite _ <<<"$plant"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	(
		"$repo/tests/vm/run-suite.sh" "$repo/tests/vm/selftest/$suite.suite" "$initramfs" \
			"$kdir" "$results" >"$results/$suite.out" 2>&1
		echo $? >"$results/$suite.rc"
	) &
done
wait
tests=()
rc=0
for plant in "${plants[@]}"; do
	read -r suite must_fail what <<<"$plant"
	suite_rc=$(cat "$results/$suite.rc" 2>/dev/null || echo 2)
	ok=false
	reason="suite exited $suite_rc"
	if [ "$suite_rc" -eq 1 ] && [ -f "$results/$suite/verdict.json" ] &&
		python3 - "$results/$suite/verdict.json" "$must_fail" <<'EOP'
import json, sys
v = json.load(open(sys.argv[1]))
sys.exit(0 if any(t["name"] == sys.argv[2] and not t["passed"] for t in v["tests"]) else 1)
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
