#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# cudaFree racing deregistration, with the fixtures' delay points widening
# each window in turn: the free callback before/after it runs, the core's
# invalidate before the mapping lock, the deregistration under it. Every
# round must finish (no deadlock, no hung task), leave nothing pinned or
# mapped, and the verdict sees no KASAN/lockdep report.
#   module_race generation=G peerdirect_support=N [rounds=N] [rm_lockdep=1]
# rm_lockdep=1: the provider's driver lock is visible to lockdep (module-
# lockinv, where the report is expected; see lib.sh PSIM_RM_LOCKDEP).
. /scenarios/lib.sh
rounds=24
_args=
for _a in "$@"; do
	case "$_a" in
	rounds=[0-9]*) rounds=${_a#*=} ;;
	rm_lockdep=1) PSIM_RM_LOCKDEP=1 ;;
	*) _args="$_args $_a" ;;
	esac
done
# shellcheck disable=SC2086
set -- persistent_api_support=0 $_args
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
# First one deregistration of a live MR, then one cudaFree of a live MR, one
# after the other: each path's lock order happens at least once, whoever
# wins the racing rounds below (on mofed51 lockdep must see both).
sim gpu-alloc 256K
va=$(kv va "$out")
sim mr-reg $((va + 512)) 150000
sim mr-dereg "$(kv mr "$out")"
sim mr-reg $((va + 512)) 150000
mr=$(kv mr "$out")
sim gpu-free "$va"
sim mr-dereg "$mr"
no_leaks "the sequential pair"
points="free_cb_before free_cb_after core_invalidate core_dereg_locked"
i=0
invalidated=0
while [ $i -lt "$rounds" ]; do
	n=0
	for p in $points; do
		n=$((n + 1))
		[ $((i % 4 + 1)) = $n ] && point=$p
	done
	ms=$((i / 4 % 3 * 3 + 1))
	sim gpu-alloc 256K
	va=$(kv va "$out")
	sim mr-reg $((va + 512)) 150000
	mr=$(kv mr "$out")
	sim delay "$point" $ms 1
	simtest gpu-free "$va" >/tmp/race.free 2>&1 &
	free_pid=$!
	[ $((i % 2)) = 0 ] && usleep $((ms * 700))
	simtest mr-dereg "$mr" >/tmp/race.dereg 2>&1 || fail "round $i ($point): dereg failed: $(cat /tmp/race.dereg)"
	wait $free_pid || fail "round $i ($point): gpu-free failed: $(cat /tmp/race.free)"
	sim delay clear
	no_leaks "round $i ($point ${ms}ms)"
	i=$((i + 1))
done
invalidated=$(pm_stat invalidations)
core_inv=$(pm_stat core_invalidations)
skipped=$(pm_stat skipped_after_invalidation)
finish_clean
pass rounds="$rounds" invalidations="$invalidated" core_invalidations="$core_inv" skipped_unmaps="$skipped"
