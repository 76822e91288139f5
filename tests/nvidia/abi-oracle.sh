#!/usr/bin/env bash
# The ABI oracle (issue 33): NVIDIA's own headers, as Debian packages NVIDIA's
# open kernel modules, against the module's. For each version that
# tests/nvidia/fetch-nvidia-src.sh keeps in the cache:
#   nvidia-abi:<version>:headers       tests/nvidia/abi-probe.c compiled
#       against ffi/include and against NVIDIA's nv-p2p.h and peer_mem.h, its
#       lines compared (abi-compare.py): every size, offset, constant and
#       prototype the module relies on; a difference names the field.
#   nvidia-abi:<version>:module-build  (with KDIR) `make modules` with
#       NVIDIA_SRC=<the package's tree>, as a user or dkms builds it (the
#       module and, with PEERMEM_KUNIT=1 on a CONFIG_KUNIT kernel, its KUnit module): ffi/shim.c
#       and the bindings from NVIDIA's nv-p2p.h, the compile-time layout pins
#       of kmod/abi.rs checked against them. The build reads nothing of the tree
#       but nvidia/nv-p2p.h (an unbuilt tree has no Module.symvers), so
#       versions with a byte-identical nv-p2p.h share one build (named in
#       the figures); each build keeps its objects in build/nvidia-abi/ and a
#       warm rerun rebuilds nothing.
#   abi-oracle.sh OUT.json [KDIR]
# Writes the verdict (suite nvidia-abi) to OUT.json, logs beside it
# (nvidia-abi/). Missing NVIDIA sources are a failed test, not a skip.
# PEERMEM_NVIDIA_SRC_ROOT (default: the cache) points at other trees, e.g. a
# copy with a header changed on purpose.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out=$1
kdir=${2:-}
cd "$repo" || exit 1
# shellcheck source=../kernel/toolchain.sh
. tests/kernel/toolchain.sh
logdir="$(dirname "$out")/nvidia-abi"
work=$repo/build/nvidia-abi
mkdir -p "$logdir" "$work"
tests=()

# result NAME PASSED REASON [FIGURES-JSON [EVIDENCE-FILE]]
result() {
	tests+=("$(python3 - "$@" <<'EOP'
import json, sys
name, passed, reason = sys.argv[1:4]
figures = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else {}
evidence = []
if len(sys.argv) > 5:
    evidence = [l.rstrip() for l in open(sys.argv[5], errors="replace")][:12]
print(json.dumps({"name": name, "passed": passed == "true", "reason": reason,
                  "figures": figures, "evidence": evidence}))
EOP
)")
	if [ "$2" = true ]; then
		echo "nvidia-abi: $1 ok" >&2
	else
		echo "nvidia-abi: $1 FAILED: $3" >&2
	fi
}

finish() {
	(IFS=,; echo "{\"suite\":\"nvidia-abi\",\"tests\":[${tests[*]}]}") >"$out"
	exit 0
}

probe() { # INCLUDE-DIR OUT-BINARY
	cc -std=gnu11 -Wall -Werror -nostdinc -I tests/nvidia/abi-stub -I "$1" \
		tests/nvidia/abi-probe.c -o "$2"
}

if ! list=$(tests/nvidia/fetch-nvidia-src.sh --list 2>"$logdir/sources.log"); then
	result nvidia-abi:sources false "$(tail -n 1 "$logdir/sources.log")" "" "$logdir/sources.log"
	finish
fi

if ! probe ffi/include "$work/probe-ours" >"$logdir/probe-ours.log" 2>&1 ||
	! "$work/probe-ours" >"$work/ours.txt"; then
	result nvidia-abi:probe false "abi-probe.c does not build against ffi/include" "" \
		"$logdir/probe-ours.log"
	finish
fi

