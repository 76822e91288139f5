# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: the module's other teardown windows.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   teardown_races     rmmod while a free callback runs, rmmod while a dereg
#       is inside put_pages, a load failing halfway while the core calls in.

# rmmod_while_callback_try MS: teardown_races' a), cudaFree's invalidation
# held in the core until rmmod was tried (at most MS ms). Returns 1, with
# nothing of the try left, when the callback ended before rmmod was tried
# and refused (the window was missed).
rmmod_while_callback_try() {
	alloc_reg 256K 0 128K
	simtest_to d0 counters delays_taken
	st delay core_invalidate "$1" 1 >/dev/null
	bg_run free st gpu-free "$va"
	wait_delay "$d0"
	if release_waits; then
		# Our release waits for the callback to come out of the core: the
		# deregistration runs beside it.
		rw0=$(release_waited)
		bg_run dereg st mr-dereg "$mr"
		_n=0
		while [ "$(release_waited)" = "$rw0" ] && [ $_n -lt $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; do
			nap 0.02
			_n=$((_n + 1))
		done
		[ "$(release_waited)" != "$rw0" ] ||
			fail "the release never waited for the free callback inside the core" $(figures)
	else
		st mr-dereg "$mr" >/dev/null || fail "dereg during the invalidation failed" $(figures)
	fi
	# The cudaFree has not returned (no rc= line yet; the background
	# subshell itself outlives it by a moment).
	_missed=0
	if [ -z "$(bg_rc free)" ]; then
		rmmod_refused "while a free callback runs"
		[ -z "$(bg_rc free)" ] || _missed=1
	else
		_missed=1
	fi
	st release core_invalidate >/dev/null
	wait "$pid_free"
	[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
	if release_waits; then
		wait "$pid_dereg"
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg during the invalidation failed: $(cat /tmp/bg.dereg)" $(figures)
	fi
	[ $_missed = 0 ]
}

# teardown_races: the module's other teardown windows, each held open. A
# host too loaded to keep a window runs that try again with a longer one;
# four misses fail.
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
		# a) only with a free callback (persistent_api_support=0)
		if [ "$pers" = 0 ]; then
			held_window 2 $GATE_MS $GATE_MS "the free callback ended before rmmod was refused" rmmod_while_callback_try
		fi
		# b) A module unloaded while the deregistration was still
		# inside put_pages (held there until rmmod was tried) would
		# fail the deregistration or report a splat; an rmmod that
		# succeeded with neither came after the put ended (its hold
		# over before rmmod ran): that try runs again, a second such
		# try fails.
		_ms=$GATE_MS
		_try=0
		while :; do
			alloc_reg 256K 0 128K
			simtest_to d0 counters delays_taken
			st delay p2p_put_pages $_ms 1 >/dev/null
			bg_run dereg st mr-dereg "$mr"
			wait_delay "$d0"
			mark
			if ! rmmod $REL_MOD 2>/tmp/rmmod.err; then
				st release p2p_put_pages >/dev/null
				loaded $REL_MOD || fail "module gone after a refused rmmod while a deregistration is inside put_pages" $(figures)
				log "rmmod refused while a deregistration is inside put_pages: $(cat /tmp/rmmod.err)"
				REL_RACES=$((REL_RACES + 1))
				break
			fi
			st release p2p_put_pages >/dev/null
			wait "$pid_dereg"
			if [ "$(bg_rc dereg)" != 0 ] || [ "$(splats_so_far)" != 0 ]; then
				fail "rmmod succeeded while a deregistration is inside put_pages" $(figures)
			fi
			_try=$((_try + 1))
			[ $_try -lt 2 ] ||
				fail "the deregistration was out of put_pages before rmmod in $_try tries: the window was never held" $(figures)
			log "try $_try: the deregistration left put_pages before rmmod ran; again"
			st gpu-free "$va" >/dev/null
			st delay "" 0 >/dev/null
			# shellcheck disable=SC2046
			load $REL_MOD $(client_params)
		done
		wait "$pid_dereg"
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		st gpu-free "$va" >/dev/null
		st delay "" 0 >/dev/null
		settle_idle
		# c) only where two clients register (persistent_api_support=0)
		if [ "$pers" = 0 ] && [ "$client" = rs ]; then
			rmmod $REL_MOD || fail "rmmod of an idle module failed" $(figures)
			simtest_to _o gpu-alloc 128K || fail "gpu-alloc: $_o" $(figures)
			kv_set va va "$_o"
			mark
			# nv_mem stays listed, init held, until an acquire of
			# the loop below arrives and is held; then init goes on
			# (the core refuses nv_mem_nc) and its unwinding must wait
			# for that acquire, which goes on once it does.
			simtest_to h0 counters delays_taken
			st delay register_client_done $GATE_MS 1 >/dev/null
			st delay acquire $GATE_MS 1 >/dev/null
			st fault register_client 2 ENOMEM >/dev/null
			(
				n=0
				while [ $n -lt $((60 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ] && [ ! -e /tmp/load.done ]; do
					simtest_to o mr-reg "$va" 128K && st mr-dereg "$(sval mr "$o")" >/dev/null
					nap 0.03
					n=$((n + 1))
				done
			) >/dev/null 2>&1 &
			loop=$!
			rm -f /tmp/load.done
			# shellcheck disable=SC2046
			bg_run load modload $REL_MOD $(client_params)
			release_when register_client_done delays_taken_reached $((h0 + 2)) ||
				fail "round $i: no acquire arrived while nv_mem was listed" $(figures)
			release_when acquire load_unwinding_waits || :
			wait "$pid_load"
			[ "$(bg_rc load)" != 0 ] ||
				fail "the load succeeded with nv_mem_nc refused by the core" $(figures)
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
		simtest_to _lc leak-check || fail "teardown round $i left something behind: $_lc" $(figures)
		REL_RACES=$((REL_RACES + 3))
		REL_OPS=$((REL_OPS + 10))
		i=$((i + 1))
	done
}
