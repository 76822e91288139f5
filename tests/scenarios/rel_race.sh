#!/bin/sh
# Race windows forced open with the fixtures' delay points (issue 5).
#   rel_race.sh window=W [gen=modern] [pds=0] [pers=0] [rounds=N]
# W:
#   release_in_invalidation  the C original's use-after-free window: the
#       registration is deregistered (core calls release) while the free
#       callback is still inside the core's invalidate function; two
#       variants per round: the invalidation sleeps before taking the
#       mapping lock ("core_invalidate"), or the deregistration holds the
#       mapping lock ("core_dereg_locked") while cudaFree comes in
#       (variant=invalidate|dereg_locked runs only one of them);
#       variant=found holds the invalidation after it found the MR and
#       before it takes the mapping lock: a real core from MLNX_OFED 5.4-3
#       on dereferences the client pointer the MR's release cleared if the
#       deregistration reaches release meanwhile; a client whose release
#       waits for the callback to come out of the core (ours, extended
#       ABI) closes it, and every round must show that wait;
#       variant=invalidate_unlocked is the exact window of the real core:
#       the invalidation has dropped the mapping lock but not yet returned
#       to the client ("core_invalidate_unlocked") while the deregistration
#       runs release(); the core's window counters must show it was open.
#   free_in_dereg_unlocked  cudaFree while a deregistration sits between
#       dropping the mapping lock and calling dma_unmap
#       ("core_dereg_unlocked"; opted-in client on the modern core).
#   free_vs_dereg      cudaFree and ibv_dereg_mr of the same MR started
#       together from two threads, many rounds (simtest race free dereg).
#   free_in_get_pages  cudaFree while the registration sits between acquire
#       and get_pages ("get_pages") or inside the provider's get_pages
#       ("p2p_get_pages"). Our module pins once, in acquire, and get_pages
#       takes that pin (issue 35): its provider get_pages is acquire's,
#       raced in the core's acquire window (win_free_in_acquire).
#   free_in_dma_map    cudaFree while the registration sits between
#       get_pages and dma_map ("dma_map") or inside the provider's
#       dma_map_pages ("p2p_dma_map").
#   free_after_provider_call  cudaFree right after the provider's get_pages
#       or dma_map_pages dropped the driver lock and before it returns
#       ("p2p_get_pages_done", "p2p_dma_map_done"): the callback runs and
#       returns, the driver frees the new page table or mapping, and the
#       client must not read what the call returns (KASAN otherwise).
#   free_during_unmap  cudaFree while a deregistration is inside the
#       provider's dma_unmap ("p2p_dma_unmap", before the driver reads the
#       page table): the driver frees the page table and its mappings when
#       the free callback returns, so the callback must wait for that unmap
#       (a use-after-free in the driver otherwise, which KASAN reports).
#       variant=put (issue 31): the deregistration's dma_unmap fails
#       (fault dma_unmap_pages 1 EIO), the mapping is kept for a retry, and
#       put_pages unmaps it before it unpins: the cudaFree lands while that
#       unmap is inside the provider, which the callback must wait for too.
#   acquire_while_going  issue 11: the core holds a registration right before
#       asking nv_mem while rmmod wins; the acquires (nv_mem, then nv_mem_nc)
#       run while the module is going and must take and put no reference.
#       variant=unuse also holds the client's last user between its
#       decrement and its wake-up of the waiting unregistration (the
#       simulated core freed the client under that wake-up: found by the
#       soak, fixed as the real core does it, with a completion).
#   teardown_races     rmmod while a free callback runs, rmmod while a dereg
#       is inside put_pages, a load failing halfway while the core calls in.
#   load_fails_live    issue 31: a load failing after nv_mem registered
#       (the core refuses nv_mem_nc) while a registration of nv_mem is still
#       alive though the core released it: its deregistration could not
#       unpin (put_pages fails at put_pages and at release's retry), so the
#       driver still holds its free callback. init must not return before
#       that registration is gone (the module text would go under the
#       callback); the cudaFree that ends it runs while init waits. Our
#       module with pers=0 only.
#       variant=invalidating: the load fails while a free callback is on
#       its way into the core's invalidate ("core_invalidate_entry", before
#       the core looks at the client's handle) and the MR is deregistered
#       meanwhile: init must not unregister the client (the core frees its
#       handle then) before that callback has returned from the core.
#   rmmod_during_reg   rmmod of our module while registrations are live and
#       while one is in flight; then a registration loop racing rmmod.
# Every round must end with both operations finished (no hang), the MR gone,
# the memory freed; at the end nothing is pinned, mapped or registered, the
# module refcount is idle and kmemleak finds nothing.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
window=$rel_arg_window
variant=${rel_arg_variant:-both}
rounds=${rel_arg_rounds:-6}
[ -n "$window" ] || fail "window= missing"

stack_up
delays0=$(ctr delays_taken)
windows_mark

