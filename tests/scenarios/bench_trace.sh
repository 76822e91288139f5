#!/bin/sh
# The guest half of `make bench-trace` (tests/bench/run-trace.sh): one
# 64 KiB register + DMA + deregister round trip of one client in persistent
# mode, which the host's gdb single-steps through every call the core makes
# into the client; then the client reloaded in invalidating mode (the
# bench's parameters), one more round trip, single-stepped alike, and one
# cudaFree of a registered 64 KiB buffer, whose free callback gdb
# single-steps (TRACE-READY-INVALIDATE, KSYM2 lines for the new load).
# NVIDIA's module (client=nvNNN) has no persistent mode: only the
# invalidating half.
#   bench_trace [client=rs|ref|nvNNN] [wait=SECONDS]
# Prints every module symbol (KSYM lines) and TRACE-READY, then
# waits for gdb to attach and set its breakpoints before the traced round
# trip. Two untraced round trips first, so that first-use costs (slab
# caches, the provider's first pin) stay out of the trace.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
wait_s=${rel_arg_wait:-10}
mod=$REL_MOD
stack_up_fixtures
# traced_roundtrip KSYM_TAG READY_TAG: two untraced 64 KiB round trips, the
# module symbols (KSYM_TAG lines) and READY_TAG for the host, the wait for
# gdb, then the traced round trip.
traced_roundtrip() {
	st roundtrip 64K >/dev/null || fail "untraced round trip failed"
	st roundtrip 64K >/dev/null || fail "untraced round trip failed"
	grep -E "\]$" /proc/kallsyms | sed "s/^/$1 /"
	echo "$2 $mod"
	sleep "$wait_s"
	simtest_to _o roundtrip 64K || fail "traced round trip failed ($2): $_o"
}
if ! nvidia_client; then
	# The persistent client (the bench's headline mode; client_params
	# reads it).
	# shellcheck disable=SC2034
	pers=1
	# shellcheck disable=SC2046
	load "$mod" $(client_params)
	traced_roundtrip KSYM TRACE-READY
	echo "TRACE-DONE $mod"
	unload "$mod"
fi
case "$mod" in
nvidia_peermem_rs) load "$mod" persistent_api_support=0 ;;
peermem_refclient) load "$mod" name=nv_mem abi=ex ex_flags=1 ;;
*) load "$mod" ;;
esac
inval() {
	simtest bench invalidate 64K --iters "$1" --scale 256 --label trace >/dev/null ||
		fail "invalidation bench failed"
}
inval 2
traced_roundtrip KSYM2 TRACE-READY-INVALIDATE
inval 1
echo "TRACE-DONE-INVALIDATE $mod"
stack_down
pass
