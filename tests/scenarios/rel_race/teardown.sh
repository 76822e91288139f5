# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: the module's other teardown windows.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   teardown_races     rmmod while a free callback runs, rmmod while a dereg
#       is inside put_pages, a load failing halfway while the core calls in.

# rmmod_while_callback_try MS: teardown_races' a), cudaFree's invalidation
# held MS ms in the core. Returns 1, with nothing of the try left, when the
# callback ended before rmmod was tried and refused (the window was missed).
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
			# at most 16 s: a task asleep 30 s is reported hung
			held_window 4 8000 16000 "the free callback ended before rmmod was refused" rmmod_while_callback_try
		fi
		# b) A module unloaded while the deregistration was still
		# inside put_pages would fail the deregistration or report a
		# splat; an rmmod that succeeded with neither came after the
		# put ended (a host too loaded to keep the window): that try
		# runs again with the window doubled, four such tries fail.
		_ms=3000
		_try=0
		while :; do
			alloc_reg 256K 0 128K
			simtest_to d0 counters delays_taken
			st delay p2p_put_pages $_ms 1 >/dev/null
			bg_run dereg st mr-dereg "$mr"
			wait_delay "$d0"
			mark
			if ! rmmod $REL_MOD 2>/tmp/rmmod.err; then
				loaded $REL_MOD || fail "module gone after a refused rmmod while a deregistration is inside put_pages" $(figures)
				log "rmmod refused while a deregistration is inside put_pages: $(cat /tmp/rmmod.err)"
				REL_RACES=$((REL_RACES + 1))
				break
			fi
			wait "$pid_dereg"
			if [ "$(bg_rc dereg)" != 0 ] || [ "$(splats_so_far)" != 0 ]; then
				fail "rmmod succeeded while a deregistration is inside put_pages" $(figures)
			fi
			_try=$((_try + 1))
			[ $_try -lt 4 ] ||
				fail "the deregistration was out of put_pages before rmmod in $_try tries: the window was never held" $(figures)
			log "try $_try: the deregistration left put_pages before rmmod ran; again with a $((_ms * 2)) ms window"
			st gpu-free "$va" >/dev/null
			st delay "" 0 >/dev/null
			# shellcheck disable=SC2046
			load $REL_MOD $(client_params)
			_ms=$((_ms * 2))
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
				while [ $n -lt $((60 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ] && [ ! -e /tmp/load.done ]; do
					simtest_to o mr-reg "$va" 128K && st mr-dereg "$(sval mr "$o")" >/dev/null
					nap 0.03
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
		simtest_to _lc leak-check || fail "teardown round $i left something behind: $_lc" $(figures)
		REL_RACES=$((REL_RACES + 3))
		REL_OPS=$((REL_OPS + 10))
		i=$((i + 1))
	done
}
