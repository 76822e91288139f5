#!/bin/sh
# The lock inversion of MOFED 5.1-5.3 (bug 2696789), as lockdep sees it.
# mode=splat: on a core that calls put_pages under the mapping lock, a
#   deregistration (mapping lock -> driver mutex) and a cudaFree
#   (driver mutex -> free callback -> invalidate -> mapping lock) make the
#   cycle; lockdep must report it (the suite expects that splat). The two
#   are run one after the other: truly concurrent they would deadlock.
# mode=clean: the modern core with an opted-in client; the same two paths,
#   then real races of cudaFree against deregistration (both orders widened
#   with delay points, then many jittered rounds), then a persistent client
#   deregistering under its mapping lock: no deadlock, no splat.
#   fixture_lockinv.sh generation=G abi=A mode=splat|clean
# mode=splat makes the provider's driver lock visible to lockdep
# (rm_lock_lockdep=1); mode=clean keeps the real driver's (a semaphore
# lockdep does not see). Since the core holds the mapping lock across
# get_pages and dma_map as the real one does (issue 12), a visible driver
# lock gives lockdep a class-level cycle on every core, the modern one
# included, which cannot deadlock; the lock-order matrix (rel_lockorder)
# shows it cell by cell with a cudaFree forced into each phase. Here
# mode=clean checks what lockdep can see on a real node, and that nothing
# hangs.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
abi=${arg_abi:-ex}
mode=${arg_mode:-clean}
splat="possible circular locking dependency detected"
[ "$mode" = splat ] && PSIM_RM_LOCKDEP=1

load_sim_stack generation="$gen"
load_refclient abi="$abi"
va=$(gpu_alloc 64K)
mr_reg "$va" 65536
st mr-dereg "$mr_id" >/dev/null
mr_reg "$va" 65536
st gpu-free "$va" >/dev/null
st mr-dereg "$mr_id" >/dev/null

if [ "$mode" = splat ]; then
	dmesg_has "$splat" || fail "lockdep did not report the inversion"
	dmesg | grep -A 30 "$splat" | grep -q "mapping_lock" ||
		fail "the report does not name the mapping lock"
	no_leaks
	teardown
	pass lockdep=reported
fi

# cudaFree while a deregistration holds the mapping lock
va=$(gpu_alloc 64K)
mr_reg "$va" 65536
st delay core_dereg_locked 500 1 >/dev/null
command simtest mr-dereg "$mr_id" >/dev/null &
p=$!
sleep 0.2
st gpu-free "$va" >/dev/null
wait $p || fail "dereg failed during the race"
# deregistration while cudaFree holds the driver mutex
va=$(gpu_alloc 64K)
mr_reg "$va" 65536
st delay free_cb_before 500 1 >/dev/null
command simtest gpu-free "$va" >/dev/null &
p=$!
sleep 0.2
st mr-dereg "$mr_id" >/dev/null
wait $p || fail "cudaFree failed during the race"
no_leaks
simtest_to out race free dereg --iters 100 --jitter-us 300 ||
	fail "race free dereg: $out"
# the rounds that really overlapped, and the two forced races above
races=$(($(kv races "$(echo "$out" | tail -n 1)") + 2))
simtest_to out race free reg --iters 50 --jitter-us 300 ||
	fail "race free reg: $out"
races=$((races + $(kv races "$(echo "$out" | tail -n 1)")))
no_leaks
# a persistent client on the same core (nv_mem_nc beside an invalidating
# nv_mem): its deregistration under its MRs' mapping lock must not chain
# with the invalidating client's MRs into a cycle
unload peermem_refclient
load peermem_refclient2 name=ref_pers persistent=1 abi=plain
va=$(gpu_alloc 64K)
mr_reg "$va" 65536
[ "$mr_client" = ref_pers ] || fail "ref_pers expected, got $mr_client"
st mr-dereg "$mr_id" >/dev/null
st gpu-free "$va" >/dev/null
no_leaks
dmesg_has "$splat" && fail "lockdep reported an inversion"
teardown
no_new_leaks
pass races="$races" leaks="$LEAKS"