# bg_run VAR CMD...: runs CMD in the background, output to /tmp/bg.$VAR.
bg_run() {
	_v=$1
	shift
	("$@" >/tmp/bg.$_v 2>&1; echo "rc=$?" >>/tmp/bg.$_v) &
	eval "pid_$_v=$!"
}

bg_rc() {
	sed -n 's/^rc=//p' /tmp/bg.$1 | tail -n 1
}

# no_cleared_client_read: fails where a real core from MLNX_OFED 5.4-3 on
# would dereference NULL: an invalidation that reached the MR after the
# client's release returned (the simulator says so in the log).
no_cleared_client_read() {
	if _after "$REL_START" | grep -q "invalidation after the MR's release"; then
		fail "an invalidation reached the MR after its release: a NULL dereference in a real core (MLNX_OFED 5.4-3 and later)" $(figures)
	fi
}

# release_waits: the client under test does not return from release while
# a free callback of the same registration is inside the core's invalidate
# (nvidia_peermem_rs with the extended ABI).
release_waits() {
	[ "$client" = rs ] && [ "$pds" = 0 ]
}

# release_waited: how many releases of our module have waited so.
release_waited() {
	sed -n 's/^release_waited_for_invalidation //p' /sys/kernel/debug/$REL_MOD/stats
}

