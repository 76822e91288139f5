# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: cudaFree while a registration or a deregistration is
# held inside the core or the provider.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   free_in_dereg_unlocked  cudaFree while a deregistration sits between
#       dropping the mapping lock and calling dma_unmap
#       ("core_dereg_unlocked"; opted-in client on the modern core).
#   free_vs_dereg      cudaFree and ibv_dereg_mr of the same MR started
#       together from two threads, many rounds (simtest race free dereg).
#   free_in_get_pages  cudaFree while the registration sits between acquire
#       and get_pages ("get_pages") or inside the provider's get_pages
#       ("p2p_get_pages"). Our module pins once, in acquire, and get_pages
#       takes that pin: its provider get_pages is acquire's,
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
#       variant=put: the deregistration's dma_unmap fails
#       (fault dma_unmap_pages 1 EIO), the mapping is kept for a retry, and
#       put_pages unmaps it before it unpins: the cudaFree lands while that
#       unmap is inside the provider, which the callback must wait for too.

free_in_dereg_unlocked() {
	i=0
	missed=0
	while [ $i -lt "$rounds" ]; do
		alloc_reg 256K 4096 200K
		# the core's counter of invalidations that found a deregistration
		# between its unlock and its dma_unmap: the deregistration is held
		# there until the cudaFree's invalidation found the MR; a round
		# that still missed it is run again
		simtest_to w0 counters win_dereg_unlocked
		simtest_to d0 counters delays_taken
		simtest_to n0 counters invalidations_found
		st delay core_dereg_unlocked $GATE_MS 1 >/dev/null
		bg_run dereg st mr-dereg "$mr"
		await_delay "$d0" || fail "the deregistration never reached the core_dereg_unlocked window" $(figures)
		bg_run free st gpu-free "$va"
		release_when core_dereg_unlocked counter_moved invalidations_found "$n0" || :
		wait "$pid_free"
		[ "$(bg_rc free)" = 0 ] || fail "cudaFree during the deregistration failed: $(cat /tmp/bg.free)" $(figures)
		wait "$pid_dereg"
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		st delay "" 0 >/dev/null
		REL_OPS=$((REL_OPS + 2))
		simtest_to _lc leak-check || fail "round $i left something behind: $_lc" $(figures)
		simtest_to _w counters win_dereg_unlocked
		if [ "$_w" = "$w0" ]; then
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
		simtest_to d0 counters delays_taken
		# variant=put: the first unmap fails before the delay point, the
		# one inside put_pages is held
		[ "$variant" = put ] && st fault dma_unmap_pages 1 EIO >/dev/null
		st delay p2p_dma_unmap $GATE_MS 1 >/dev/null
		bg_run dereg st mr-dereg "$mr"
		await_delay "$d0" || fail "the deregistration never reached the unmap window" $(figures)
		# The unmap is held until the free callback waits for it (our
		# module counts that wait as it begins), or for another client
		# until its callback has begun.
		if [ "$client" = rs ]; then
			u0=$(free_waited_for_unmap)
			bg_run free st gpu-free "$va"
			release_when p2p_dma_unmap free_waited_for_unmap_since "$u0" ||
				fail "the free callback did not wait for the unmap inside the provider" $(figures)
		else
			simtest_to c0 counters free_callbacks_begun
			bg_run free st gpu-free "$va"
			release_when p2p_dma_unmap counter_moved free_callbacks_begun "$c0" || :
		fi
		wait "$pid_free"
		[ "$(bg_rc free)" = 0 ] || fail "cudaFree during the unmap failed: $(cat /tmp/bg.free)" $(figures)
		wait "$pid_dereg"
		st delay "" 0 >/dev/null
		st fault-clear >/dev/null
		[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
		simtest_to _dt counters delays_taken
		[ $((_dt - d0)) = 1 ] || fail "the unmap window was not reached" $(figures)
		REL_OPS=$((REL_OPS + 3))
		REL_RACES=$((REL_RACES + 1))
		simtest_to _lc leak-check || fail "round $i left something behind: $_lc" $(figures)
		i=$((i + 1))
	done
	rechecks=0
	if [ "$client" = rs ]; then
		waited=$(free_waited_for_unmap)
		rechecks=$(sed -n 's/^free_wait_rechecks //p' /sys/kernel/debug/nvidia_peermem_rs/stats)
		# the callback (holding the driver lock) sleeps until
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
	simtest_to out race free dereg --iters "$iters" --size 192K --jitter-us 300 2>/tmp/race.err
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
				simtest_to _o gpu-alloc 256K || fail "gpu-alloc: $_o" $(figures)
				kv_set va va "$_o"
				simtest_to w0 counters "$win"
				# Into the held call: the provider's get_pages points
				# are passed twice where acquire probes with a pin
				# first and get_pages pins again (NVIDIA's; the
				# reference client asks the sim, ours keeps acquire's
				# pin), the others once; the passes before the last go
				# on at once. The last is held until the cudaFree began.
				_n=1
				case "$point,$client" in
				p2p_get_pages,nv* | p2p_get_pages_done,nv*) _n=2 ;;
				esac
				st delay "$point" $GATE_MS $_n >/dev/null
				simtest_to d0 counters delays_taken
				bg_run reg st mr-reg $((va + 512)) 128K
				_k=1
				while [ $_k -lt $_n ]; do
					await_delay "$d0" $_k || fail "$point: the registration never reached the delay ($_k)" $(figures)
					st release "$point" >/dev/null
					_k=$((_k + 1))
				done
				await_delay "$d0" $_n || fail "$point: the registration never reached the delay ($_n)" $(figures)
				usleep $((i * 30000))
				simtest_to s0 counters frees_started
				bg_run free st gpu-free "$va"
				release_when "$point" counter_moved frees_started "$s0" || :
				wait "$pid_free"
				[ "$(bg_rc free)" = 0 ] || fail "cudaFree during registration failed: $(cat /tmp/bg.free)" $(figures)
				wait "$pid_reg"
				st delay "" 0 >/dev/null
				REL_OPS=$((REL_OPS + 3))
				out=$(cat /tmp/bg.reg)
				reached=0
				simtest_to _w counters "$win"
				[ "$_w" = "$w0" ] || reached=1
				if [ "$(bg_rc reg)" = 0 ]; then
					kv_set mr mr "$out"
					simtest_to q mr-query "$mr"
					kv_set state state "$q"
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
				simtest_to _lc leak-check || fail "$point round $i left something behind: $_lc" $(figures)
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
