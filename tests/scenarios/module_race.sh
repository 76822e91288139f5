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
kv_set va va "$out"
sim mr-reg $((va + 512)) 150000
sim mr-dereg "$(kv mr "$out")"
sim mr-reg $((va + 512)) 150000
kv_set mr mr "$out"
sim gpu-free "$va"
sim mr-dereg "$mr"
no_leaks "the sequential pair"
points="free_cb_before free_cb_after core_invalidate core_dereg_locked"
# taken_since D0: waits (up to 10 s) until a delay point was entered since
# delays_taken read D0; fails if none was.
taken_since() {
	_t=0
	while simtest_to _dt counters delays_taken; [ "$_dt" = "$1" ]; do
		[ $_t -lt $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ] || return 1
		nap 0.1
		_t=$((_t + 1))
	done
}
# Each round holds one side in its delay point (the cudaFree's callback
# before or after it calls the client, the core's invalidation before the
# mapping lock; or the deregistration under it) and starts the other side
# once it is there. The round's window: the cudaFree and the deregistration
# were in flight together (the core's overlap counter win_free_dereg: the
# one that began second saw the other). A round that missed it (the other
# side started only after the held one ended, a loaded host) tested
# nothing: it runs again, its delay four times as long; four misses in a
# row fail the scenario.
i=0
missed=0
retried=0
invalidated=0
while [ $i -lt "$rounds" ]; do
	n=0
	for p in $points; do
		n=$((n + 1))
		[ $((i % 4 + 1)) = $n ] && point=$p
	done
	ms=$(((i / 4 % 3 * 100 + 100) << (2 * missed)))
	sim gpu-alloc 256K
	kv_set va va "$out"
	sim mr-reg $((va + 512)) 150000
	kv_set mr mr "$out"
	sim counters delays_taken
	d0=$out
	sim counters win_free_dereg
	w0=$out
	sim delay "$point" $ms 1
	if [ "$point" = core_dereg_locked ]; then
		command simtest mr-dereg "$mr" >/tmp/race.dereg 2>&1 &
		held=$!
		taken_since "$d0" || fail "round $i: the deregistration never reached $point"
		simtest gpu-free "$va" >/tmp/race.free 2>&1 || fail "round $i ($point): gpu-free failed: $(cat /tmp/race.free)"
		wait $held || fail "round $i ($point): dereg failed: $(cat /tmp/race.dereg)"
	else
		command simtest gpu-free "$va" >/tmp/race.free 2>&1 &
		held=$!
		taken_since "$d0" || fail "round $i: the cudaFree never reached $point"
		simtest mr-dereg "$mr" >/tmp/race.dereg 2>&1 || fail "round $i ($point): dereg failed: $(cat /tmp/race.dereg)"
		wait $held || fail "round $i ($point): gpu-free failed: $(cat /tmp/race.free)"
	fi
	sim delay clear
	no_leaks "round $i ($point ${ms}ms)"
	sim counters win_free_dereg
	overlaps=$((out - w0))
	if [ "$overlaps" = 0 ]; then
		missed=$((missed + 1))
		retried=$((retried + 1))
		log "round $i ($point ${ms}ms): the other side started after the held one ended, $missed in a row"
		[ $missed -lt 4 ] ||
			fail "round $i ($point): the cudaFree and the deregistration never overlapped in $missed tries"
		continue
	fi
	missed=0
	i=$((i + 1))
done
invalidated=$(pm_stat invalidations)
core_inv=$(pm_stat core_invalidations)
skipped=$(pm_stat skipped_after_invalidation)
finish_clean
pass rounds="$rounds" retried="$retried" invalidations="$invalidated" core_invalidations="$core_inv" skipped_unmaps="$skipped"