# alloc_reg SIZE OFFSET LEN: sets va, mr. With pers=0 the invalidating
# nv_mem client must take the MR (else no free callback is ever raced).
alloc_reg() {
	_o=$(st gpu-alloc "$1") || fail "gpu-alloc: $_o" $(figures)
	va=$(sval va "$_o")
	_o=$(st mr-reg $((va + $2)) "$3") || fail "mr-reg: $_o" $(figures)
	mr=$(sval mr "$_o")
	[ "$pers" = 1 ] || [ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not the invalidating nv_mem" $(figures)
	REL_OPS=$((REL_OPS + 2))
}

# finish_round VA [MR]: whatever survived the race is torn down normally.
finish_round() {
	if [ -n "$2" ] && st mr-query "$2" >/dev/null 2>&1; then
		st mr-dereg "$2" >/dev/null || fail "dereg after the race failed" $(figures)
	fi
	st gpu-free "$1" >/dev/null 2>&1
	REL_OPS=$((REL_OPS + 2))
	_lc=$(st leak-check) || fail "round left something behind: $_lc" $(figures)
}

# missed_round WINDOW: a round whose window counter did not move tested
# nothing: it is run again, its delay twice as long (a loaded host can be
# slower to start the other side than the window lasts); four such rounds
# in a row fail the scenario.
missed=0
missed_round() {
	missed=$((missed + 1))
	retried=$((retried + 1))
	log "round $i: the window $1 was not reached ($missed in a row)"
	[ $missed -lt 4 ] ||
		fail "the window $1 was not reached in $missed tries in a row: the race was never run" $(figures)
}
retried=0

release_in_invalidation() {
	i=0
	overlapped=0
	while [ $i -lt "$rounds" ]; do
		alloc_reg 256K 4096 200K
		st hca-write "$mr" 0 64K seed:$i >/dev/null || fail "DMA before the race" $(figures)
		v=$variant
		if [ "$v" = both ]; then
			v=dereg_locked
			[ $((i % 2)) = 0 ] && v=invalidate
		fi
		# The round's window: the whole deregistration ran while the
		# cudaFree was held in the core (invalidate, invalidate_unlocked:
		# the cudaFree had not returned when the deregistration did), or
		# the cudaFree began while the deregistration was between stop and
		# release (dereg_locked, win_free_in_dereg; whether release then
		# runs inside the invalidation is the client's and the core's
		# business).
		win=win_free_in_dereg
		w0=$(ctr "$win")
		if [ "$v" != dereg_locked ]; then
			# cudaFree first: its invalidation sleeps before looking the
			# MR up (invalidate), after finding it and before taking
			# the mapping lock (found), or after marking the MR and
			# dropping the lock, before returning to the client's
			# callback (invalidate_unlocked); meanwhile the
			# deregistration runs to release().
			case "$v" in
			invalidate) point=core_invalidate ;;
			found) point=core_invalidate_found ;;
			invalidate_unlocked) point=core_invalidate_unlocked ;;
			*) fail "unknown variant=$v (invalidate, found, invalidate_unlocked, dereg_locked, both)" ;;
			esac
			d0=$(ctr delays_taken)
			st delay $point $((1000 << missed)) 1 >/dev/null
			bg_run free st gpu-free "$va"
			await_delay "$d0" || fail "cudaFree never reached the $point window" $(figures)
			if release_waits; then
				# Our release waits for the callback to come out of
				# the core: the deregistration ends after it.
				rw0=$(release_waited)
				bg_run dereg st mr-dereg "$mr"
				wait "$pid_free"
				wait "$pid_dereg"
				[ "$(bg_rc dereg)" = 0 ] || fail "dereg during the invalidation failed: $(cat /tmp/bg.dereg)" $(figures)
				ovl=0
				[ "$(release_waited)" -gt "$rw0" ] && ovl=1
			else
				st mr-dereg "$mr" >/dev/null || fail "dereg during the invalidation failed" $(figures)
				# no rc= line yet: the cudaFree is still running
				ovl=0
				[ -n "$(bg_rc free)" ] || ovl=1
				wait "$pid_free"
			fi
			[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
		else
			# Deregistration first, holding the mapping lock; cudaFree's
			# invalidation waits for it, and release() runs while the free
			# callback is still inside the invalidation.
			d0=$(ctr delays_taken)
			st delay core_dereg_locked $((1000 << missed)) 1 >/dev/null
			bg_run dereg st mr-dereg "$mr"
			await_delay "$d0" || fail "the deregistration never reached the core_dereg_locked window" $(figures)
			bg_run free st gpu-free "$va"
			wait "$pid_dereg"
			ovl=0
			[ -n "$(bg_rc free)" ] || ovl=1
			wait "$pid_free"
			[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
			[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
		fi
		REL_OPS=$((REL_OPS + 3))
		st delay "" 0 >/dev/null
		# a client that has the bug stops at the first report
		[ "$(splats_so_far)" = 0 ] || break
		no_cleared_client_read
		_lc=$(st leak-check) || fail "round $i left something behind: $_lc" $(figures)
		if [ "$v" = dereg_locked ]; then
			reached=0
			[ "$(ctr "$win")" = "$w0" ] || reached=1
			what=$win
		elif release_waits; then
			reached=$ovl
			what="a release waiting for the free callback inside the core"
		else
			reached=$ovl
			what="the cudaFree still running when the deregistration returned"
		fi
		if [ "$reached" = 0 ]; then
			missed_round "$what ($v)"
			continue
		fi
		missed=0
		REL_RACES=$((REL_RACES + 1))
		overlapped=$((overlapped + ovl))
		i=$((i + 1))
	done
	if release_waits; then
		log "release waited for the free callback to come out of the core: $overlapped of $rounds rounds"
	else
		log "release while the free callback was still running: $overlapped of $rounds rounds"
	fi
	EXTRA="overlapped=$overlapped retried=$retried"
	if [ "$variant" = invalidate_unlocked ]; then
		n=$(windows_reached invalidate_unlocked)
		[ "$n" -gt 0 ] ||
			fail "the window was never open: release never ran while an invalidation was between unlock and return" $(figures)
	fi
}

free_in_dereg_unlocked() {
	i=0
	missed=0
	while [ $i -lt "$rounds" ]; do
		alloc_reg 256K 4096 200K
		# the core's counter of invalidations that found a deregistration
		# between its unlock and its dma_unmap: a round whose cudaFree came
		# after the held window ended is run again, the window doubled
		w0=$(ctr win_dereg_unlocked)
		d0=$(ctr delays_taken)
		st delay core_dereg_unlocked $((1000 << missed)) 1 >/dev/null
		bg_run dereg st mr-dereg "$mr"
		await_delay "$d0" || fail "the deregistration never reached the core_dereg_unlocked window" $(figures)
		st gpu-free "$va" >/dev/null || fail "cudaFree during the deregistration failed" $(figures)
		wait "$pid_dereg"
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		st delay "" 0 >/dev/null
		REL_OPS=$((REL_OPS + 2))
		_lc=$(st leak-check) || fail "round $i left something behind: $_lc" $(figures)
		if [ "$(ctr win_dereg_unlocked)" = "$w0" ]; then
			missed_round "dereg_unlocked"
			continue
		fi
		missed=0
		REL_RACES=$((REL_RACES + 1))
		i=$((i + 1))
	done
	EXTRA="retried=$retried"
	n=$(windows_reached dereg_unlocked)
	[ "$n" -gt 0 ] ||
		fail "the window was never open: no invalidation between the deregistration's unlock and its dma_unmap" $(figures)
}

free_during_unmap() {
	i=0
	waited=0
	while [ $i -lt "$rounds" ]; do
		alloc_reg 256K 4096 200K
		d0=$(ctr delays_taken)
		# variant=put: the first unmap fails before the delay point, the
		# one inside put_pages is held
		[ "$variant" = put ] && st fault dma_unmap_pages 1 EIO >/dev/null
		st delay p2p_dma_unmap 2000 1 >/dev/null
		bg_run dereg st mr-dereg "$mr"
		await_delay "$d0" || fail "the deregistration never reached the unmap window" $(figures)
		st gpu-free "$va" >/dev/null || fail "cudaFree during the unmap failed" $(figures)
		wait "$pid_dereg"
		st delay "" 0 >/dev/null
		st fault-clear >/dev/null
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		[ $(($(ctr delays_taken) - d0)) = 1 ] || fail "the unmap window was not reached" $(figures)
		REL_OPS=$((REL_OPS + 3))
		REL_RACES=$((REL_RACES + 1))
		_lc=$(st leak-check) || fail "round $i left something behind: $_lc" $(figures)
		i=$((i + 1))
	done
	rechecks=0
	if [ "$client" = rs ]; then
		waited=$(sed -n 's/^free_waited_for_unmap //p' /sys/kernel/debug/nvidia_peermem_rs/stats)
		rechecks=$(sed -n 's/^free_wait_rechecks //p' /sys/kernel/debug/nvidia_peermem_rs/stats)
		# issue 31: the callback (holding the driver lock) sleeps until
		# the unmap wakes it; it does not poll. A wait_event looks twice
		# before it sleeps; a spurious wake-up may add one.
		[ "$rechecks" -le $((3 * waited)) ] ||
			fail "the free callback polled: $rechecks looks at a reader still there in $waited waits" $(figures)
	fi
	EXTRA="free_waited_for_unmap=$waited free_wait_rechecks=$rechecks"
}

free_vs_dereg() {
	iters=$((rounds * 50))
	mark
	out=$(st race free dereg --iters "$iters" --size 192K --jitter-us 300 2>/tmp/race.err)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG race: /'
	sed 's/^/SCENARIO-LOG race: /' /tmp/race.err
	last=$(echo "$out" | tail -n 1)
	[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] || fail "race free dereg: $last" $(figures)
	REL_RACES=$((REL_RACES + $(sval races "$last")))
	REL_OPS=$((REL_OPS + 4 * iters))
	# A dereg that loses the race with the free callback is the contract's
	# graceful outcome: counted, logged at debug level, never as an error.
	! since_mark_has "dma_unmap failed" ||
		fail "a lost race was logged at error level: $(since_mark | grep -m1 'dma_unmap failed')" $(figures)
	lost=0
	[ "$client" = rs ] && lost=$(sed -n 's/^dma_unmap_after_free //p' /sys/kernel/debug/nvidia_peermem_rs/stats)
	EXTRA="seed=$(sval seed "$last") free_ok=$(sval a_ok "$last") dereg_ok=$(sval b_ok "$last") invalidated_at_cleanup=$(sval invalidated_at_cleanup "$last") dma_unmap_after_free=$lost"
}

# free_during_reg POINT...: for each point, cudaFree while mr-reg sleeps there.
# The round's window is the core's counter for the phase the point lies in
# (a cudaFree began while the registration was there); a round that missed
# it is run again with longer delays, four misses in a row fail. A
# registration that wins the race must come out invalidated (a persistent
# pin: live; no callback), never live on freed memory.
free_during_reg() {
	regs_ok=0
	regs_failed=0
	i=0
	while [ $i -lt "$rounds" ]; do
		for point in "$@"; do
			case "$point,$client" in
			p2p_get_pages,rs | p2p_get_pages_done,rs) win=win_free_in_acquire ;;
			get_pages,* | p2p_get_pages,* | p2p_get_pages_done,*) win=win_free_in_get_pages ;;
			dma_map,*) win=win_free_pinned ;;
			p2p_dma_map,* | p2p_dma_map_done,*) win=win_free_in_dma_map ;;
			*) fail "free_during_reg: no window for $point" ;;
			esac
			missed=0
			while :; do
				_o=$(st gpu-alloc 256K) || fail "gpu-alloc: $_o" $(figures)
				va=$(sval va "$_o")
				w0=$(ctr "$win")
				# p2p_* points: every provider call sleeps (acquire may
				# probe with get_pages first); the core's points are
				# passed once. A retry doubles the delay and the wait.
				if [ "${point#p2p_}" != "$point" ]; then
					st delay "$point" $((500 << missed)) 0 >/dev/null
				else
					st delay "$point" $((500 << missed)) 1 >/dev/null
				fi
				d0=$(ctr delays_taken)
				bg_run reg st mr-reg $((va + 512)) 128K
				# into the held call: the provider's get_pages points are
				# passed twice where acquire probes with a pin first and
				# get_pages pins again (NVIDIA's; the reference client
				# asks the sim, ours keeps acquire's pin), the others once
				_n=1
				case "$point,$client" in
				p2p_get_pages,nv* | p2p_get_pages_done,nv*) _n=2 ;;
				esac
				await_delay "$d0" $_n || fail "$point: the registration never reached the delay ($_n)" $(figures)
				usleep $((i * 30000))
				st gpu-free "$va" >/dev/null || fail "cudaFree during registration failed" $(figures)
				wait "$pid_reg"
				st delay "" 0 >/dev/null
				REL_OPS=$((REL_OPS + 3))
				out=$(cat /tmp/bg.reg)
				reached=0
				[ "$(ctr "$win")" = "$w0" ] || reached=1
				if [ "$(bg_rc reg)" = 0 ]; then
					mr=$(sval mr "$out")
					q=$(st mr-query "$mr")
					state=$(sval state "$q")
					st mr-dereg "$mr" >/dev/null || fail "dereg of an MR whose memory was freed failed" $(figures)
					want=invalidated
					[ "$pers" = 1 ] && want=live
					[ "$reached" = 0 ] || [ "$state" = "$want" ] ||
						fail "$point: the registration won a race with cudaFree ($win) and its MR is $state, want $want ($q)" $(figures)
					log "$point: registration won the race ($q, $win reached=$reached)"
				else
					case "$out" in
					*errno=*) ;;
					*) fail "mr-reg failed without an errno: $out" $(figures) ;;
					esac
					log "$point: registration refused cleanly ($win reached=$reached): $(echo "$out" | head -n 1)"
				fi
				_lc=$(st leak-check) || fail "$point round $i left something behind: $_lc" $(figures)
				[ "$reached" = 1 ] && break
				missed_round "$win ($point)"
			done
			if [ "$(bg_rc reg)" = 0 ]; then
				regs_ok=$((regs_ok + 1))
			else
				regs_failed=$((regs_failed + 1))
			fi
			REL_RACES=$((REL_RACES + 1))
		done
		i=$((i + 1))
	done
	EXTRA="reg_refused=$regs_failed reg_won=$regs_ok retried=$retried"
}

