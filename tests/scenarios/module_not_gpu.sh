#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A range that is not GPU memory is "not mine": acquire declines it, the
# core refuses the MR, nothing is pinned, no registration is left.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
declined0=$(pm_stat declined)
for range in "0x10000 4096" "0x7fff00001000 1M" "0xffffffffffff0000 0x20000"; do
	# shellcheck disable=SC2086
	if simtest_to out mr-reg $range; then
		fail "MR registered on non-GPU range $range: $out"
	fi
	log "mr-reg $range: $out"
done
# A range that starts in GPU memory but runs past the allocation.
sim gpu-alloc 128K
kv_set va va "$out"
if simtest_to out mr-reg "$va" 256K; then
	fail "MR registered past the end of the allocation: $out"
fi
# The wrapping range never reaches a client (the core refuses it); each of
# the other three is offered to every client, nv_mem_nc included.
clients=1
[ "$persistent_api_support" = 0 ] && clients=2
declined=$(($(pm_stat declined) - declined0))
[ "$declined" = $((3 * clients)) ] || fail "acquire declined $declined times, want $((3 * clients))"
[ "$(pm_stat acquired)" = 0 ] || fail "acquire said mine $(pm_stat acquired) times"
sim gpu-free "$va"
no_leaks "after the refused MRs"
finish_clean
pass declined=$declined
