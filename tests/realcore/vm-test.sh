#!/usr/bin/env bash
# Boot suites against MLNX_OFED's real PeerDirect core instead of the
# simulated one (make vm-test SUITE=<name> PEERMEM_OFED_SRC=<tree>).
#   vm-test.sh KDIR RESULTS_DIR SUITE_FILE...
# PEERMEM_OFED_SRC names the mlnx-ofa_kernel source tree. The core is built
# (build-real-core.sh) into build/realcore/, packed into the initramfs as
# peerdirect_sim.ko in place of the simulator, and each suite boots with
# the scenario lines of other core generations left out (a real core is
# one generation; generation= words name the simulator's, and a line
# without one runs the default, modern), together
# with the "caught" line that belongs to a line left out, and then cut for
# the kernel as every boot is (tests/vm/cut-for-kernel.sh: no KASAN-only
# teeth without KASAN, NVIDIA's module on the primary kernel only). The
# suites so cut are under RESULTS_DIR/realcore-suites/ for the record.
# PEERMEM_REALCORE_SKIP=REGEX (grep -E) leaves out the scenario lines it
# matches too (e.g. a scenario that oopses the real core, which would end
# the boot there), said in the output.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
die() { echo "realcore vm-test: $*" >&2; exit 2; }
[ $# -ge 3 ] || die "usage: vm-test.sh KDIR RESULTS_DIR SUITE_FILE..."
[ -n "${PEERMEM_OFED_SRC:-}" ] || die "PEERMEM_OFED_SRC is not set (the MLNX_OFED source tree to take peer_mem.c from)"
kdir=$1
results=$2
shift 2
out=$repo/build/realcore/$(printf '%s' "$(cd "$PEERMEM_OFED_SRC" 2>/dev/null && pwd || echo "$PEERMEM_OFED_SRC")" | md5sum | cut -c1-12)
ko=$("$repo/tests/realcore/build-real-core.sh" "$kdir" "$PEERMEM_OFED_SRC" "$out") || exit 2
# shellcheck source=/dev/null
. "$out/core.env"

cut_dir=$results/realcore-suites
mkdir -p "$cut_dir"
suites=()
for f in "$@"; do
	n=$(basename "$f")
	also=
	# the 5.4-3 .. 24.10 core runs the modern lines too (its glue answers
	# to generation=modern)
	[ "$RC_GENERATION" = modern2410 ] && also=modern
	awk -v gen="$RC_GENERATION" -v also="$also" -v skip="${PEERMEM_REALCORE_SKIP:-}" '
		# a line without generation= runs the default, modern
		function other(line,   w, i, n, v) {
			n = split(line, w, /[ \t]+/)
			v = "modern"
			for (i = 1; i <= n; i++)
				if (w[i] ~ /^generation=/) {
					v = w[i]; sub(/^[a-z]+=/, "", v)
				}
			return v != gen && v != also
		}
		/^scenario[ \t]/ {
			dropped = other($0) || (skip != "" && $0 ~ skip)
			if (dropped) next
			print
			next
		}
		/^(caught|needs)[ \t]/ { if (dropped) next; print; next }
		# the MR mapping lock, named as the real core names it
		/^expect_splat[ \t]/ { gsub(/&mr->mapping_lock/, "\\&umem_p->mapping_lock"); print; next }
		{ print }
	' "$f" >"$cut_dir/$n"
	echo "realcore vm-test: $n: $(grep -c '^scenario' "$f") scenario lines, $(grep -c '^scenario' "$cut_dir/$n") for generation $RC_GENERATION (MLNX_OFED $RC_RELEASE's core)${PEERMEM_REALCORE_SKIP:+, without those matching $PEERMEM_REALCORE_SKIP}" >&2
	suites+=("$cut_dir/$n")
done
# and as this kernel can run them (tests/vm/cut-for-kernel.sh)
mapfile -t suites < <("$repo/tests/vm/cut-for-kernel.sh" "$kdir" "$cut_dir" "${suites[@]}")
[ "${#suites[@]}" = $# ] || die "the suites could not be cut for this kernel"
export PEERMEM_REAL_CORE_KO=$ko
export PEERMEM_VM_SUITES=$cut_dir
exec "$repo/tests/run-vm-suites.sh" "$kdir" "$results" "${suites[@]}"
