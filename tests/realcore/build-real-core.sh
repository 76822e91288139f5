#!/usr/bin/env bash
# MLNX_OFED's real PeerDirect core, built as the test bed's peerdirect_sim.ko
# from an MLNX_OFED / DOCA-OFED source tree the developer names (nothing of
# MOFED's is in this repository; CI never runs this).
#
#   build-real-core.sh KDIR OFED_TREE OUTDIR
#     KDIR       the kernel tree to build against
#     OFED_TREE  the top of an mlnx-ofa_kernel source tree (the one with
#                drivers/infiniband/core/peer_mem.c), e.g. a release
#                snapshot of github.com/knneth/mlnx-ofa_kernel
#     OUTDIR     the build tree (made here; holds MOFED's files)
# Prints the module's path on stdout, and writes OUTDIR/core.env
# (RC_GENERATION=..., RC_RELEASE=...).
#
# peer_mem.c, ib_peer_mem.h and include/rdma/peer_mem.h (for the legacy
# 4.9/5.0 core also umem.c, where its MR path lives) are copied
# byte-for-byte (compared after the copy) and compiled as they are; the
# only flags are the include order (our private rdma/ib_umem.h first), two
# -D renames of the exported registration calls, which the glue wraps
# (tests/fixtures/realcore/), and for a core whose sysfs tree hangs under
# mm_kobj (MLNX_OFED up to 23.07), a rename of mm_kobj to the glue's
# stand-in: the kernels from 6.6 on do not export it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() { echo "build-real-core: $*" >&2; exit 1; }
[ $# -eq 3 ] || die "usage: build-real-core.sh KDIR OFED_TREE OUTDIR"
kdir=$1
tree=$2
out=$3
# shellcheck source=../kernel/toolchain.sh
. "$repo/tests/kernel/toolchain.sh"

[ -d "$tree" ] || die "PEERMEM_OFED_SRC=$tree: no such directory"
tree="$(cd "$tree" && pwd)"
core=$tree/drivers/infiniband/core/peer_mem.c
[ -f "$core" ] || die "PEERMEM_OFED_SRC=$tree: no drivers/infiniband/core/peer_mem.c there (give the top of an MLNX_OFED / DOCA-OFED mlnx-ofa_kernel source tree)"

# Which core it is, from what the file contains (see docs/real-core.md).
if grep -q 'ib_get_peer_private_data' "$core"; then
	gen=legacy
elif grep -q 'ib_umem_stop_invalidation_notifier' "$core"; then
	gen=modern
	# 5.4-3 .. 24.10: the stop notifier locks in the branch for an MR
	# whose caller still holds the lock (fixed in 25.04)
	if grep -q 'else if (umem_p->xa_id != PEER_NO_INVALIDATION_ID)' "$core"; then
		gen=modern2410
	fi
elif grep -q 'ib_peer_umem_get' "$core"; then
	gen=mofed51
else
	die "$core: not a PeerDirect core this script knows (no ib_peer_umem_get, no ib_get_peer_private_data)"
fi
# What the glue and the private ib_umem need to know of the file.
flags=()
grep -q 'sgt_append' "$core" && flags+=(-DRC_UMEM_SGT_APPEND)
grep -q 'ib_umem_stop_invalidation_notifier' "$core" && flags+=(-DRC_HAS_STOP)
grep -q 'fix_peer_sgls' "$core" && flags+=(-DRC_TRIMS)
core_flags=()
if grep -qw 'mm_kobj' "$core"; then
	flags+=(-DRC_MM_KOBJ)
	core_flags+=(-Dmm_kobj=rc_mm_kobj)
fi
# The package release the spec names (OFED.25.10.1.7.1.1 -> 25.10.1.7.1.1),
# else its version; PEERMEM_OFED_RELEASE overrides both.
release=
if [ -f "$tree/mlnx-ofa_kernel.spec" ]; then
	release=$(sed -n 's/^%{!?_release: %global _release OFED\.\([^}]*\)}.*/\1/p' "$tree/mlnx-ofa_kernel.spec" | head -n 1)
	[ -n "$release" ] ||
		release=$(sed -n 's/^%{!?_version: %global _version \([^}]*\)}.*/\1/p' "$tree/mlnx-ofa_kernel.spec" | head -n 1)
fi
release=${PEERMEM_OFED_RELEASE:-${release:-unknown}}
[ "$release" != unknown ] ||
	echo "build-real-core: $tree has no mlnx-ofa_kernel.spec to name its release: the logs say 'unknown' (PEERMEM_OFED_RELEASE=<release> names it)" >&2
case "$release" in
*[!A-Za-z0-9._-]*) die "release label '$release' has characters other than letters, digits, . _ -" ;;
esac

mkdir -p "$out/mofed-include/rdma"
copy() {
	# cp -p: an unchanged tree rebuilds nothing
	cmp -s "$1" "$2" || cp -p "$1" "$2"
	cmp -s "$1" "$2" || die "$2 differs from $1"
}
copy "$core" "$out/peer_mem.c"
if [ "$gen" = legacy ]; then
	# 4.9/5.0: the MR half of the core is umem.c, the core's header is
	# public (rdma/ib_peer_mem.h), and umem.c's private uverbs.h is ours
	[ -f "$tree/drivers/infiniband/core/umem.c" ] || die "$tree: no drivers/infiniband/core/umem.c"
	copy "$tree/drivers/infiniband/core/umem.c" "$out/umem.c"
	[ -f "$tree/include/rdma/ib_peer_mem.h" ] || die "$tree: no include/rdma/ib_peer_mem.h"
	copy "$tree/include/rdma/ib_peer_mem.h" "$out/ib_peer_mem.h"
	copy "$tree/include/rdma/ib_peer_mem.h" "$out/mofed-include/rdma/ib_peer_mem.h"
	copy "$repo/tests/fixtures/realcore/legacy/uverbs.h" "$out/uverbs.h"
else
	[ -f "$tree/drivers/infiniband/core/ib_peer_mem.h" ] || die "$tree: no drivers/infiniband/core/ib_peer_mem.h"
	copy "$tree/drivers/infiniband/core/ib_peer_mem.h" "$out/ib_peer_mem.h"
fi
[ -f "$tree/include/rdma/peer_mem.h" ] || die "$tree: no include/rdma/peer_mem.h"
copy "$tree/include/rdma/peer_mem.h" "$out/mofed-include/rdma/peer_mem.h"
copy "$repo/tests/fixtures/realcore/Kbuild" "$out/Kbuild"
copy "$repo/tests/fixtures/realcore/rc_glue.c" "$out/rc_glue.c"
copy "$repo/tests/fixtures/realcore/rc_glue.h" "$out/rc_glue.h"
copy "$repo/tests/fixtures/pd_hca.c" "$out/pd_hca.c"

echo "build-real-core: MLNX_OFED $release's peer_mem.c (generation $gen) from $tree" >&2
make -s -C "$kdir" M="$out" "${PEERMEM_KMAKE_ARGS[@]}" RC_REPO="$repo" \
	RC_GENERATION="$gen" RC_RELEASE="$release" RC_FLAGS="${flags[*]}" \
	RC_CORE_FLAGS="${core_flags[*]:-}" -j"$(nproc)" modules >&2 ||
	die "the build against $kdir failed (see above)"
printf 'RC_GENERATION=%s\nRC_RELEASE=%s\n' "$gen" "$release" >"$out/core.env"
echo "$out/peerdirect_sim.ko"
