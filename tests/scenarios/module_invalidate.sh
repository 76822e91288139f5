#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# cudaFree with a live registration, then deregistration.
#   persistent_api_support=0: the invalidating nv_mem takes the MR; the free
#     callback invalidates it through the core (the HCA loses access) and
#     frees the mapping and page table; dereg then only releases.
#   persistent_api_support=1: the pin is persistent; the memory stays and
#     the HCA keeps working until dereg.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
sim gpu-alloc 512K
va=$(kv va "$out")
sim gpu-fill "$va" 512K seed:5
sim mr-reg $((va + 100)) 200000
mr=$(kv mr "$out")
sim hca-check "$mr" 0 200000 seed:5 cpu 100
inv0=$(pm_stat invalidations)
sim gpu-free "$va"
if [ "$persistent_api_support" = 0 ]; then
	sim mr-query "$mr"
	echo "$out" | grep -q "state=invalidated" || fail "MR not invalidated by cudaFree: $out"
	out=$(simtest hca-check "$mr" 0 4096 seed:5 cpu 100) && fail "HCA still reads freed memory"
	[ $(($(pm_stat invalidations) - inv0)) = 1 ] || fail "invalidations counter did not move by one"
	[ "$(pm_stat core_invalidations)" = 1 ] || fail "core_invalidations $(pm_stat core_invalidations)"
	grep -q "state=invalidated" "$PM_DEBUGFS"/registrations || fail "debugfs: $(cat "$PM_DEBUGFS"/registrations)"
	[ "$(pm_stat pinned_bytes)" = 0 ] || fail "pinned_bytes $(pm_stat pinned_bytes) after invalidation"
	# The MR is still registered (invalidated), so leak-check exits 1.
	leak=$(simtest leak-check 2>/dev/null)
	[ "$(kv page_tables_live "$leak")" = 0 ] || fail "page table not freed by the free callback ($leak)"
	[ "$(kv dma_mappings_live "$leak")" = 0 ] || fail "mapping not freed by the free callback ($leak)"
else
	sim mr-query "$mr"
	echo "$out" | grep -q "state=live" || fail "persistent MR lost by cudaFree: $out"
	sim hca-check "$mr" 0 200000 seed:5 cpu 100
	[ "$(pm_stat invalidations)" = "$inv0" ] || fail "a persistent pin was invalidated"
fi
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 1 ] || fail "refcnt $(cat /sys/module/nvidia_peermem_rs/refcnt), want 1"
sim mr-dereg "$mr"
no_leaks "after deregistration"
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 0 ] || fail "refcnt not back to 0"
invalidations=$(pm_stat invalidations)
skipped=$(pm_stat skipped_after_invalidation)
finish_clean
pass invalidations="$invalidations" skipped_unmaps="$skipped"