declare -A built_by_hash=()
while read -r ver dir; do
	# NVIDIA's headers where <nvidia/nv-p2p.h> and <rdma/peer_mem.h> find them.
	inc=$work/$ver/include
	rm -rf "$inc" && mkdir -p "$inc/nvidia" "$inc/rdma"
	cp "$dir/nvidia/nv-p2p.h" "$inc/nvidia/"
	cp "$dir/nvidia-peermem/peer_mem.h" "$inc/rdma/"
	if ! probe "$inc" "$work/$ver/probe" >"$logdir/$ver-probe.log" 2>&1 ||
		! "$work/$ver/probe" >"$work/$ver/facts.txt" 2>>"$logdir/$ver-probe.log"; then
		result "nvidia-abi:$ver:headers" false \
			"abi-probe.c does not build against NVIDIA $ver's headers (a name the module uses is gone?)" \
			"" "$logdir/$ver-probe.log"
	else
		verdict=$(python3 tests/nvidia/abi-compare.py "$work/ours.txt" "$work/$ver/facts.txt" "$ver" \
			2>"$logdir/$ver-compare.log")
		if echo "$verdict" | grep -q '"passed": true'; then
			echo "nvidia-abi: nvidia-abi:$ver:headers ok" >&2
		else
			echo "nvidia-abi: nvidia-abi:$ver:headers FAILED" >&2
		fi
		sed 's/^/  /' "$logdir/$ver-compare.log" >&2
		tests+=("$verdict")
	fi

	[ -n "$kdir" ] || continue
	hash=$(sha256sum "$dir/nvidia/nv-p2p.h" | cut -c1-16)
	if [ -n "${built_by_hash[$hash]:-}" ]; then
		prev=${built_by_hash[$hash]}
		result "nvidia-abi:$ver:module-build" "$(cat "$work/module-$hash.ok")" \
			"$(cat "$work/module-$hash.reason")" \
			"{\"nv_p2p_h_sha256\":\"$hash\",\"built_as\":\"$prev (same nv-p2p.h)\"}"
		continue
	fi
	built_by_hash[$hash]=$ver
	# A copy of the sources (as lint's clippy build): the tree's own objects
	# stay as tests/build-all.sh made them.
	m=$work/module-$hash
	mkdir -p "$m"
	tar -cf - --exclude='*.o' --exclude='.*.cmd' --exclude='*.mod*' \
		--exclude='*_generated.rs' --exclude='*.o.d' --exclude='*.rmeta' \
		VERSION Kbuild kmod ffi | tar -C "$m" -xf -
	t0=$(date +%s)
	log=$logdir/$ver-module-build.log
	ok=false
	reason=
	if ! make -C "$kdir" M="$m" "${PEERMEM_KMAKE_ARGS[@]}" -j"$(nproc)" NVIDIA_SRC="$dir" PEERMEM_KUNIT=1 \
		modules >"$log" 2>&1; then
		reason="nvidia_peermem_rs does not build with NVIDIA_SRC=$dir (see $log)"
	elif ! grep -q "$dir/nvidia/nv-p2p.h" "$m/ffi/.shim.o.cmd"; then
		reason="ffi/shim.o was not compiled against $dir/nvidia/nv-p2p.h"
	elif pt=$(sed -n 's/^NVIDIA_P2P_PAGE_TABLE_VERSION value=//p' "$work/$ver/facts.txt") &&
		! grep -q "NVIDIA_P2P_PAGE_TABLE_VERSION: u32 = $((pt));" "$m/ffi/bindings_generated.rs"; then
		reason="the bindings were not generated from $dir/nvidia/nv-p2p.h (no NVIDIA_P2P_PAGE_TABLE_VERSION = $pt)"
	else
		ok=true
	fi
	echo "$ok" >"$m.ok"
	echo "$reason" >"$m.reason"
	# The compiler's errors (a failed layout pin names its field).
	grep -E -A4 '^error|error:' "$log" | head -n 12 >"$m.evidence"
	result "nvidia-abi:$ver:module-build" "$ok" "$reason" \
		"{\"nv_p2p_h_sha256\":\"$hash\",\"seconds\":\"$(($(date +%s) - t0))\"}" \
		"$m.evidence"
done <<<"$list"
# Builds of headers no longer fetched (or of a changed copy) go.
[ -z "$kdir" ] || for m in "$work"/module-*/; do
	hash=${m%/}
	hash=${hash##*/module-}
	[ -n "${built_by_hash[$hash]:-}" ] || [ ! -d "$m" ] || rm -rf "$m" "${m%/}".{ok,reason,evidence}
done
finish
