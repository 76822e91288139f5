#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# cudaFree with a live registration, then deregistration.
#   persistent_api_support=0: the invalidating nv_mem takes the MR; the free
#     callback invalidates it through the core (the HCA loses access) and
#     frees the mapping and page table; dereg then only releases. On the
#     legacy core (MLNX_OFED 4.9) the core's invalidate releases the whole
#     registration from inside the callback (dma_unmap, put_pages and
#     release, under its client mutex): nothing of it is left for dereg.
#   persistent_api_support=1: the pin is persistent; the memory stays and
#     the HCA keeps working until dereg.
#   when=before_activation: the cudaFree comes while the HCA has the umem
#     but has not yet activated its invalidation (delay point
#     hca_activate). 4.9 marks the MR without waiting, and the activation,
#     so the registration, fails (EINVAL) after dma_unmap, put_pages and
#     release; the later cores hold the cudaFree's invalidation until the
#     activation (mapping lock), then invalidate the new MR.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

# await_delay_taken D0: up to 10 s for delays_taken to pass D0
await_delay_taken() {
	_n=0
	while simtest_to _dt counters delays_taken; [ "$_dt" -le "$1" ]; do
		_n=$((_n + 1))
		[ $_n -le $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ] || fail "the registration never reached hca_activate"
		nap 0.1
	done
}

load_sim_stack generation="$generation"
load_module
sim gpu-alloc 512K
kv_set va va "$out"
sim gpu-fill "$va" 512K seed:5
inv0=$(pm_stat invalidations)
if [ "$when" = before_activation ]; then
	[ "$persistent_api_support" = 0 ] || fail "when=before_activation needs persistent_api_support=0"
	simtest_to d0 counters delays_taken
	sim delay hca_activate 3000 1
	(simtest mr-reg $((va + 100)) 200000 >/tmp/reg.out 2>&1
	 echo "rc=$?" >>/tmp/reg.out) &
	pid_reg=$!
	await_delay_taken "$d0"
	sim gpu-free "$va"
	reg_done=$(sed -n 's/^rc=//p' /tmp/reg.out)
	wait "$pid_reg"
	reg_rc=$(sed -n 's/^rc=//p' /tmp/reg.out)
	sim delay "" 0
	if [ "$generation" = legacy ]; then
		[ -z "$reg_done" ] || fail "the cudaFree waited for the registration in flight (4.9 does not)"
		[ "$reg_rc" != 0 ] || fail "the registration succeeded after an invalidation before its activation: $(cat /tmp/reg.out)"
		grep -q "EINVAL" /tmp/reg.out ||
			fail "the registration failed otherwise than with EINVAL: $(cat /tmp/reg.out)"
		[ $(($(pm_stat invalidations) - inv0)) = 1 ] || fail "invalidations counter did not move by one"
		no_leaks "after the failed registration"
		[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 0 ] || fail "refcnt $(cat /sys/module/nvidia_peermem_rs/refcnt) after the failed registration"
		invalidations=$(pm_stat invalidations)
		finish_clean
		pass reg_rc="$reg_rc" invalidations="$invalidations"
	fi
	[ -n "$reg_done" ] || fail "the cudaFree did not wait for the registration in flight"
	[ "$reg_rc" = 0 ] || fail "the registration failed: $(cat /tmp/reg.out)"
	kv_set mr mr "$(head -n 1 /tmp/reg.out)"
else
	sim mr-reg $((va + 100)) 200000
	kv_set mr mr "$out"
	sim hca-check "$mr" 0 200000 seed:5 cpu 100
	simtest_to rel0 counters win_release_in_invalidation
	sim gpu-free "$va"
fi
refcnt=1
if [ "$persistent_api_support" = 0 ]; then
	sim mr-query "$mr"
	echo "$out" | grep -q "state=invalidated" || fail "MR not invalidated by cudaFree: $out"
	simtest_to out hca-check "$mr" 0 4096 seed:5 cpu 100 && fail "HCA still reads freed memory"
	[ $(($(pm_stat invalidations) - inv0)) = 1 ] || fail "invalidations counter did not move by one"
	[ "$(pm_stat core_invalidations)" = 1 ] || fail "core_invalidations $(pm_stat core_invalidations)"
	[ "$(pm_stat pinned_bytes)" = 0 ] || fail "pinned_bytes $(pm_stat pinned_bytes) after invalidation"
	if [ "$generation" = legacy ]; then
		# 4.9: released inside the module's own free callback
		[ "$(pm_live)" = 0 ] || fail "the registration outlived the invalidation (4.9 releases it inside): $(cat "$PM_DEBUGFS"/registrations)"
		simtest_to _rel counters win_release_in_invalidation
		[ "$_rel" -gt "$rel0" ] ||
			fail "release did not run inside the invalidation"
		# the MR itself is the HCA's until dereg (the core's count of
		# MRs may still hold it): the provider's and ours only
		simtest_to leak leak-check 2>/dev/null
		for k in pages_pinned page_tables_live dma_mappings_live; do
			[ "$(kv $k "$leak")" = 0 ] || fail "$k left after the invalidation ($leak)"
		done
		[ "$(pm_stat dma_mappings)" = 0 ] || fail "module still counts $(pm_stat dma_mappings) mappings"
		refcnt=0
	else
		grep -q "state=invalidated" "$PM_DEBUGFS"/registrations || fail "debugfs: $(cat "$PM_DEBUGFS"/registrations)"
		# The MR is still registered (invalidated), so leak-check exits 1.
		simtest_to leak leak-check 2>/dev/null
		[ "$(kv page_tables_live "$leak")" = 0 ] || fail "page table not freed by the free callback ($leak)"
		[ "$(kv dma_mappings_live "$leak")" = 0 ] || fail "mapping not freed by the free callback ($leak)"
	fi
else
	sim mr-query "$mr"
	echo "$out" | grep -q "state=live" || fail "persistent MR lost by cudaFree: $out"
	sim hca-check "$mr" 0 200000 seed:5 cpu 100
	[ "$(pm_stat invalidations)" = "$inv0" ] || fail "a persistent pin was invalidated"
fi
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = $refcnt ] || fail "refcnt $(cat /sys/module/nvidia_peermem_rs/refcnt), want $refcnt"
sim mr-dereg "$mr"
no_leaks "after deregistration"
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 0 ] || fail "refcnt not back to 0"
invalidations=$(pm_stat invalidations)
skipped=$(pm_stat skipped_after_invalidation)
finish_clean
pass invalidations="$invalidations" skipped_unmaps="$skipped"
