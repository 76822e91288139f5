#!/bin/sh
# One cell of the lock-order matrix (issues 5 and 12): a core generation x
# peerdirect_support x persistent_api_support, with the fixtures' core
# locking as MOFED's peer_mem.c does (the MR's mapping lock held across
# get_pages and dma_map, and for an invalidating client until the HCA
# activates the MR) and the provider's driver lock visible to lockdep
# (rm_lock_lockdep=1: stricter than the real driver, whose RM API lock is
# made of semaphores lockdep cannot see).
#   rel_lockorder.sh generation=modern|mofed51|legacy peerdirect_support=0|1 [persistent_api_support=0|1]
#
# Lockdep. Both lock orders are taken one after the other on two MRs
# (cudaFree: driver lock -> free callback -> invalidate -> mapping lock;
# registration: mapping lock -> get_pages/dma_map -> driver lock; and where
# the core unmaps under its mapping lock, ibv_dereg_mr: mapping lock ->
# put_pages -> driver lock). With an invalidating client (persistent_api_support=0) lockdep
# therefore reports the cycle on every core that has the mapping lock: the
# registration's order exists on the modern core too (class-level: all MRs
# share one lock class); the legacy core (4.9) has no such lock. With
# persistent_api_support=1 there is no invalidation, no driver lock ->
# mapping lock order, and lockdep must stay quiet.
#
# Deadlock. Whether a reported cycle can deadlock is decided by forcing a
# cudaFree into each phase of an MR (rel_lib.sh's phase_race: during
# get_pages, between get_pages and dma_map, inside dma_map, between dma_map
# and activation, live, inside a deregistration's put_pages) with a bounded
# wait: "hang" means tasks stuck in D state (a real deadlock). The client
# under test must never hang. The legacy core with peerdirect_support=0 and persistent_api_support=0 would
# read the extended tail of the invalidating nv_mem as function pointers:
# the load must be refused. With persistent_api_support=1 the client is a plain
# peer_memory_client whatever pds says (as NVIDIA's): it loads, clean.
# Lockdep reports only once a boot: a cell with persistent_api_support=0 runs last in its
# boot (after any persistent_api_support=1 cell), and its suite declares
#   expect_splat lockdep "possible circular locking dependency"
# rm_lockdep=0 (suite nvidia-vs-ours, NVIDIA's module, issue 33): the
# provider's lock stays a semaphore lockdep does not track, as the real
# driver's; lockdep's part of the cell (the core's lock order, the same for
# every invalidating client) is then not judged ("untracked"), only the
# forced phases, so that several cells fit in one boot.
. /scenarios/lib.sh
PSIM_RM_LOCKDEP=1
. /scenarios/rel_lib.sh
lockdep_judged=1
[ "$PSIM_RM_LOCKDEP" = 0 ] && lockdep_judged=0
# the module's own lines: ours are prefixed with its name, NVIDIA's with
# "nvidia-peermem"
mod_re=$REL_MOD
nvidia_client && mod_re="nvidia-peermem "

case "$gen,$pds,$pers" in
legacy,0,0) expect=refused ;;
*,*,1) expect=clean ;;
# MLNX_OFED 4.9 holds no lock of its own across get_pages and dma_map, nor
# around a deregistration's put_pages: only its client mutex, taken alone
# by the registration and inside the invalidation (driver lock -> client
# mutex): no cycle with the driver lock.
legacy,1,0) expect=clean ;;
modern,0,0) expect=class ;;
modern,1,0 | mofed51,0,0 | mofed51,1,0) expect=inversion ;;
*) fail "no matrix cell gen=$gen pds=$pds pers=$pers" ;;
esac
log "matrix cell gen=$gen peerdirect_support=$pds persistent_api_support=$pers: expected $expect"

if [ "$expect" = refused ]; then
	stack_up_fixtures
	# shellcheck disable=SC2046
	insmod_refused "legacy core, peerdirect_support=0, invalidating nv_mem" $REL_MOD $(client_params)
	[ -d /sys/kernel/mm/memory_peers/nv_mem ] &&
		fail "nv_mem is still published after the refused load" $(figures)
	simtest_to _cr counters clients_registered
	[ "$_cr" = 0 ] ||
		fail "a client stayed registered after the refused load" $(figures)
	since_mark | grep "$mod_re" | grep -q "peerdirect_support=1" ||
		fail "the module's refusal does not tell a legacy core's user to load with peerdirect_support=1 (it said: $(since_mark | grep "$mod_re" | head -n 2 | sed 's/^\[[^]]*\] *//' | tr '\n' ' '))" $(figures)
	log "refusal explained by: $(since_mark | grep -E 'nvidia_peermem_rs|peerdirect_sim' | tr '\n' ' ')"
	stack_down
	rel_pass cell="$gen/pds=$pds/pers=$pers" expected=refused lockdep=not-loaded hang=none
fi

[ $lockdep_judged = 0 ] || lockdep_alive || fail "lockdep is already off before the cell ran (an earlier report?)"
stack_up
mark
want=nv_mem
[ "$pers" = 1 ] || want="nv_mem (invalidating)"

