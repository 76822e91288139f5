#!/bin/sh
# shellcheck disable=SC2046,SC2086
# Field regressions (issue 5): one named scenario per known bug of the C
# clients (CONTRACT 3, shared/research/field-bugs.md).
#   rel_field.sh bug=silent_load     B5/PR#630: a load that fails says why;
#                                    a load that works publishes what NCCL
#                                    and UCX look for
#   rel_field.sh bug=uaf_window      B2: release() while the free callback is
#                                    still inside the invalidation: the core
#                                    has dropped the mapping lock and not yet
#                                    returned (the C original touches the
#                                    freed context)
#   rel_field.sh bug=double_unmap    dma_unmap/put_pages after an invalidation
#                                    (modern core, PEER_MEM_INVALIDATE_UNMAPS,
#                                    the invalidation forced between the
#                                    deregistration's unlock and its
#                                    dma_unmap): the driver freed the page
#                                    table when the free callback returned;
#                                    they must not touch it
#   rel_field.sh bug=lock_inversion  B1/MOFED 2696789: with the default
#                                    parameters the client opts into
#                                    PEER_MEM_INVALIDATE_UNMAPS; a cudaFree
#                                    forced into ibv_dereg_mr's put_pages or
#                                    ibv_reg_mr's dma_map does not deadlock
#                                    (the C original does: bounded wait and
#                                    the hung-task detector)
#   rel_field.sh bug=reg_deadlock    issue 12: the same for ibv_reg_mr only
#                                    (cudaFree inside dma_map, the core
#                                    holding the mapping lock)
#   rel_field.sh bug=name_conflict   B6: nv_peer_mem/nvidia_peermem (an nv_mem
#                                    client) loaded first, or loaded after us
#   rel_field.sh bug=unload_order    B7: unloading in the wrong order with
#                                    live registrations (the client's own
#                                    rmmod must be refused, not hang in the
#                                    core's unregister)
# Each also runs against the C reference client with that bug brought back
# (client=ref defects=BUG, suite field-teeth), where it must fail.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
bug=$rel_arg_bug

