# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: the release of a registration while its free callback is
# inside the core.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
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
#       On the legacy core (4.9) that window never opens: the release
#       comes earlier, inside the invalidation, before the core returns;
#       the counters must show that instead.

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
		simtest_to w0 counters "$win"
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
			simtest_to d0 counters delays_taken
			st delay $point $GATE_MS 1 >/dev/null
			bg_run free st gpu-free "$va"
			await_delay "$d0" || fail "cudaFree never reached the $point window" $(figures)
			ovl=0
			if release_waits; then
				# Our release waits for the callback to come out of
				# the core: the deregistration ends after it. The
				# cudaFree is held until the release waits.
				rw0=$(release_waited)
				bg_run dereg st mr-dereg "$mr"
				release_when $point release_waited_since "$rw0" || :
				wait "$pid_free"
				wait "$pid_dereg"
				[ "$(bg_rc dereg)" = 0 ] || fail "dereg during the invalidation failed: $(cat /tmp/bg.dereg)" $(figures)
				[ "$(release_waited)" -gt "$rw0" ] && ovl=1
			else
				# The cudaFree is held until the deregistration
				# returned (dereg_done_free_held sets ovl).
				bg_run dereg st mr-dereg "$mr"
				release_when $point dereg_done_free_held || :
				wait "$pid_dereg"
				[ "$(bg_rc dereg)" = 0 ] || fail "dereg during the invalidation failed: $(cat /tmp/bg.dereg)" $(figures)
				wait "$pid_free"
			fi
			[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
		else
			# Deregistration first, holding the mapping lock; cudaFree's
			# invalidation waits for it (held until the invalidation is
			# inside the core), and release() runs while the free
			# callback is still inside the invalidation.
			simtest_to d0 counters delays_taken
			simtest_to f0 counters num_free_callbacks
			st delay core_dereg_locked $GATE_MS 1 >/dev/null
			bg_run dereg st mr-dereg "$mr"
			await_delay "$d0" || fail "the deregistration never reached the core_dereg_locked window" $(figures)
			bg_run free st gpu-free "$va"
			release_when core_dereg_locked counter_moved num_free_callbacks "$f0" || :
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
		simtest_to _lc leak-check || fail "round $i left something behind: $_lc" $(figures)
		if [ "$v" = dereg_locked ]; then
			reached=0
			simtest_to _w counters "$win"
			[ "$_w" = "$w0" ] || reached=1
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
	if [ "$variant" = invalidate_unlocked ] && [ "$gen" = legacy ]; then
		# MLNX_OFED 4.9 has no such window: its mlx5 releases the umem
		# from inside the core's invalidate (client mutex held), so the
		# client's release runs inside its own free callback, before the
		# core returns, and the deregistration only waits for that.
		n=$(windows_reached invalidate_unlocked)
		[ "$n" = 0 ] ||
			fail "release ran between the invalidation's unlock and its return $n times: 4.9 releases from inside the invalidation" $(figures)
		n=$(windows_reached release_in_invalidation)
		[ "$n" -gt 0 ] ||
			fail "release never ran inside the invalidation, as 4.9's does" $(figures)
		log "release inside the invalidation (4.9): $n"
	elif [ "$variant" = invalidate_unlocked ]; then
		n=$(windows_reached invalidate_unlocked)
		[ "$n" -gt 0 ] ||
			fail "the window was never open: release never ran while an invalidation was between unlock and return" $(figures)
	fi
}
