#!/bin/sh
# Race windows forced open with the fixtures' delay points.
#   rel_race.sh window=W [generation=modern] [peerdirect_support=0]
#               [persistent_api_support=0] [rounds=N] [variant=V]
# W, one family of windows a file of rel_race/ (each file says what its
# windows do):
#   release.sh   release_in_invalidation
#   free.sh      free_in_dereg_unlocked free_vs_dereg free_in_get_pages
#                free_in_dma_map free_after_provider_call free_during_unmap
#   rmmod.sh     rmmod_during_reg acquire_while_going callback_tail_unload
#   teardown.sh  teardown_races
#   load.sh      load_fails_live
#   reading.sh   reading_allocates
# Every round must end with both operations finished (no hang), the MR gone,
# the memory freed; at the end nothing is pinned, mapped or registered, the
# module refcount is idle and kmemleak finds nothing.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
window=$rel_arg_window
variant=${rel_arg_variant:-both}
rounds=${rel_arg_rounds:-6}
[ -n "$window" ] || fail "window= missing"

# The windows inside our module's own code are held open by the delay
# points of its test build (kmod/test_delay.rs), which these load instead.
case "$window,$variant" in
callback_tail_unload,* | load_fails_live,declining | reading_allocates,*)
	[ "$client" = rs ] || fail "window=$window variant=$variant holds our module's own window: client=rs only"
	[ -f "/fixtures/test-delays/$REL_MOD.ko" ] ||
		fail "window=$window variant=$variant needs the module's test build (/fixtures/test-delays, tests/build-all.sh)"
	# shellcheck disable=SC2034 # read by lib.sh mod_path
	PM_TEST_BUILD=1
	;;
esac
stack_up
simtest_to delays0 counters delays_taken
windows_mark

. /scenarios/rel_race/common.sh

# The family of the window, then its run: the window's function, or the
# function shared by the windows of one race at different points.
case "$window" in
release_in_invalidation) family=release ;;
free_in_dereg_unlocked | free_vs_dereg | free_in_get_pages | free_in_dma_map | \
	free_after_provider_call | free_during_unmap) family=free ;;
rmmod_during_reg | acquire_while_going | callback_tail_unload) family=rmmod ;;
teardown_races) family=teardown ;;
load_fails_live) family=load ;;
reading_allocates) family=reading ;;
*) fail "unknown window $window" ;;
esac
# shellcheck disable=SC1090
. "/scenarios/rel_race/$family.sh"
EXTRA=
case "$window" in
free_in_get_pages) free_during_reg get_pages p2p_get_pages ;;
free_in_dma_map) free_during_reg dma_map p2p_dma_map ;;
free_after_provider_call) free_during_reg p2p_get_pages_done p2p_dma_map_done ;;
*) "$window" ;;
esac
st delay "" 0 >/dev/null
simtest_to _dt counters delays_taken
log "delays taken: $((_dt - delays0))"
no_cleared_client_read
rel_no_splats
settle_idle
# Leaks: the boot's final scan finds them and names the scenario that
# allocated each object (by its allocation jiffies); a scan of its own here
# only where the boot asks for one (peermem.kmemleak=each: make soak).
kmemleak_check light
# shellcheck disable=SC2086
rel_pass $EXTRA $(windows_figures)
