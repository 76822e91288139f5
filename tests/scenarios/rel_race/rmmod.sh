# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: rmmod while registrations are live, in flight, or on
# their way into the client.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   rmmod_during_reg   rmmod of our module while registrations are live and
#       while one is in flight; then a registration loop racing rmmod.
#   acquire_while_going  the core holds a registration right before
#       asking nv_mem while rmmod wins; the acquires (nv_mem, then nv_mem_nc)
#       run while the module is going and must take and put no reference.
#       variant=unuse also holds the client's last user between its
#       decrement and its wake-up of the waiting unregistration (the
#       simulated core freed the client under that wake-up: found by the
#       soak, fixed as the real core does it, with a completion).
#   callback_tail_unload  the free callback drops its reference while the
#       core still holds the registration, and is held right after that
#       drop (the test build's free_callback_tail, a busy-wait); the MR is
#       deregistered meanwhile, so release drops the last reference and the
#       module's, and rmmod is tried in a loop until it wins. The module's
#       memory must not be freed before the callback has left the module's
#       code: a fault in freed module text (or KASAN) otherwise. Test build
#       only (rel_race.sh loads it).

rmmod_during_reg() {
	# 1. live registrations hold the module
	alloc_reg 128K 0 128K
	r=$(refcnt)
	[ "$r" -gt "$REL_IDLE_REF" ] || fail "a live registration takes no module reference (refcnt $r)" $(figures)
	rmmod_refused "with a live registration"
	# 2. a registration in flight (sleeping before get_pages) holds it too
	simtest_to _o gpu-alloc 128K || fail "gpu-alloc: $_o" $(figures)
	kv_set va2 va "$_o"
	simtest_to d0 counters delays_taken
	st delay get_pages 2000 1 >/dev/null
	bg_run reg st mr-reg "$va2" 128K
	await_delay "$d0" || fail "the registration never reached the get_pages window" $(figures)
	rmmod_refused "with a registration in flight"
	wait "$pid_reg"
	[ "$(bg_rc reg)" = 0 ] || fail "the in-flight registration failed: $(cat /tmp/bg.reg)" $(figures)
	kv_set mr2 mr "$(cat /tmp/bg.reg)"
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
		simtest_to _o gpu-alloc 128K || fail "gpu-alloc: $_o" $(figures)
		kv_set va va "$_o"
		(
			n=0
			while [ $n -lt 15 ]; do
				simtest_to o mr-reg "$va" 128K && st mr-dereg "$(sval mr "$o")" >/dev/null
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
			nap 0.02
		done
		wait $loop
		REL_OPS=$((REL_OPS + 30 + tries))
		st gpu-free "$va" >/dev/null
		loaded $REL_MOD || load $REL_MOD $(client_params)
		simtest_to _lc leak-check || fail "rmmod race round $i left something behind: $_lc" $(figures)
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
# acquire_going_try MS: one try of an acquire_while_going round, the
# registration held right before the core asks nv_mem until rmmod waits
# for it in the core's unregistration (at most MS ms). Returns 1, with
# nothing of the try left, when the registration got past the window
# before rmmod ran: it then holds the module, and rmmod is refused
# (nothing was tested).
acquire_going_try() {
	simtest_to _o gpu-alloc 128K || fail "gpu-alloc: $_o" $(figures)
	kv_set va va "$_o"
	mark
	simtest_to d0 counters delays_taken
	st delay acquire "$1" 1 >/dev/null
	# variant=unuse: the last user of the client (in the old core, this
	# acquire) also sleeps between its decrement and its wake-up of the
	# unregistration (the soak's KASAN use-after-free).
	[ "$variant" != unuse ] || st delay client_unuse 1500 1 >/dev/null
	bg_run reg st mr-reg "$va" 128K
	# rmmod once the registration sleeps in the window (not before)
	w=0
	while simtest_to _dt counters delays_taken && [ "$_dt" = "$d0" ] && [ $w -lt $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; do
		nap 0.02
		w=$((w + 1))
	done
	# rmmod with a bounded wait: a client that accepts the acquire of a
	# going module (a module reference taken with no check) has the
	# registration complete, and the unload then waits in the core's
	# unregistration for an MR nobody will deregister
	# The held acquire goes on once rmmod waits for it in the core's
	# unregistration (or has ended). The bound: rmmod then unregisters and
	# unloads under KASAN and lockdep; 20 s tell that from a hang on any
	# host (scaled with its K).
	_rmmod_s=$(scaled_s 20)
	bg_run rmmod rmmod $REL_MOD
	release_when acquire rmmod_waits_or_ended || :
	w=0
	while kill -0 "$pid_rmmod" 2>/dev/null && [ $w -lt $((_rmmod_s * 10)) ]; do
		nap 0.1
		w=$((w + 1))
	done
	if kill -0 "$pid_rmmod" 2>/dev/null; then
		wait "$pid_reg"
		# free the unload: deregister what the going module took
		out=$(cat /tmp/bg.reg)
		[ "$(bg_rc reg)" = 0 ] && st mr-dereg "$(sval mr "$out")" >/dev/null
		wait "$pid_rmmod"
		fail "round $i: rmmod hung ${_rmmod_s} s in the core's unregistration: the going module accepted the acquire and the registration went on ($(echo "$out" | head -n 1))" $(figures)
	fi
	wait "$pid_reg"
	if [ "$(bg_rc rmmod)" != 0 ]; then
		# Refused: only a registration that got past the window before
		# rmmod ran may hold the module, and its deregistration must
		# give the reference back.
		[ "$(bg_rc reg)" = 0 ] ||
			fail "rmmod of a module with no registration failed: $(cat /tmp/bg.rmmod)" $(figures)
		st mr-dereg "$(sval mr "$(cat /tmp/bg.reg)")" >/dev/null || fail "dereg" $(figures)
		st delay "" 0 >/dev/null
		st gpu-free "$va" >/dev/null
		[ "$(refcnt)" = "$REL_IDLE_REF" ] ||
			fail "rmmod refused with refcount $(refcnt) after the only registration went: $(cat /tmp/bg.rmmod)" $(figures)
		return 1
	fi
	[ "$(bg_rc reg)" != 0 ] || fail "a registration succeeded on an unloaded client: $(cat /tmp/bg.reg)" $(figures)
	# The window was reached: the core's unregistration of nv_mem waited
	# for the acquire we held (for the client-list mutex the acquires run
	# under, as in the real core; or, if it got there before the acquire
	# took it, for the registration in flight).
	since_mark_has "unregister: waiting for the client list|unregister nv_mem: waiting for 1 registrations" ||
		fail "round $i: the acquire was not in flight during the unload" $(figures)
	simtest_to _dt counters delays_taken
	if [ "$variant" = unuse ] && [ $((_dt - d0)) -lt 2 ]; then
		fail "round $i: the last user's wake-up window (client_unuse) was not reached" $(figures)
	fi
}

# rmmod_waits_or_ended: the background rmmod waits in the core's
# unregistration for the acquire or the registration in flight, or has
# ended.
rmmod_waits_or_ended() {
	bg_done rmmod ||
		since_mark_has "unregister: waiting for the client list|unregister nv_mem: waiting for 1 registrations"
}

# acquire_while_going: see the header.
acquire_while_going() {
	i=0
	while [ $i -lt "$rounds" ]; do
		held_window 2 $GATE_MS $GATE_MS "round $i: the registration got past its window before rmmod ran" acquire_going_try
		REL_RACES=$((REL_RACES + 1))
		REL_OPS=$((REL_OPS + 3))
		st delay "" 0 >/dev/null
		st gpu-free "$va" >/dev/null
		# shellcheck disable=SC2046
		load $REL_MOD $(client_params)
		i=$((i + 1))
	done
}

# tail_unload_try MS: one try of a callback_tail_unload round, the callback
# held MS ms after its drop. Returns 1, with the module still loaded and
# nothing of the try left, when the callback came back before an rmmod won
# (the window was missed).
tail_unload_try() {
	alloc_reg 128K 0 128K
	mark
	test_delay free_callback_tail "$1"
	bg_run free st gpu-free "$va"
	await_test_delay free_callback_tail
	# the callback is held after its drop: release takes the last
	st mr-dereg "$mr" >/dev/null || fail "dereg while the callback is held failed" $(figures)
	# rmmod until it wins: the registration went with the dereg
	: >/tmp/rmmod.err
	n=0
	while loaded $REL_MOD && [ $n -lt $((600 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; do
		since_mark_has "test delay free_callback_tail: done" && break
		rmmod $REL_MOD 2>/tmp/rmmod.err && break
		nap 0.02
		n=$((n + 1))
	done
	wait "$pid_free"
	[ "$(splats_so_far)" = 0 ] || fail "round $i: a splat with the free callback in its tail at the unload" $(figures)
	[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
	since_mark_has "test delay free_callback_tail: done" ||
		fail "round $i: the held callback never came back" $(figures)
	test_delay_held free_callback_tail
	! loaded $REL_MOD || {
		log "round $i: $n rmmod tries before the callback came back, the last said: $(cat /tmp/rmmod.err)"
		return 1
	}
}

# callback_tail_unload: see the header. A host too loaded to keep the
# window (the callback came back before an rmmod won) runs the round again
# with the window doubled, up to 12 s (a longer busy-wait would trip the
# soft-lockup detector); a third miss fails.
callback_tail_unload() {
	[ "$pers" = 0 ] || fail "callback_tail_unload needs persistent_api_support=0 (a free callback)"
	i=0
	while [ $i -lt "$rounds" ]; do
		held_window 3 4000 12000 "round $i: rmmod never won while the callback was held" tail_unload_try
		REL_RACES=$((REL_RACES + 1))
		REL_OPS=$((REL_OPS + 4))
		# shellcheck disable=SC2046
		load $REL_MOD $(client_params)
		simtest_to _lc leak-check || fail "round $i left something behind: $_lc" $(figures)
		i=$((i + 1))
	done
}
