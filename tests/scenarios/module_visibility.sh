#!/bin/sh
# shellcheck disable=SC1091 # lib.sh, at /scenarios in the VM
# Whether NCCL and UCX will use GPUDirect RDMA with this module, decided as
# they decide it: NCCL's IB transport and UCX's IB memory domain only test
# whether one of a few files exists (lists below). For each build (named:
# module nvidia_peermem_rs; drop-in: module nvidia_peermem) on a core with
# /sys/kernel/mm/memory_peers (memory_peers=1: MLNX_OFED up to 23.07, or a
# kernel that exports mm_kobj) and without (0: DOCA-OFED 23.10+ on Linux
# 6.6+, the project's own kernels): load it, test the files, and check that
# peermem-check doctor says the same. The named build is seen only through
# the tree; the drop-in everywhere. default= names the build the packages
# install by default (packaging/packaging.mk, PEERMEM_DROPIN), which must
# be seen on both cores; validate's summary says so too.
#   module_visibility default=dropin|named
. /scenarios/lib.sh

default=
for _a in "$@"; do
	case "$_a" in
	default=dropin | default=named) default=${_a#*=} ;;
	*) fail "unknown scenario argument $_a" ;;
	esac
done
[ -n "$default" ] || fail "say which build is the default install: default=dropin|named"

for _m in peermem_sim nvidia_peermem_rs nvidia_peermem peermem_refclient peerdirect_sim nvidia_p2p_sim nvidia_p2p_sim_r525; do
	[ -d /sys/module/$_m ] && rmmod $_m 2>/dev/null
done

NCCL_FILES="/sys/kernel/mm/memory_peers/nv_mem/version
/sys/kernel/mm/memory_peers/nv_mem_nc/version
/sys/module/nvidia_peermem/version"
UCX_FILES="/sys/kernel/mm/memory_peers/nv_mem/version
/sys/module/nvidia_peermem/version
/sys/module/nv_peer_mem/version"

# first_present FILES: the first of FILES that exists, as the libraries
# test them; nothing if none does.
first_present() {
	for _f in $1; do
		if [ -e "$_f" ]; then
			echo "$_f"
			return
		fi
	done
}

rel=$(uname -r)
dropin=/lib/modules/$rel/updates/dkms/nvidia-peermem.ko
[ -f "$dropin" ] || fail "the drop-in nvidia-peermem.ko is not staged ($dropin)"

seen=
for tree in 1 0; do
	for build in named dropin; do
		# shellcheck disable=SC2034 # read by lib.sh's load_sim_stack
		PD_MEMORY_PEERS=$tree
		load_sim_stack generation=modern
		case $build in
		named)
			load nvidia_peermem_rs persistent_api_support=1
			mod=nvidia_peermem_rs
			;;
		dropin)
			insmod "$dropin" persistent_api_support=1 || fail "insmod of the drop-in failed"
			mod=nvidia_peermem
			;;
		esac
		nccl=$(first_present "$NCCL_FILES")
		ucx=$(first_present "$UCX_FILES")
		log "memory_peers=$tree $build ($mod): NCCL ${nccl:-does not see it}, UCX ${ucx:-does not see it}"
		if [ "$build" = named ] && [ "$tree" = 0 ]; then
			[ -z "$nccl$ucx" ] || fail "the named build is seen without the tree? NCCL '$nccl' UCX '$ucx'"
			want="[FAIL] NCCL / UCX will use GPUDirect RDMA: no: nvidia_peermem_rs is loaded, but this PeerDirect core has no /sys/kernel/mm/memory_peers"
		else
			[ -n "$nccl" ] || fail "NCCL does not see $build with memory_peers=$tree"
			[ -n "$ucx" ] || fail "UCX does not see $build with memory_peers=$tree"
			[ "$nccl" = "$ucx" ] || fail "NCCL sees $nccl, UCX $ucx: doctor's line expects one file"
			want="[PASS] NCCL / UCX will use GPUDirect RDMA: yes (via $nccl)"
		fi
		doc=$(peermem-check doctor 2>&1)
		echo "$doc" | grep -qF "$want" ||
			fail "doctor, memory_peers=$tree $build: want '$want', got '$(echo "$doc" | grep 'NCCL / UCX')'"
		if [ "$build" = "$default" ] && [ "$tree" = 0 ]; then
			out=$(peermem-check validate --backend sim --size 1M --iterations 1 2>&1) ||
				fail "validate through $build failed: $out"
			echo "$out" | grep -qF "$want" ||
				fail "validate's summary lacks '$want': $(echo "$out" | tail -n 5)"
		fi
		[ "$build" != "$default" ] || [ -n "$nccl" ] ||
			fail "the default install ($default: module $mod) is invisible to NCCL and UCX on a core without /sys/kernel/mm/memory_peers (DOCA-OFED 23.10+ on Linux 6.6+)"
		[ -z "$nccl" ] || seen=${seen:+$seen,}$build/tree=$tree
		rmmod "$mod" || fail "rmmod $mod failed"
		unload_sim_stack
	done
done
no_new_leaks
pass default="$default" seen="$seen" leaks="$LEAKS"
