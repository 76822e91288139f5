#!/usr/bin/env bash
# The suites as the kernel in KDIR can run them:
#   cut-for-kernel.sh KDIR OUT_DIR SUITE_FILE...
# writes each suite to OUT_DIR under its own name and prints the paths
# written, one a line; stderr says what was cut. On a kernel without KASAN
# (its .config; GCC-built with Rust: init/Kconfig allows none) the lines
# whose only detector is KASAN (a tooth naming a KASAN report, a run marked
# `needs kasan`), and on a kernel other than the primary one
# (PEERMEM_KERNEL) the runs of NVIDIA's module, built for the primary
# kernel only, and the checks of the simulator with the C reference client
# (the same C on every kernel, proven once there) do not run: each becomes a `cut` line that the verdict
# counts as a skipped test with its reason (`vm-verdict cut-suite`,
# tests/verdict/src/cut.rs). The decision is the kernel's .config and
# whether it is the primary one, never its name. On the primary kernel the
# suites come out unchanged. A suite may be cut in place
# (OUT_DIR its own folder). make vm-test, make soak, the matrix of make
# test and the real-core runs all boot their suites through this. A kernel
# tree without a .config is an error, not a kernel without KASAN: the
# primary kernel's teeth must never go quietly.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: cut-for-kernel.sh KDIR OUT_DIR SUITE_FILE..." >&2; exit 2; }
kdir=$1
out=$2
shift 2
primary=$(awk '!/^#/ && NF { print $1; exit }' "$repo/tests/kernel/kernels")
[ -f "$kdir/.config" ] || { echo "cut-for-kernel: $kdir has no .config: cannot tell whether the kernel has KASAN" >&2; exit 2; }
args=()
grep -q '^CONFIG_KASAN=y' "$kdir/.config" || args+=(--no-kasan)
[ "${PEERMEM_KERNEL:-$primary}" = "$primary" ] || args+=(--no-nvidia --not-primary)
mkdir -p "$out"
for f in "$@"; do
	n=$(basename "$f")
	"${PEERMEM_VM_VERDICT:-$repo/target/release/vm-verdict}" cut-suite --suite "$f" --out "$out/.$n.cut" "${args[@]}"
	mv "$out/.$n.cut" "$out/$n"
	echo "$out/$n"
done
