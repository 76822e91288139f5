#!/bin/sh
# One cell of the lock-order matrix (issue 5): cudaFree racing the
# deregistration of an MR, for a core generation x peerdirect_support, with
# persistent_api_support=0 (the invalidating nv_mem client takes the MRs).
#   rel_lockorder.sh gen=modern|mofed51|legacy pds=0|1
# Expected (CONTRACT 1.5): lockdep reports the inversion of the provider's
# driver mutex and the core's per-MR mapping lock exactly where the core
# calls dma_unmap/put_pages under its mapping lock, i.e. everywhere except
# the modern core with a client that opted in (pds=0). The legacy core with
# pds=0 would read the extended tail as function pointers: the load must be
# refused with a clear message.
#
# Both lock orders are taken deterministically, one after the other on two
# MRs (cudaFree: driver mutex -> free callback -> invalidate -> mapping lock;
# ibv_dereg_mr: mapping lock -> put_pages -> driver mutex), which is what
# lockdep needs to see the cycle without the VM actually deadlocking. Where
# no report is expected, the two operations then also race for real on the
# same MR, many rounds, and lockdep must still be validating at the end.
# The suite of an expected cell declares
#   expect_splat lockdep "possible circular locking dependency"
# and runs nothing else, so the report can hide no other splat.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
pers=0

case "$gen,$pds" in
modern,0) expect=clean ;;
legacy,0) expect=refused ;;
modern,1 | mofed51,0 | mofed51,1 | legacy,1) expect=inversion ;;
*) fail "no matrix cell gen=$gen pds=$pds" ;;
esac
log "matrix cell gen=$gen peerdirect_support=$pds: expected $expect"

if [ "$expect" = refused ]; then
	stack_up_fixtures
	# shellcheck disable=SC2046
	insmod_refused "legacy core, peerdirect_support=0" $REL_MOD $(client_params)
	[ -d /sys/kernel/mm/memory_peers/nv_mem ] &&
		fail "nv_mem is still published after the refused load" $(figures)
	[ "$(ctr clients_registered)" = 0 ] ||
		fail "a client stayed registered after the refused load" $(figures)
	since_mark | grep "$REL_MOD" | grep -q "peerdirect_support=1" ||
		fail "the module's refusal does not tell a legacy core's user to load with peerdirect_support=1" $(figures)
	log "refusal explained by: $(since_mark | grep -E 'nvidia_peermem_rs|peerdirect_sim' | tr '\n' ' ')"
	stack_down
	rel_pass cell="$gen/pds=$pds" expected=refused lockdep=not-loaded
fi

lockdep_alive || fail "lockdep is already off before the cell ran (an earlier report?)"
stack_up
mark

# reg_mr SIZE: sets va, mr; the invalidating client must take it.
reg_mr() {
	_o=$(st gpu-alloc "$1") || fail "gpu-alloc: $_o" $(figures)
	va=$(sval va "$_o")
	_o=$(st mr-reg "$va" "$1") || fail "mr-reg: $_o" $(figures)
	mr=$(sval mr "$_o")
	[ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not the invalidating nv_mem" $(figures)
	REL_OPS=$((REL_OPS + 2))
}

# Free path first (driver mutex -> mapping lock), then a dereg (mapping lock
# -> put_pages -> driver mutex where the core unmaps under the lock).
reg_mr 128K
va_a=$va
mr_a=$mr
reg_mr 128K
va_b=$va
mr_b=$mr
st gpu-free "$va_a" >/dev/null || fail "cudaFree" $(figures)
state=$(st mr-query "$mr_a")
[ "$(sval state "$state")" = invalidated ] || fail "cudaFree did not invalidate the MR ($state)" $(figures)
st mr-dereg "$mr_b" >/dev/null || fail "dereg" $(figures)
st mr-dereg "$mr_a" >/dev/null || fail "dereg of the invalidated MR" $(figures)
st gpu-free "$va_b" >/dev/null || fail "cudaFree" $(figures)
REL_OPS=$((REL_OPS + 5))
REL_RACES=1

if [ "$expect" = clean ]; then
	out=$(st race free dereg --iters 100 --size 128K --jitter-us 300 2>/tmp/race.err)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG race: /'
	last=$(echo "$out" | tail -n 1)
	[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] || fail "race free dereg: $last" $(figures)
	REL_RACES=$((REL_RACES + $(sval races "$last")))
	REL_OPS=$((REL_OPS + 400))
fi

report=$(since_mark | grep -c "possible circular locking dependency")
if [ "$expect" = inversion ]; then
	[ "$report" -ge 1 ] || fail "lockdep did not report the inversion this core has" $(figures) lockdep=clean
	# The report must be about the two locks of the contract.
	rep=$(since_mark | sed -n '/possible circular locking dependency/,/other info that might help/p')
	echo "$rep" | grep -q "mapping_lock" || fail "the lockdep report does not name the mapping lock" $(figures)
	echo "$rep" | grep -q "driver_lock" || fail "the lockdep report does not name the driver mutex" $(figures)
	REL_EXPECTED_RE='possible circular locking dependency'
	verdict=reported
else
	[ "$report" = 0 ] || fail "lockdep reported an inversion where the contract says there is none" $(figures)
	lockdep_alive || fail "lockdep turned itself off (it reported something)" $(figures)
	verdict=clean
fi
settle_idle
log "MATRIX gen=$gen peerdirect_support=$pds expected=$expect lockdep=$verdict"
rel_pass cell="$gen/pds=$pds" expected="$expect" lockdep="$verdict"