# reg_mr SIZE: sets va, mr; the client under test must take it.
reg_mr() {
	simtest_to _o gpu-alloc "$1" || fail "gpu-alloc: $_o" $(figures)
	kv_set va va "$_o"
	simtest_to _o mr-reg "$va" "$1" || fail "mr-reg: $_o" $(figures)
	kv_set mr mr "$_o"
	[ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not $want" $(figures)
	REL_OPS=$((REL_OPS + 2))
}

# Registration (mapping lock -> driver lock), cudaFree (driver lock ->
# mapping lock, invalidating client only), deregistration.
reg_mr 128K
va_a=$va
mr_a=$mr
reg_mr 128K
va_b=$va
mr_b=$mr
st gpu-free "$va_a" >/dev/null || fail "cudaFree" $(figures)
simtest_to _q mr-query "$mr_a"
kv_set state state "$_q"
if [ "$pers" = 1 ]; then
	[ "$state" = live ] || fail "a persistent MR is $state after cudaFree" $(figures)
else
	[ "$state" = invalidated ] || fail "cudaFree did not invalidate the MR ($state)" $(figures)
fi
st mr-dereg "$mr_b" >/dev/null || fail "dereg" $(figures)
st mr-dereg "$mr_a" >/dev/null || fail "dereg of the cudaFree'd MR" $(figures)
st gpu-free "$va_b" >/dev/null || fail "cudaFree" $(figures)
REL_OPS=$((REL_OPS + 5))
REL_RACES=1

report=$(since_mark | grep -c "possible circular locking dependency")
edge=-
if [ $lockdep_judged = 0 ]; then
	verdict=untracked
elif [ "$expect" = clean ]; then
	[ "$report" = 0 ] || fail "lockdep reported a cycle where this cell has none (no invalidation, or no mapping lock on the legacy core)" $(figures)
	lockdep_alive || fail "lockdep turned itself off (it reported something)" $(figures)
	verdict=clean
else
	[ "$report" -ge 1 ] || fail "lockdep did not report the mapping lock / driver lock cycle" $(figures) lockdep=clean
	rep=$(since_mark | sed -n '/possible circular locking dependency/,/other info that might help/p')
	echo "$rep" | grep -q "mapping_lock" || fail "the lockdep report does not name the mapping lock" $(figures)
	echo "$rep" | grep -q "driver_lock" || fail "the lockdep report does not name the driver lock" $(figures)
	# The cycle's classes, by the verdict's rule (tests/verdict/src/log.rs:
	# the "-> #N (CLASS){...}" lines of the chain, exactly the set the
	# suite's expect_splat names): a report the scenario excuses is one the
	# verdict excuses too.
	if [ -n "${PEERMEM_EXPECT_LOCKDEP_CLASSES:-}" ]; then
		got=$(echo "$rep" | sed -n 's/.*-> #[0-9][0-9]* (\(.*\)){.*/\1/p' | sort -u | tr '\n' ',')
		want=$(echo "$PEERMEM_EXPECT_LOCKDEP_CLASSES" | tr ',' '\n' | sort -u | tr '\n' ',')
		[ "$got" = "$want" ] ||
			fail "the lockdep cycle is through ${got%,}, not the expected ${want%,}" $(figures)
	fi
	# which path gave lockdep the mapping lock -> driver lock order
	if echo "$rep" | grep -q "psim_core_mr_reg"; then
		edge=registration
	elif echo "$rep" | grep -q "psim_core_mr_dereg"; then
		edge=dereg
	else
		edge=other
	fi
	REL_EXPECTED_RE='possible circular locking dependency'
	verdict=reported
fi

# (not for NVIDIA's module: the jittered race lands by chance in the
# windows rel_field uaf_window and double_unmap force; see rel_field.sh)
if [ "$expect" = class ] && ! nvidia_client; then
	# jittered real races of cudaFree and deregistration (lockdep is off
	# now: they must just all finish)
	simtest_to out race free dereg --iters 100 --size 128K --jitter-us 300 2>/tmp/race.err
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG race: /'
	last=$(echo "$out" | tail -n 1)
	[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] || fail "race free dereg: $last" $(figures)
	REL_RACES=$((REL_RACES + $(sval races "$last")))
	REL_OPS=$((REL_OPS + 400))
fi

# the forced interleavings: can the reported cycle deadlock? Persistent
# pins have no callback: shorter windows do (VM time)
[ "$pers" = 1 ] && PHASE_MS=300
phase_matrix
# shellcheck disable=SC2086
if [ "$PHASE_HANG" != none ]; then
	log "MATRIX gen=$gen peerdirect_support=$pds persistent_api_support=$pers lockdep=$verdict edge=$edge deadlock=$PHASE_HANG$PHASE_FIGURES"
	name_hung_tasks
	fail "deadlock: cudaFree in phase $PHASE_HANG left tasks stuck: $PHASE_STUCK" $(figures) \
		expected="$expect" lockdep="$verdict" edge=$edge hang="$PHASE_HANG" $PHASE_FIGURES
fi
settle_idle
log "MATRIX gen=$gen peerdirect_support=$pds persistent_api_support=$pers lockdep=$verdict edge=$edge deadlock=none$PHASE_FIGURES"
# shellcheck disable=SC2086
rel_pass cell="$gen/pds=$pds/pers=$pers" expected="$expect" lockdep="$verdict" edge=$edge hang=none $PHASE_FIGURES
