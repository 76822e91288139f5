#!/usr/bin/env bash
# `make demo`: build everything, boot the test VM, load the simulated
# PeerDirect core (without /sys/kernel/mm/memory_peers, as on DOCA-OFED
# 23.10+ with Linux 6.6+) and NVIDIA provider, load what the default
# install installs (the drop-in: module nvidia_peermem) by `modprobe
# nvidia-peermem`, run the tool's doctor and a validated transfer, and show
# what happened (tests/scenarios/demo.sh).
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
	echo "==== DEMO PASSED: the default install (module nvidia_peermem) loaded on a PeerDirect core without /sys/kernel/mm/memory_peers, NCCL (>= 2.23.4) and UCX (>= 1.18.0) find it, and a GPUDirect transfer was validated end to end"
else
	echo "==== DEMO FAILED (see above and $results/demo/)"
fi
exit $rc