rmmod_refused() {
	mark
	if rmmod $REL_MOD 2>/tmp/rmmod.err; then
		fail "rmmod succeeded $1" $(figures)
	fi
	loaded $REL_MOD || fail "module gone after a refused rmmod $1" $(figures)
	log "rmmod refused $1: $(cat /tmp/rmmod.err)"
	REL_RACES=$((REL_RACES + 1))
}

rmmod_during_reg() {
	# 1. live registrations hold the module
	alloc_reg 128K 0 128K
	r=$(refcnt)
	[ "$r" -gt "$REL_IDLE_REF" ] || fail "a live registration takes no module reference (refcnt $r)" $(figures)
	rmmod_refused "with a live registration"
	# 2. a registration in flight (sleeping before get_pages) holds it too
	_o=$(st gpu-alloc 128K) || fail "gpu-alloc: $_o" $(figures)
	va2=$(sval va "$_o")
	d0=$(ctr delays_taken)
	st delay get_pages 2000 1 >/dev/null
	bg_run reg st mr-reg "$va2" 128K
	await_delay "$d0" || fail "the registration never reached the get_pages window" $(figures)
	rmmod_refused "with a registration in flight"
	wait "$pid_reg"
	[ "$(bg_rc reg)" = 0 ] || fail "the in-flight registration failed: $(cat /tmp/bg.reg)" $(figures)
	mr2=$(sval mr "$(cat /tmp/bg.reg)")
	st mr-dereg "$mr2" >/dev/null || fail "dereg" $(figures)
	st gpu-free "$va2" >/dev/null
	st mr-dereg "$mr" >/dev/null || fail "dereg" $(figures)
	st gpu-free "$va" >/dev/null
	REL_OPS=$((REL_OPS + 6))
	settle_idle
	# 3. idle: rmmod works, and the module loads again
	rmmod $REL_MOD || fail "rmmod of an idle module failed" $(figures)
	# shellcheck disable=SC2046
	load $REL_MOD $(client_params)
	# 4. a registration loop racing rmmod attempts: each rmmod either is
	# refused or wins; registrations after a win fail cleanly (EFAULT: no
	# client claims the range); the module is reloaded and the loop goes on.
	i=0
	wins=0
	while [ $i -lt "$rounds" ]; do
		_o=$(st gpu-alloc 128K) || fail "gpu-alloc: $_o" $(figures)
		va=$(sval va "$_o")
		(
			n=0
			while [ $n -lt 15 ]; do
				o=$(st mr-reg "$va" 128K) && st mr-dereg "$(sval mr "$o")" >/dev/null
				n=$((n + 1))
			done
		) >/dev/null 2>&1 &
		loop=$!
		tries=0
		while kill -0 $loop 2>/dev/null; do
			tries=$((tries + 1))
			REL_RACES=$((REL_RACES + 1))
			if rmmod $REL_MOD 2>/dev/null; then
				wins=$((wins + 1))
				# shellcheck disable=SC2046
				load $REL_MOD $(client_params)
			fi
			usleep 20000
		done
		wait $loop
		REL_OPS=$((REL_OPS + 30 + tries))
		st gpu-free "$va" >/dev/null
		loaded $REL_MOD || load $REL_MOD $(client_params)
		_lc=$(st leak-check) || fail "rmmod race round $i left something behind: $_lc" $(figures)
		i=$((i + 1))
	done
	EXTRA="rmmod_won=$wins"
}

