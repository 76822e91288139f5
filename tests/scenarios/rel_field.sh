#!/bin/sh
# shellcheck disable=SC2046,SC2086
# Field regressions (issue 5): one named scenario per known bug of the C
# clients (CONTRACT 3, shared/research/field-bugs.md).
#   rel_field.sh bug=silent_load     B5/PR#630: a load that fails says why;
#                                    a load that works publishes what NCCL
#                                    and UCX look for
#   rel_field.sh bug=uaf_window      B2: release() while the free callback is
#                                    still inside the invalidation (the C
#                                    original touches the freed context)
#   rel_field.sh bug=lock_inversion  B1/MOFED 2696789: with the default
#                                    parameters the client opts into
#                                    PEER_MEM_INVALIDATE_UNMAPS; cudaFree
#                                    racing ibv_dereg_mr neither deadlocks
#                                    nor makes lockdep report
#   rel_field.sh bug=name_conflict   B6: nv_peer_mem/nvidia_peermem (an nv_mem
#                                    client) loaded first, or loaded after us
#   rel_field.sh bug=unload_order    B7: unloading in the wrong order with
#                                    live registrations
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
bug=$rel_arg_bug

silent_load() {
	stack_up_fixtures
	# 1. the core refuses the registration
	st fault register_client 1 EIO >/dev/null
	insmod_refused "the core refuses the registration" $REL_MOD persistent_api_support=1
	st fault-clear >/dev/null
	since_mark_has "$REL_MOD" || fail "no line of ours for a refused registration" $(figures)
	# 2. an invalid parameter
	insmod_refused "peerdirect_support=7" $REL_MOD peerdirect_support=7
	since_mark | grep "$REL_MOD" | grep -q 7 || fail "the refusal does not name the bad value" $(figures)
	# 3. a core that cannot take the extended ABI
	stack_down
	gen=legacy
	stack_up_fixtures
	insmod_refused "legacy core, peerdirect_support=0" $REL_MOD peerdirect_support=0
	since_mark | grep "$REL_MOD" | grep -q "peerdirect_support=1" ||
		fail "the refusal on a legacy core does not say peerdirect_support=1" $(figures)
	# 4. no PeerDirect core at all (the C original: -EINVAL, silent)
	stack_down
	load nvidia_p2p_sim
	insmod_refused "no PeerDirect core" $REL_MOD
	REL_FAULTS=4
	unload nvidia_p2p_sim
	# 5. the loads that work publish the detection paths
	gen=modern
	for p in 1 0; do
		stack_up_fixtures
		load $REL_MOD persistent_api_support=$p
		REL_OPS=$((REL_OPS + 1))
		for f in /sys/kernel/mm/memory_peers/nv_mem/version /sys/module/$REL_MOD/version; do
			[ -r $f ] || fail "persistent_api_support=$p: $f missing (NCCL would say GPU Direct RDMA Disabled)" $(figures)
		done
		if [ "$p" = 0 ]; then
			[ -r /sys/kernel/mm/memory_peers/nv_mem_nc/version ] ||
				fail "persistent_api_support=0: nv_mem_nc missing" $(figures)
		else
			[ -d /sys/kernel/mm/memory_peers/nv_mem_nc ] &&
				fail "persistent_api_support=1: nv_mem_nc registered too" $(figures)
		fi
		log "persistent_api_support=$p publishes: $(ls /sys/kernel/mm/memory_peers | tr '\n' ' ')version $(cat /sys/kernel/mm/memory_peers/nv_mem/version)"
		st roundtrip 128K >/dev/null || fail "persistent_api_support=$p: a registration fails" $(figures)
	done
	stack_down
	rel_pass
}

lock_inversion() {
	stack_up_fixtures
	mark
	# Defaults, except that the invalidating client is wanted.
	load $REL_MOD persistent_api_support=0
	since_mark | grep -E "registered peer memory client nv_mem " | grep -q "invalidate unmaps" ||
		fail "nv_mem did not opt into PEER_MEM_INVALIDATE_UNMAPS by default" $(figures)
	REL_IDLE_REF=$(refcnt)
	lockdep_alive || fail "lockdep is off before the test"
	out=$(st race free dereg --iters 100 --size 128K --jitter-us 400 2>/tmp/race.err)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG race: /'
	last=$(echo "$out" | tail -n 1)
	[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] || fail "race free dereg: $last" $(figures)
	REL_RACES=$(sval races "$last")
	REL_OPS=$((4 * REL_RACES))
	since_mark_has "circular locking dependency" && fail "lockdep reported an inversion" $(figures)
	lockdep_alive || fail "lockdep turned itself off" $(figures)
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass seed="$(sval seed "$last")"
}

