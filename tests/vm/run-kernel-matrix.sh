#!/usr/bin/env bash
# Boot suites on a kernel of the matrix other than the primary one, with the
# modules tests/build-all.sh built for it (PEERMEM_KERNEL=<id>):
#   run-kernel-matrix.sh <id> KDIR RESULTS_DIR SUITE_NAME...
# A suite's `caught` line that names a detector the kernel lacks (KASAN on
# a GCC-built Rust kernel: init/Kconfig allows no KASAN there) drops that
# tooth, with its scenario line, from the suite the guest and the verdict
# read, and so do runs of NVIDIA's module (built for the primary kernel
# only); the log says which. Each verdict's suite is renamed
# "<suite> [kernel <id>]" for the summary. Output lines start
# "[kernel <id>] ". Exit 0 only if every suite is green.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo" || exit 2
k=$1
kdir=$2
kres=$3
shift 3
mkdir -p "$kres/suites"
ksuites=()
for s in "$@"; do
	kasan=0
	grep -q '^CONFIG_KASAN=y' "$kdir/.config" && kasan=1
	# NVIDIA's own module (client=nvNNN) is built for the primary kernel
	# only (tests/nvidia/build-nvidia-peermem.sh): its lines go, with
	# their caught lines
	awk -v kasan=$kasan '
		/^scenario / { if (held != "") print held; held = $0; skip = 0
			if ($0 ~ / client=nv[0-9]/) { nv++; held = ""; skip = 1 }
			next }
		/^caught / && skip { next }
		/^caught .*KASAN:/ && !kasan { dropped++; held = ""; next }
		{ if (held != "") { print held; held = "" } print }
		END { if (held != "") print held
			if (dropped) printf "%d KASAN-only teeth dropped ", dropped > "/dev/stderr"
			if (nv) printf "%d runs of NVIDIA'"'"'s module dropped (built for the primary kernel only)", nv > "/dev/stderr" }' \
		"tests/vm/suites/$s.suite" >"$kres/suites/$s.suite" 2>"$kres/suites/$s.dropped"
	[ ! -s "$kres/suites/$s.dropped" ] ||
		echo "[kernel $k] $s: $(cat "$kres/suites/$s.dropped")"
	ksuites+=("$kres/suites/$s.suite")
done
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