# acquire_while_going: the exact interleaving of issue 11. An MR
# registration is held in the core right before it asks nv_mem (no module
# reference taken yet), rmmod wins meanwhile; nv_mem's acquire then runs
# while the module is going, the core moves on to nv_mem_nc (not yet
# unregistering) and its acquire runs too, while the module's exit waits
# for it. Both must decline cleanly (no module reference taken or put), the
# registration fail, the unload finish; repeated with the module reloaded.
acquire_while_going() {
	i=0
	while [ $i -lt "$rounds" ]; do
		_o=$(st gpu-alloc 128K) || fail "gpu-alloc: $_o" $(figures)
		va=$(sval va "$_o")
		mark
		d0=$(ctr delays_taken)
		st delay acquire 1500 1 >/dev/null
		# variant=unuse: the last user of the client (in the old core,
		# this acquire) also sleeps between its decrement and its wake-up
		# of the unregistration (the soak's KASAN use-after-free).
		[ "$variant" != unuse ] || st delay client_unuse 1500 1 >/dev/null
		bg_run reg st mr-reg "$va" 128K
		# rmmod once the registration sleeps in the window (not before)
		w=0
		while [ "$(ctr delays_taken)" = "$d0" ] && [ $w -lt 100 ]; do
			usleep 20000
			w=$((w + 1))
		done
		# rmmod with a bounded wait: a client that accepts the acquire
		# of a going module (a module reference taken with no check)
		# has the registration complete, and the unload then waits in
		# the core's unregistration for an MR nobody will deregister
		bg_run rmmod rmmod $REL_MOD
		w=0
		while kill -0 "$pid_rmmod" 2>/dev/null && [ $w -lt 150 ]; do
			usleep 100000
			w=$((w + 1))
		done
		if kill -0 "$pid_rmmod" 2>/dev/null; then
			wait "$pid_reg"
			# free the unload: deregister what the going module took
			out=$(cat /tmp/bg.reg)
			[ "$(bg_rc reg)" = 0 ] && st mr-dereg "$(sval mr "$out")" >/dev/null
			wait "$pid_rmmod"
			fail "round $i: rmmod hung 15 s in the core's unregistration: the going module accepted the acquire and the registration went on ($(echo "$out" | head -n 1))" $(figures)
		fi
		[ "$(bg_rc rmmod)" = 0 ] || fail "rmmod of a module with no registration failed: $(cat /tmp/bg.rmmod)" $(figures)
		wait "$pid_reg"
		[ "$(bg_rc reg)" != 0 ] || fail "a registration succeeded on an unloaded client: $(cat /tmp/bg.reg)" $(figures)
		# The window was reached: the core's unregistration of nv_mem
		# waited for the acquire we held (for the client-list mutex the
		# acquires run under, as in the real core; or, if it got there
		# before the acquire took it, for the registration in flight).
		since_mark_has "unregister: waiting for the client list|unregister nv_mem: waiting for 1 registrations" ||
			fail "round $i: the acquire was not in flight during the unload" $(figures)
		if [ "$variant" = unuse ] && [ $(($(ctr delays_taken) - d0)) -lt 2 ]; then
			fail "round $i: the last user's wake-up window (client_unuse) was not reached" $(figures)
		fi
		REL_RACES=$((REL_RACES + 1))
		REL_OPS=$((REL_OPS + 3))
		st delay "" 0 >/dev/null
		st gpu-free "$va" >/dev/null
		# shellcheck disable=SC2046
		load $REL_MOD $(client_params)
		i=$((i + 1))
	done
}

