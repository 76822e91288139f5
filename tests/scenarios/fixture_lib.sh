# shellcheck shell=sh
# Helpers of the fixture scenarios (fixture_*.sh), on top of lib.sh.
#   . /scenarios/lib.sh; . /scenarios/fixture_lib.sh
# Arguments KEY=VALUE (the keys in FX_KEYS) become variables arg_KEY.

# On the way out, whatever happened, unload what the scenario loaded so the
# next scenario of the suite starts from a clean VM (lib.sh's report kept).
_fx_cleanup() {
	# the control device first: it deregisters what is left, so the
	# clients' unregistration does not block
	for _m in peermem_sim peermem_refclient peermem_refclient2 \
		peerdirect_sim nvidia_p2p_sim nvidia_p2p_sim_r525; do
		[ -d "/sys/module/$_m" ] && rmmod "$_m" 2>/dev/null
	done
	return 0
}
trap '_fx_cleanup; no_result' EXIT

# The keys fixture scenarios take: any other argument (a misspelt knob, a
# short name) fails the scenario rather than running it in the default
# configuration.
FX_KEYS="generation abi mode ops gib"
for _a in "$@"; do
	_k=${_a%%=*}
	case "$_a" in
	*=*) ;;
	*) fail "scenario argument $_a is not KEY=VALUE" ;;
	esac
	case " $FX_KEYS " in
	*" $_k "*) eval "arg_$_k=\${_a#*=}" ;;
	*) fail "unknown scenario argument $_a (keys: $FX_KEYS)" ;;
	esac
done

# st ARGS...: simtest, failing the scenario if it fails; prints its output.
st() {
	simtest_to _o "$@" || fail "simtest $* failed: $_o"
	echo "$_o"
}

# st_errno ERRNO ARGS...: simtest must fail with ERRNO (a name or number).
st_errno() {
	_e=$1
	shift
	simtest_to _o --expect-errno "$_e" "$@" ||
		fail "simtest $* should fail with $_e: $_o"
}

# counter NAME: one counter of /dev/peermem_sim.
counter() {
	st counters "$1"
}

# expect_counter NAME VALUE
expect_counter() {
	simtest_to _v counters "$1" || fail "simtest counters $1 failed: $_v"
	[ "$_v" = "$2" ] || fail "counter $1 is $_v, expected $2"
}

# phase NAME: calls of one phase (acquire get_pages dma_map get_page_size
# dma_unmap put_pages release invalidate) since the last phase_reset.
phase() {
	kv "$1_calls" "$(st phase-times)"
}

expect_phase() {
	_v=$(phase "$1")
	[ "$_v" = "$2" ] || fail "phase $1 was called $_v times, expected $2"
}

phase_reset() {
	st phase-times reset >/dev/null
}

# peer_attr CLIENT FILE: /sys/kernel/mm/memory_peers/CLIENT/FILE
peer_attr() {
	cat "/sys/kernel/mm/memory_peers/$1/$2" 2>/dev/null ||
		fail "no /sys/kernel/mm/memory_peers/$1/$2"
}

expect_peer_attr() {
	_v=$(peer_attr "$1" "$2")
	[ "$_v" = "$3" ] || fail "memory_peers/$1/$2 is $_v, expected $3"
}

# no_leaks: every pin, page table, mapping, MR and allocation is gone.
no_leaks() {
	simtest_to _o leak-check || fail "leak check: $_o"
}

# gpu_alloc SIZE: prints the VA (decimal).
gpu_alloc() {
	_o=$(st gpu-alloc "$1") || exit 1
	printf '%d\n' "$(kv va "$_o")"
}

# mr_reg VA LEN: sets mr_id, mr_sg, mr_client.
mr_reg() {
	_o=$(st mr-reg "$1" "$2") || exit 1
	kv_set mr_id mr "$_o"
	kv_set mr_sg sg "$_o"
	kv_set mr_client client "$_o"
}

# load_refclient [PARAM=VALUE ...]: the reference client, as peermem_refclient.
load_refclient() {
	load peermem_refclient "$@"
}

# dmesg_count PATTERN: lines of the kernel log matching PATTERN.
dmesg_count() {
	dmesg | grep -c -- "$1"
}

# teardown: unload the reference clients and the stack; nothing may remain.
teardown() {
	unload peermem_sim peermem_refclient peermem_refclient2
	unload_sim_stack
	[ ! -d /sys/kernel/mm/memory_peers ] ||
		fail "memory_peers left after unloading the core"
}
