#!/usr/bin/env bash
# Boot suites on a kernel of the matrix other than the primary one, with the
# modules tests/build-all.sh built for it (PEERMEM_KERNEL=<id>):
#   run-kernel-matrix.sh <id> KDIR RESULTS_DIR SUITE_NAME...
# The suites the guest and the verdict read are cut for the kernel
# (tests/vm/cut-for-kernel.sh: on a kernel without KASAN no line only KASAN
# can judge, and no run of NVIDIA's module): each line cut is a skipped
# test named with why, and the log says what was cut. Each
# verdict's suite is renamed "<suite> [kernel <id>]" for the summary.
# Output lines start "[kernel <id>] ". Exit 0 only if every suite is
# green.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo" || exit 2
k=$1
kdir=$2
kres=$3
shift 3
# The suites as this kernel can run them (tests/vm/cut-for-kernel.sh).
mkdir -p "$kres/suites"
paths=()
# A suite of every kernel (tests/vm/suites/) or of some kernels of the
# matrix only (tests/vm/matrix/).
for s in "$@"; do
	if [ -f "tests/vm/suites/$s.suite" ]; then paths+=("tests/vm/suites/$s.suite"); else paths+=("tests/vm/matrix/$s.suite"); fi
done
mapfile -t ksuites < <(PEERMEM_KERNEL=$k tests/vm/cut-for-kernel.sh "$kdir" "$kres/suites" "${paths[@]}" \
	2> >(sed -u "s/^/[kernel $k] /" >&2))
[ "${#ksuites[@]}" = $# ] || { echo "[kernel $k] the suites could not be cut for this kernel" >&2; exit 2; }
PEERMEM_KERNEL=$k PEERMEM_VM_SUITES="$kres/suites" \
	tests/vm/mkinitramfs.sh "$kres/initramfs.cpio" "$kdir" || exit 2
# Its own suite-time history (the primary kernel's orders the primary run).
PEERMEM_SUITE_HISTORY="${XDG_CACHE_HOME:-$HOME/.cache}/nvidia-peermem-rs/suite-seconds-$k.txt" \
	PEERMEM_KERNEL=$k PEERMEM_INITRAMFS_READY=1 tests/run-vm-suites.sh "$kdir" "$kres" "${ksuites[@]}" 2>&1 |
	tee "$kres/vm-suites.out" | sed -u "s/^/[kernel $k] /"
rc=${PIPESTATUS[0]}
for s in "$@"; do
	[ -f "$kres/$s/verdict.json" ] || continue
	python3 - "$kres/$s/verdict.json" "$k" <<'EOP'
import json, sys
path, kernel = sys.argv[1], sys.argv[2]
v = json.load(open(path))
if not v["suite"].endswith("]"):
    v["suite"] = f'{v["suite"]} [kernel {kernel}]'
json.dump(v, open(path, "w"))
EOP
done
exit "$rc"