# wait_delay D0: until a delay point was entered since the counter was D0.
wait_delay() {
	_w=0
	while [ "$(ctr delays_taken)" = "$1" ] && [ $_w -lt 150 ]; do
		usleep 20000
		_w=$((_w + 1))
	done
	[ "$(ctr delays_taken)" != "$1" ] || fail "the delay point was never reached" $(figures)
}

# teardown_races: the module's other teardown windows, each held open.
#  a) rmmod while a free callback runs: the MR is deregistered while
#     cudaFree's invalidation sleeps in the core; the callback still holds
#     the registration, so rmmod is refused until it ends.
#  b) rmmod while a deregistration is inside the provider's put_pages.
#  c) a load failing halfway (the core refuses nv_mem_nc) while the core
#     already calls into the registered nv_mem: init's unwinding waits for
#     it, the load fails cleanly, nothing stays.
teardown_races() {
	i=0
	while [ $i -lt "$rounds" ]; do
		# a) only with a free callback (pers=0)
		if [ "$pers" = 0 ]; then
			alloc_reg 256K 0 128K
			d0=$(ctr delays_taken)
			# long enough for a dereg on a loaded host (2 QEMUs, TCG)
			st delay core_invalidate 4000 1 >/dev/null
			bg_run free st gpu-free "$va"
			wait_delay "$d0"
			if release_waits; then
				# Our release waits for the callback to come out of
				# the core: the deregistration runs beside it.
				rw0=$(release_waited)
				bg_run dereg st mr-dereg "$mr"
				_n=0
				while [ "$(release_waited)" = "$rw0" ] && [ $_n -lt 100 ]; do
					usleep 20000
					_n=$((_n + 1))
				done
				[ "$(release_waited)" != "$rw0" ] ||
					fail "the release never waited for the free callback inside the core" $(figures)
			else
				st mr-dereg "$mr" >/dev/null || fail "dereg during the invalidation failed" $(figures)
			fi
			# the cudaFree has not returned (no rc= line yet; the
			# background subshell itself outlives it by a moment)
			[ -z "$(bg_rc free)" ] ||
				fail "the free callback ended before the check" $(figures)
			rmmod_refused "while a free callback runs"
			[ -z "$(bg_rc free)" ] ||
				fail "the free callback ended before rmmod was refused: the window was missed" $(figures)
			wait "$pid_free"
			[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
			if release_waits; then
				wait "$pid_dereg"
				[ "$(bg_rc dereg)" = 0 ] || fail "dereg during the invalidation failed: $(cat /tmp/bg.dereg)" $(figures)
			fi
		fi
		# b)
		alloc_reg 256K 0 128K
		d0=$(ctr delays_taken)
		st delay p2p_put_pages 3000 1 >/dev/null
		bg_run dereg st mr-dereg "$mr"
		wait_delay "$d0"
		rmmod_refused "while a deregistration is inside put_pages"
		wait "$pid_dereg"
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		st gpu-free "$va" >/dev/null
		st delay "" 0 >/dev/null
		settle_idle
		# c) only where two clients register (pers=0)
		if [ "$pers" = 0 ] && [ "$client" = rs ]; then
			rmmod $REL_MOD || fail "rmmod of an idle module failed" $(figures)
			_o=$(st gpu-alloc 128K) || fail "gpu-alloc: $_o" $(figures)
			va=$(sval va "$_o")
			mark
			# nv_mem stays listed 3 s before init goes on (and the
			# core refuses nv_mem_nc); an acquire arriving meanwhile is
			# held 4 s, longer than that window, so init's unwinding must
			# wait for it. (A 600 ms window was missed once in a soak boot
			# under 4 QEMUs on 2 cores: no registration of the loop got
			# there in time.)
			st delay register_client_done 3000 1 >/dev/null
			st delay acquire 4000 1 >/dev/null
			st fault register_client 2 ENOMEM >/dev/null
			(
				n=0
				while [ $n -lt 60 ] && [ ! -e /tmp/load.done ]; do
					o=$(st mr-reg "$va" 128K) && st mr-dereg "$(sval mr "$o")" >/dev/null
					usleep 30000
					n=$((n + 1))
				done
			) >/dev/null 2>&1 &
			loop=$!
			rm -f /tmp/load.done
			# shellcheck disable=SC2046
			if modload $REL_MOD $(client_params) >/tmp/load.err 2>&1; then
				fail "the load succeeded with nv_mem_nc refused by the core" $(figures)
			fi
			touch /tmp/load.done
			wait $loop
			rm -f /tmp/load.done
			loaded $REL_MOD && fail "the module stayed loaded after a failed init" $(figures)
			# the unwinding waited for what was in flight: the acquire
			# the core held (its unregister waits for the client list
			# while the acquire runs, which our declining module
			# refuses, or for the registration the acquire made), or a
			# registration of ours alive when the load failed (init
			# waits for it before it unregisters)
			since_mark_has "unregister: waiting for the client list" ||
				since_mark_has "unregister nv_mem: waiting for 1 registrations" ||
				since_mark_has "the load failed \(.*\): waiting for [0-9]* registrations" ||
				fail "round $i: nothing was in flight while the load unwound" $(figures)
			st fault-clear >/dev/null
			st delay "" 0 >/dev/null
			st gpu-free "$va" >/dev/null
			# shellcheck disable=SC2046
			load $REL_MOD $(client_params)
		fi
		_lc=$(st leak-check) || fail "teardown round $i left something behind: $_lc" $(figures)
		REL_RACES=$((REL_RACES + 3))
		REL_OPS=$((REL_OPS + 10))
		i=$((i + 1))
	done
}

# load_failing_with_mr MS: reloads the module so that its load fails after
# nv_mem registered: nv_mem is listed and returns 4 s later, then
# nv_mem_nc's registration waits MS ms before the core refuses it (the
# second registration call), the load running in the background
# ($pid_load). Meanwhile registers an MR of 128 KiB, which nv_mem takes
# ($va, $mr). (1 s was too short under TCG to arm the second delay in
# time.)
load_failing_with_mr() {
	rmmod $REL_MOD || fail "rmmod of an idle module failed" $(figures)
	_o=$(st gpu-alloc 128K) || fail "gpu-alloc: $_o" $(figures)
	va=$(sval va "$_o")
	mark
	st fault register_client 2 ENOMEM >/dev/null
	d0=$(ctr delays_taken)
	st delay register_client_done 4000 1 >/dev/null
	# shellcheck disable=SC2046
	bg_run load modload $REL_MOD $(client_params)
	wait_delay "$d0"
	d0=$(ctr delays_taken)
	st delay register_client "$1" 1 >/dev/null
	wait_delay "$d0"
	_o=$(st mr-reg "$va" 128K) || fail "mr-reg while the load runs: $_o" $(figures)
	mr=$(sval mr "$_o")
	[ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not nv_mem" $(figures)
}

# load_fails_invalidating: load_fails_live's variant=invalidating.
load_fails_invalidating() {
	load_failing_with_mr 10000
	# the cudaFree's callback sleeps on its way into the core's invalidate
	# until well after init failed; the MR goes meanwhile
	d0=$(ctr delays_taken)
	st delay core_invalidate_entry 14000 1 >/dev/null
	bg_run free st gpu-free "$va"
	wait_delay "$d0"
	st mr-dereg "$mr" >/dev/null || fail "dereg failed" $(figures)
	wait "$pid_load"
	[ "$(bg_rc load)" != 0 ] ||
		fail "the load succeeded with nv_mem_nc refused by the core" $(figures)
	wait "$pid_free"
	[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
	loaded $REL_MOD && fail "the module stayed loaded after a failed init" $(figures)
	! since_mark_has "invalidate: unknown registration handle" ||
		fail "the free callback called the core's invalidate with a client handle unregistered under it" $(figures)
	since_mark_has "the load failed \(.*\): waiting for 1 registrations" ||
		fail "init did not wait for the registration whose callback was in the core" $(figures)
	st fault-clear >/dev/null
	st delay "" 0 >/dev/null
	# shellcheck disable=SC2046
	load $REL_MOD $(client_params)
	_lc=$(st leak-check) || fail "load_fails_invalidating left something behind: $_lc" $(figures)
	REL_RACES=$((REL_RACES + 1))
	REL_OPS=$((REL_OPS + 6))
}

# load_fails_live: see the header.
load_fails_live() {
	[ "$pers" = 0 ] && [ "$client" = rs ] || fail "load_fails_live needs pers=0 and our module"
	if [ "$variant" = invalidating ]; then
		load_fails_invalidating
		return
	fi
	i=0
	while [ $i -lt "$rounds" ]; do
		load_failing_with_mr 6000
		# both unpins fail: the core releases, the pin stays
		st fault put_pages 1 EIO 2 >/dev/null
		st mr-dereg "$mr" >/dev/null || fail "dereg failed" $(figures)
		# init fails now: it must wait for the registration left pinned
		n=0
		while kill -0 "$pid_load" 2>/dev/null &&
			! since_mark_has "the load failed \(.*\): waiting for" && [ $n -lt 300 ]; do
			usleep 50000
			n=$((n + 1))
		done
		# the callback runs in our module: loaded, or freed under it
		st gpu-free "$va" >/dev/null || fail "cudaFree failed" $(figures)
		wait "$pid_load"
		[ "$(bg_rc load)" != 0 ] ||
			fail "the load succeeded with nv_mem_nc refused by the core" $(figures)
		loaded $REL_MOD && fail "the module stayed loaded after a failed init" $(figures)
		since_mark_has "the load failed \(.*\): waiting for 1 registrations" ||
			fail "round $i: init returned while a registration was alive" $(figures)
		st fault-clear >/dev/null
		st delay "" 0 >/dev/null
		# shellcheck disable=SC2046
		load $REL_MOD $(client_params)
		_lc=$(st leak-check) || fail "round $i left something behind: $_lc" $(figures)
		REL_RACES=$((REL_RACES + 1))
		REL_OPS=$((REL_OPS + 6))
		i=$((i + 1))
	done
}

EXTRA=
case "$window" in
release_in_invalidation) release_in_invalidation ;;
free_vs_dereg) free_vs_dereg ;;
free_during_unmap) free_during_unmap ;;
free_in_dereg_unlocked) free_in_dereg_unlocked ;;
free_in_get_pages) free_during_reg get_pages p2p_get_pages ;;
free_in_dma_map) free_during_reg dma_map p2p_dma_map ;;
free_after_provider_call) free_during_reg p2p_get_pages_done p2p_dma_map_done ;;
rmmod_during_reg) rmmod_during_reg ;;
acquire_while_going) acquire_while_going ;;
teardown_races) teardown_races ;;
load_fails_live) load_fails_live ;;
*) fail "unknown window $window" ;;
esac
st delay "" 0 >/dev/null
log "delays taken: $(( $(ctr delays_taken) - delays0 ))"
no_cleared_client_read
rel_no_splats
settle_idle
# A full kmemleak pass where the free callback raced a release (the suite's
# final scan covers the others).
case "$window,$variant" in
free_vs_dereg,* | release_in_invalidation,dereg_locked | release_in_invalidation,invalidate_unlocked) kmemleak_check ;;
*) kmemleak_check light ;;
esac
# shellcheck disable=SC2086
rel_pass $EXTRA $(windows_figures)
