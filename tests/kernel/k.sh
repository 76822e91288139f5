#!/usr/bin/env bash
# K, the test bed's unit of time: the wall seconds this machine needs to
# build the primary (6.12) test kernel, -j$(nproc), from its configured
# tree. Budgets (docs/test-bed.md) and the limits that decide a verdict
# are stated in K, so a machine half as fast gets twice the time instead
# of a red run.
#   k.sh                  prints "SECONDS HOW WHEN": K of this machine
#   k.sh record SECONDS   keeps SECONDS as this machine's measured K
#   k.sh record-first SECONDS  the same, unless a measured K of this
#                         machine is kept already
#   k.sh scale            prints the factor (a decimal, at least 1) by
#                         which the limits tuned on the reference machine
#                         (K_REF seconds) grow on this one
#   k.sh proxy            times the proxy alone and prints its K
# HOW: "measured" (build-kernel.sh timed the build on this machine) or
# "proxy" (no build was timed here: a few objects of the cached tree are
# compiled again, one at a time, and their time scaled by PROXY_RATIO,
# the ratio of the whole build to the proxy measured on one machine; see
# docs/test-bed.md, "K").
# The record is kept per machine kind (CPU model, cores, memory): a cache
# carried to another machine does not carry its K along.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# K is the primary kernel's, whichever kernel the caller builds.
unset PEERMEM_KERNEL
# shellcheck source=toolchain.sh
. "$here/toolchain.sh"

# The reference: the machine the limits of the suites were tuned on
# (docs/test-bed.md: its 6.12 test kernel in 10m20s).
K_REF=620
# Whole build / proxy, both on the same machine (docs/test-bed.md, "K").
PROXY_RATIO=${PEERMEM_K_PROXY_RATIO:-59}
# The proxy's objects: large, lock- and memory-heavy files, compiled with
# the tree's own command lines (KASAN, lockdep and all).
PROXY_OBJECTS=(kernel/fork.o kernel/sched/core.o mm/memory.o mm/slub.o
	kernel/locking/lockdep.o fs/namei.o)

record=$PEERMEM_CACHE/k.txt
machine_id() {
	local model mem
	model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null | tr -s ' ' '_')
	mem=$(awk '/^MemTotal/ { printf "%d", $2 / 1048576 }' /proc/meminfo)
	echo "${model:-unknown}/$(nproc)cpu/${mem}GiB"
}

die() {
	echo "k.sh: error: $*" >&2
	exit 1
}

# proxy_seconds: the proxy's wall time, in hundredths of a second.
proxy_centis() {
	local tree obj cmd tmp t0 t1
	tree=$(PEERMEM_KERNEL=$PEERMEM_PRIMARY_KERNEL "$here/build-kernel.sh" 2>/dev/null) ||
		die "no primary test kernel to time the proxy on (make test-kernel)"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	t0=$(date +%s%N)
	for obj in "${PROXY_OBJECTS[@]}"; do
		local d=${obj%/*} f=${obj##*/}
		cmd=$(sed -n "s/^savedcmd_$(printf '%s' "$obj" | sed 's/[/.]/\\&/g') := //p" "$tree/$d/.$f.cmd")
		[ -n "$cmd" ] || die "$tree/$d/.$f.cmd has no command for $obj"
		# The same compiler command, its object and dependency file in tmp.
		cmd=${cmd//" -o $obj "/" -o $tmp/${f} "}
		cmd=${cmd//"-Wp,-MMD,$d/.$f.d"/"-Wp,-MMD,$tmp/.$f.d"}
		(cd "$tree" && eval "$cmd") >/dev/null 2>&1 || die "the proxy's compile of $obj failed"
	done
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 10000000))
}

k_now() {
	local secs how when id
	id=$(machine_id)
	if [ -f "$record" ] && read -r secs how when rid <"$record" && [ "$rid" = "$id" ]; then
		echo "$secs $how $when"
		return
	fi
	secs=$(($(proxy_centis) * PROXY_RATIO / 100))
	[ "$secs" -gt 0 ] || die "the proxy took no time"
	when=$(date -u +%Y-%m-%dT%H:%MZ)
	mkdir -p "$PEERMEM_CACHE"
	echo "$secs proxy $when $id" >"$record"
	echo "$secs proxy $when"
}

case ${1:-} in
"") k_now ;;
record)
	if ! [[ ${2:-} =~ ^[1-9][0-9]*$ ]]; then
		die "usage: k.sh record SECONDS (a whole number above 0)"
	fi
	mkdir -p "$PEERMEM_CACHE"
	echo "$2 measured $(date -u +%Y-%m-%dT%H:%MZ) $(machine_id)" >"$record"
	;;
record-first)
	if [ -f "$record" ] && read -r _ how _ rid <"$record" && [ "$how" = measured ] && [ "$rid" = "$(machine_id)" ]; then
		exit 0
	fi
	"$0" record "${2:-}"
	;;
scale)
	read -r secs _ < <(k_now)
	awk -v k="$secs" -v r="$K_REF" 'BEGIN { s = k / r; if (s < 1) s = 1; printf "%.2f\n", s }'
	;;
proxy)
	c=$(proxy_centis)
	echo "proxy: $((c / 100)).$(printf '%02d' $((c % 100))) s -> K $((c * PROXY_RATIO / 100)) s (ratio $PROXY_RATIO)"
	;;
*) die "usage: k.sh [record SECONDS | record-first SECONDS | scale | proxy]" ;;
esac