name_conflict() {
	stack_up_fixtures
	# nv_peer_mem / nvidia_peermem first (an nv_mem client), then us.
	load peermem_refclient name=nv_mem
	insmod_refused "nv_mem taken by another client" $REL_MOD persistent_api_support=1
	since_mark | grep "$REL_MOD" | grep -q -E "nv_peer_mem|nvidia_peermem|unload" ||
		fail "the refusal does not say what to unload" $(figures)
	log "message: $(since_mark | grep "$REL_MOD" | head -n 2 | tr '\n' ' ')"
	# the other client is not disturbed
	_o=$(st gpu-alloc 128K)
	va=$(sval va "$_o")
	o=$(st mr-reg "$va" 128K) || fail "the other client stopped working: $o" $(figures)
	[ "$(sval client "$o")" = nv_mem ] || fail "unexpected client $(sval client "$o")" $(figures)
	st mr-dereg "$(sval mr "$o")" >/dev/null
	st gpu-free "$va" >/dev/null
	unload peermem_refclient
	# us first, then the other one: it is refused, we keep working
	load $REL_MOD persistent_api_support=0
	REL_IDLE_REF=$(refcnt)
	mark
	modload peermem_refclient name=nv_mem >/dev/null 2>&1 &&
		fail "a second nv_mem client loaded beside ours" $(figures)
	modload peermem_refclient name=nv_mem_nc >/dev/null 2>&1 &&
		fail "a second nv_mem_nc client loaded beside ours" $(figures)
	st roundtrip 256K --offset 12345 --len 100000 >/dev/null || fail "we stopped working" $(figures)
	[ -r /sys/kernel/mm/memory_peers/nv_mem/version ] || fail "our nv_mem vanished" $(figures)
	REL_OPS=8
	REL_FAULTS=3
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass
}

unload_order() {
	stack_up
	_o=$(st gpu-alloc 256K)
	va=$(sval va "$_o")
	_o=$(st mr-reg $((va + 100)) 200K) || fail "mr-reg: $_o" $(figures)
	mr=$(sval mr "$_o")
	for m in nvidia_p2p_sim peerdirect_sim $REL_MOD; do
		if rmmod $m 2>/tmp/rmmod.err; then
			fail "rmmod $m succeeded with a live registration" $(figures)
		fi
		loaded $m || fail "$m is gone" $(figures)
		log "rmmod $m refused: $(cat /tmp/rmmod.err)"
		REL_RACES=$((REL_RACES + 1))
		# and the registration still works
		st hca-write "$mr" 0 4096 seed:$REL_RACES >/dev/null || fail "DMA after rmmod $m" $(figures)
		st hca-check "$mr" 0 4096 seed:$REL_RACES >/dev/null || fail "DMA check after rmmod $m" $(figures)
		REL_OPS=$((REL_OPS + 3))
	done
	# The HCA driver goes away first: it deregisters every MR it holds.
	unload peermem_sim
	[ "$(refcnt)" = "$REL_IDLE_REF" ] || fail "refcount $(refcnt) after the MR holder went away" $(figures)
	# The provider may not go before us; we go, then the core and provider.
	rmmod nvidia_p2p_sim 2>/dev/null && fail "the provider unloaded under its client" $(figures)
	unload $REL_MOD peerdirect_sim nvidia_p2p_sim
	# And everything comes back in the right order.
	stack_up
	st roundtrip 128K >/dev/null || fail "roundtrip after reloading" $(figures)
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass
}

case "$bug" in
silent_load) silent_load ;;
uaf_window)
	exec sh /scenarios/rel_race.sh window=release_in_invalidation variant=dereg_locked rounds=6 ;;
lock_inversion) lock_inversion ;;
name_conflict) name_conflict ;;
unload_order) unload_order ;;
*) fail "unknown bug $bug" ;;
esac