silent_load() {
	stack_up_fixtures
	# 1. the core refuses the registration
	st fault register_client 1 EIO >/dev/null
	insmod_refused "the core refuses the registration" $REL_MOD $(client_params)
	st fault-clear >/dev/null
	# the exact lines (a bare "7" or the module's name alone would match a
	# timestamp or any line of ours)
	if [ "$client" = ref ]; then
		why="$REL_MOD: the PeerDirect core refused client nv_mem: another peer memory client named nv_mem may be loaded"
		bad="$REL_MOD: invalid abi=bogus7 (use ex, plain or legacy)"
	elif nvidia_client; then
		# NVIDIA's wording is its own: what is asked of it is what is
		# asked of ours, a line that names nv_mem as the name refused
		# and says another client may hold it, and one naming the bad
		# value (nvidia-peermem.c nv_mem_param_conf_check does)
		why_re='nvidia-peermem .*nv_mem.*(another|already|in use|taken|loaded)'
		bad="ERROR invalid peerdirect_support param value 7"
	else
		why="$REL_MOD: the PeerDirect core refused client \"nv_mem\": another peer-memory client named \"nv_mem\" may be loaded"
		bad="$REL_MOD: invalid peerdirect_support=7: valid values are "
	fi
	if [ -n "${why_re:-}" ]; then
		since_mark | grep -q -E -- "$why_re" ||
			fail "no line of the module saying why the registration was refused (wanted /$why_re/; it said: $(since_mark | grep -F 'nvidia-peermem ' | head -n 2 | sed 's/^\[[^]]*\] *//' | tr '\n' ' '))" $(figures)
	else
		since_mark | grep -q -F -- "$why" ||
			fail "no line of ours saying why the registration was refused (wanted '$why')" $(figures)
	fi
	# 2. an invalid parameter
	if [ "$client" = ref ]; then
		insmod_refused "abi=bogus7" $REL_MOD $(client_params) abi=bogus7
	else
		insmod_refused "peerdirect_support=7" $REL_MOD peerdirect_support=7
	fi
	since_mark | grep -q -F -- "$bad" ||
		fail "the refusal does not name the bad value (wanted '$bad')" $(figures)
	[ "$client" = ref ] && rel_pass # the rest is about our module's parameters
	# 3. a core that cannot take the extended ABI (of the invalidating
	# nv_mem: a persistent client is plain, as NVIDIA's, and loads)
	stack_down
	gen=legacy
	stack_up_fixtures
	if nvidia_client; then
		insmod_refused "legacy core, peerdirect_support=0" $REL_MOD peerdirect_support=0
		since_mark | grep "nvidia-peermem " | grep -q "peerdirect_support=1" ||
			fail "the refusal on a legacy core does not say peerdirect_support=1" $(figures)
	else
		insmod_refused "legacy core, peerdirect_support=0" $REL_MOD peerdirect_support=0 persistent_api_support=0
		since_mark | grep "$REL_MOD" | grep -q "peerdirect_support=1" ||
			fail "the refusal on a legacy core does not say peerdirect_support=1" $(figures)
	fi
	# 4. no PeerDirect core at all (the C original: -EINVAL, silent)
	stack_down
	load nvidia_p2p_sim
	insmod_refused "no PeerDirect core" $REL_MOD
	REL_FAULTS=4
	unload nvidia_p2p_sim
	# 5. the loads that work publish the detection paths
	gen=modern
	ps="1 0"
	# NVIDIA's before 560: nv_mem and nv_mem_nc, always (as ours with 0)
	nvidia_client && ps=0
	for p in $ps; do
		stack_up_fixtures
		if nvidia_client; then
			load $REL_MOD
		else
			load $REL_MOD persistent_api_support=$p
		fi
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

# deadlock_shown PHASE: a forced phase hung (phase_race). Lets the hung-task
# detector name the stuck tasks (timeout cut to 5 s), then silences it (the
# tasks stay stuck: this must be the boot's last scenario) and fails.
deadlock_shown() {
	name_hung_tasks
	fail "deadlock: cudaFree in phase $1 and the racing operation stuck for ${REL_HANG_S}s ($PHASE_STUCK); hung-task reports: $HUNG_REPORTS" $(figures) hang="$1"
}

# B1 (MOFED 2696789) and the registration window (issue 12): cudaFree forced
# into a deregistration's put_pages (inside the provider, before its driver
# lock: the mapping lock is held there where the core unmaps under it) and
# into a registration's dma_map (same place; the real core holds the mapping
# lock across registration). A client whose free callback calls the core's
# invalidate then (it waits for the mapping lock while holding the driver
# lock) deadlocks with that thread; ours must not.
lock_inversion() {
	stack_up_fixtures
	mark
	# Defaults, except that the invalidating client is wanted.
	pers=0
	# shellcheck disable=SC2046
	load $REL_MOD $(client_params)
	REL_IDLE_REF=$(refcnt)
	REL_HANG_S=$(scaled_s 8)
	for _ph in ${1:-dereg dma_map}; do
		phase_race_reached "$_ph"
		[ "$PHASE_RESULT" = hang ] && deadlock_shown "$_ph"
	done
	if [ "$bug" = reg_deadlock ]; then
		settle_idle
		stack_down
		rel_pass
	fi
	since_mark | grep -E "registered peer memory client nv_mem " | grep -q "invalidate unmaps" ||
		fail "nv_mem did not opt into PEER_MEM_INVALIDATE_UNMAPS by default" $(figures)
	if nvidia_client; then
		# NVIDIA's module (issue 33): the forced phases are the B1 test;
		# the jittered race below lands at random in the windows that
		# uaf_window and double_unmap force (KASAN there, by chance): a
		# result that changes from boot to boot is no comparison.
		settle_idle
		stack_down
		kmemleak_check light
		rel_pass jittered_race=not-run
	fi
	simtest_to out race free dereg --iters 100 --size 128K --jitter-us 400 2>/tmp/race.err
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG race: /'
	last=$(echo "$out" | tail -n 1)
	[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] || fail "race free dereg: $last" $(figures)
	REL_RACES=$((REL_RACES + $(sval races "$last")))
	REL_OPS=$((REL_OPS + 4 * $(sval iters "$last")))
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass seed="$(sval seed "$last")"
}

name_conflict() {
	stack_up_fixtures
	# nv_peer_mem / nvidia_peermem first (an nv_mem client), then us.
	other=peermem_refclient
	[ "$client" = ref ] && other=peermem_refclient2
	load $other name=nv_mem
	# shellcheck disable=SC2046
	insmod_refused "nv_mem taken by another client" $REL_MOD $(client_params)
	# The exact advice (our own name, nvidia_peermem_rs, contains
	# "nvidia_peermem": a looser pattern matches any line of ours).
	if [ "$client" = ref ]; then
		advice="$REL_MOD: the PeerDirect core refused client nv_mem: another peer memory client named nv_mem may be loaded (nv_peer_mem or nvidia_peermem): unload it first"
	elif nvidia_client; then
		# NVIDIA's own words: any line of it naming what to unload
		advice_re='nvidia-peermem .*(unload|rmmod)'
	else
		advice="$REL_MOD: the PeerDirect core refused client \"nv_mem\": another peer-memory client named \"nv_mem\" may be loaded; unload it first (rmmod nvidia_peermem nv_peer_mem)"
	fi
	if [ -n "${advice_re:-}" ]; then
		since_mark | grep -q -E -- "$advice_re" ||
			fail "the refusal does not say what to unload (wanted /$advice_re/; it said: $(since_mark | grep -F 'nvidia-peermem ' | head -n 2 | sed 's/^\[[^]]*\] *//' | tr '\n' ' '))" $(figures)
	else
		since_mark | grep -q -F -- "$advice" ||
			fail "the refusal does not say what to unload (wanted '$advice')" $(figures)
	fi
	[ "$client" = ref ] && { unload $other; rel_pass; }
	log "message: $(since_mark | grep "$REL_MOD" | head -n 2 | tr '\n' ' ')"
	# the other client is not disturbed
	simtest_to _o gpu-alloc 128K
	kv_set va va "$_o"
	simtest_to o mr-reg "$va" 128K || fail "the other client stopped working: $o" $(figures)
	[ "$(sval client "$o")" = nv_mem ] || fail "unexpected client $(sval client "$o")" $(figures)
	st mr-dereg "$(sval mr "$o")" >/dev/null
	st gpu-free "$va" >/dev/null
	unload peermem_refclient
	# us first, then the other one: it is refused, we keep working
	# shellcheck disable=SC2046
	load $REL_MOD $(nvidia_client || echo persistent_api_support=0)
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
	simtest_to _o gpu-alloc 256K
	kv_set va va "$_o"
	simtest_to _o mr-reg $((va + 100)) 200K || fail "mr-reg: $_o" $(figures)
	kv_set mr mr "$_o"
	for m in nvidia_p2p_sim peerdirect_sim $REL_MOD; do
		# In the background: a client without a module reference per
		# registration gets as far as the core's unregister, which waits
		# for the MR (the operator's rmmod hangs). A refusal is immediate;
		# the bound only tells a hang from a slow busybox rmmod on a
		# loaded host.
		(rmmod $m 2>/tmp/rmmod.err; echo $? >/tmp/rmmod.rc) &
		_rp=$!
		_t=0
		while kill -0 $_rp 2>/dev/null && [ $_t -lt $(($(scaled_s 15) * 10)) ]; do
			nap 0.1
			_t=$((_t + 1))
		done
		if kill -0 $_rp 2>/dev/null; then
			st mr-dereg "$mr" >/dev/null
			wait $_rp
			fail "rmmod $m hung with a live registration (blocked in the core's unregister: no module reference per registration)" $(figures)
		fi
		wait $_rp
		[ "$(cat /tmp/rmmod.rc)" = 0 ] &&
			fail "rmmod $m succeeded with a live registration" $(figures)
		loaded $m || fail "$m is gone" $(figures)
		log "rmmod $m refused: $(cat /tmp/rmmod.err)"
		REL_RACES=$((REL_RACES + 1))
		# and the registration still works
		st hca-write "$mr" 0 4096 seed:$REL_RACES >/dev/null || fail "DMA after rmmod $m" $(figures)
		st hca-check "$mr" 0 4096 seed:$REL_RACES >/dev/null || fail "DMA check after rmmod $m" $(figures)
		REL_OPS=$((REL_OPS + 3))
	done
	# The teardown of two registrations. The first its owner deregisters
	# (this scenario's simtest server, the process that registered it): the
	# ordinary unpin. The second goes with the HCA driver's unload, whose
	# deregistration comes from rmmod's task, another process than the
	# owner: the module leaves that pin to its owner, which ends it when the
	# provider frees the memory (the left-to-owner path). That is intended:
	# a device going away under a running job deregisters so.
	simtest_to _o gpu-alloc 256K
	kv_set va2 va "$_o"
	simtest_to _o mr-reg "$va2" 128K || fail "mr-reg: $_o" $(figures)
	_other=/sys/kernel/debug/$REL_MOD/stats
	other_unpins() { sed -n 's/^unpins_from_other_process //p' "$_other" 2>/dev/null; }
	o0=$(other_unpins)
	st mr-dereg "$mr" >/dev/null || fail "the owner's deregistration failed" $(figures)
	[ "$(other_unpins)" = "$o0" ] ||
		fail "the owner's own deregistration took the other-process path (unpins_from_other_process $o0 -> $(other_unpins))" $(figures)
	# The HCA driver goes away first: it deregisters every MR it holds.
	unload peermem_sim
	if [ -r "$_other" ]; then
		[ "$(other_unpins)" -gt "$o0" ] ||
			fail "rmmod peermem_sim's deregistration did not take the other-process path (unpins_from_other_process still $o0)" $(figures)
	fi
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

double_unmap() {
	stack_up
	mark
	i=0
	missed=0
	while [ $i -lt 3 ]; do
		simtest_to _o gpu-alloc 256K || fail "gpu-alloc: $_o" $(figures)
		kv_set va va "$_o"
		simtest_to _o mr-reg $((va + 4096)) 200K || fail "mr-reg: $_o" $(figures)
		kv_set mr mr "$_o"
		[ "$(sval client "$_o")" = nv_mem ] ||
			fail "the MR went to $(sval client "$_o"), not the invalidating nv_mem" $(figures)
		st hca-write "$mr" 0 64K seed:$i >/dev/null || fail "DMA before cudaFree" $(figures)
		# ibv_dereg_mr stops the notifier (MR marked unmapped, mapping
		# lock dropped) and, held there, has yet to call dma_unmap and
		# put_pages; cudaFree now: the core's invalidation leaves the
		# unmapping to the client, the driver frees the page table, and
		# then the deregistration calls dma_unmap and put_pages anyway
		# (the real core does after a completed invalidation no more).
		simtest_to w0 counters win_dereg_unlocked
		simtest_to d0 counters delays_taken
		st delay core_dereg_unlocked $((600 << missed)) 1 >/dev/null || fail "delay" $(figures)
		command simtest mr-dereg "$mr" >/tmp/dereg.out 2>&1 &
		dp=$!
		await_delay "$d0" || fail "the deregistration never reached core_dereg_unlocked" $(figures)
		st gpu-free "$va" >/dev/null || fail "cudaFree" $(figures)
		wait $dp || fail "dereg racing cudaFree: $(cat /tmp/dereg.out)" $(figures)
		st delay "" 0 >/dev/null
		REL_OPS=$((REL_OPS + 5))
		[ "$(splats_so_far)" = 0 ] || break
		# A round whose cudaFree came after the window tested nothing:
		# once more with the window twice as long, and after four such
		# rounds in a row the scenario fails (it would pass without ever
		# racing the window).
		simtest_to _w counters win_dereg_unlocked
		if [ "$_w" = "$w0" ]; then
			missed=$((missed + 1))
			log "round $i: the cudaFree missed the dereg window ($missed in a row)"
			[ $missed -lt 4 ] ||
				fail "the cudaFree missed the deregistration's unlocked window $missed times in a row: double_unmap was never raced" $(figures)
			continue
		fi
		missed=0
		REL_RACES=$((REL_RACES + 1))
		i=$((i + 1))
	done
	rel_no_splats
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass
}

case "$bug" in
silent_load) silent_load ;;
uaf_window)
	exec sh /scenarios/rel_race.sh "$@" window=release_in_invalidation variant=invalidate_unlocked rounds=3 ;;
double_unmap) double_unmap ;;
lock_inversion) lock_inversion ;;
reg_deadlock) lock_inversion "pinned dma_map activate" ;;
name_conflict) name_conflict ;;
unload_order) unload_order ;;
*) fail "unknown bug $bug" ;;
esac
