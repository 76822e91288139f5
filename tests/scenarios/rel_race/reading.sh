# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: what dma_map does while a free callback would wait for
# it.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   reading_allocates  registrations whose dma_map reads the new mapping
#       (the phase a free callback waits for, holding the driver lock)
#       must not allocate memory there: reclaim may wait for that lock.
#       The module's test build shows the phase to lockdep as a lock
#       ordered after reclaim, so any allocation inside it is a circular
#       dependency report. Run with coalesce_sg=1 (the table's size is
#       known only from the addresses) and 0; test build only (rel_race.sh
#       loads it), on a lockdep kernel.

reading_allocates() {
	lockdep_alive || fail "lockdep is off (an earlier report in this boot): the window cannot be judged" $(figures)
	i=0
	while [ $i -lt "$rounds" ]; do
		# a contiguous run and a split one: coalesced into few entries
		alloc_reg 512K 0 512K
		st hca-write "$mr" 0 64K seed:$i >/dev/null || fail "DMA through the MR" $(figures)
		[ "$(splats_so_far)" = 0 ] ||
			fail "round $i: lockdep saw dma_map allocate while a free callback would wait for it" $(figures)
		finish_round "$va" "$mr"
		REL_RACES=$((REL_RACES + 1))
		i=$((i + 1))
	done
	lockdep_alive || fail "lockdep turned itself off: a report" $(figures)
}
