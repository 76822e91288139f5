#!/usr/bin/env bash
# `make demo`: build everything, boot the test VM, load the simulated
# PeerDirect core + NVIDIA provider and nvidia_peermem_rs, run the tool's
# doctor and a validated transfer, and show what happened.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
results="${RESULTS:-$repo/results}"
mkdir -p "$results"
kdir=$(tests/build-all.sh) || { echo "error: build failed" >&2; exit 1; }
tests/run-vm-suites.sh "$kdir" "$results" tests/vm/check/demo.suite
rc=$?
echo "==== what the VM printed (from $results/demo/console.log)"
sed -n '/PEERMEM-SCENARIO-BEGIN demo/,/PEERMEM-SCENARIO-END demo/p' "$results/demo/console.log" |
	grep -v -E '^\[ *[0-9.]+\] (kmemleak|random|clocksource)'
if [ $rc -eq 0 ]; then
	echo "==== DEMO PASSED: the module loaded and a GPUDirect transfer was validated end to end"
else
	echo "==== DEMO FAILED (see above and $results/demo/)"
fi
exit $rc
