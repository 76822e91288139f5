#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# cudaFree racing deregistration, with the fixtures' delay points widening
# each window in turn: the free callback before/after it runs, the core's
# invalidate before the mapping lock, the deregistration under it. Every
# round must finish (no deadlock, no hung task), leave nothing pinned or
# mapped, and the verdict sees no KASAN/lockdep report. Every round must
# also have raced: the core's win_free_dereg counter moves only when the
# cudaFree and the deregistration were in flight together. A round that
# did not (most of them: the two simtest processes seldom meet within a
# few ms) is run again with the window forced open (a 600 ms delay, then
# 1200 and 2400 ms, the second operation started once the first sleeps in
# it); four misses in a row fail the scenario.
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

# ctr NAME: one of the fixtures' counters.
ctr() {
	simtest counters "$1"
}

# race_round: one cudaFree against one deregistration at $point; with
# forced=1 the operation that sleeps at $point starts first and the other
# once it sleeps there. Sets raced=1 if the two were in flight together.
race_round() {
	sim gpu-alloc 256K
	va=$(kv va "$out")
	sim mr-reg $((va + 512)) 150000
	mr=$(kv mr "$out")
	w0=$(ctr win_free_dereg)
	d0=$(ctr delays_taken)
	sim delay "$point" $ms 1
	if [ $forced = 1 ] && [ "$point" = core_dereg_locked ]; then
		simtest mr-dereg "$mr" >/tmp/race.dereg 2>&1 &
		dereg_pid=$!
		await_entered
		simtest gpu-free "$va" >/tmp/race.free 2>&1 || fail "round $i ($point): gpu-free failed: $(cat /tmp/race.free)"
		wait $dereg_pid || fail "round $i ($point): dereg failed: $(cat /tmp/race.dereg)"
	else
		simtest gpu-free "$va" >/tmp/race.free 2>&1 &
		free_pid=$!
		if [ $forced = 1 ]; then
			await_entered
		elif [ $((i % 2)) = 0 ]; then
			usleep $((ms * 700))
		fi
		simtest mr-dereg "$mr" >/tmp/race.dereg 2>&1 || fail "round $i ($point): dereg failed: $(cat /tmp/race.dereg)"
		wait $free_pid || fail "round $i ($point): gpu-free failed: $(cat /tmp/race.free)"
	fi
	sim delay clear
	no_leaks "round $i ($point ${ms}ms)"
	raced=0
	[ "$(ctr win_free_dereg)" = "$w0" ] || raced=1
}

# await_entered: until the delay armed since delays_taken read $d0 is taken.
await_entered() {
	_n=0
	while [ "$(ctr delays_taken)" = "$d0" ]; do
		_n=$((_n + 1))
		[ $_n -le 100 ] || fail "round $i: $point was never reached"
		usleep 20000
	done
}

i=0
forced_rounds=0
invalidated=0
while [ $i -lt "$rounds" ]; do
	n=0
	for p in $points; do
		n=$((n + 1))
		[ $((i % 4 + 1)) = $n ] && point=$p
	done
	ms=$((i / 4 % 3 * 3 + 1))
	forced=0
	race_round
	tries=1
	while [ $raced = 0 ]; do
		[ $tries -lt 4 ] ||
			fail "round $i ($point): the cudaFree and the deregistration were never in flight together ($tries tries): nothing was raced"
		log "round $i ($point ${ms}ms): no overlap, again with the window forced open"
		ms=$((600 << (tries - 1)))
		forced=1
		forced_rounds=$((forced_rounds + 1))
		race_round
		tries=$((tries + 1))
	done
	i=$((i + 1))
done
invalidated=$(pm_stat invalidations)
core_inv=$(pm_stat core_invalidations)
skipped=$(pm_stat skipped_after_invalidation)
finish_clean
pass rounds="$rounds" forced_rounds="$forced_rounds" invalidations="$invalidated" core_invalidations="$core_inv" skipped_unmaps="$skipped"
