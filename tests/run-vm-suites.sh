#!/usr/bin/env bash
# Run VM suites against an already built tree.
#   run-vm-suites.sh KDIR RESULTS_DIR SUITE_FILE...
# Exit 0 only if every suite is green.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
kdir=$1
results=$2
shift 2
mkdir -p "$results"
initramfs="$results/initramfs.cpio.gz"
"$repo/tests/vm/mkinitramfs.sh" "$initramfs" "$kdir" || exit 2
rc=0
for suite in "$@"; do
	"$repo/tests/vm/run-suite.sh" "$suite" "$initramfs" "$kdir" "$results" || rc=1
done
exit $rc
