#!/bin/sh
# The guest half of `make bench-trace` (tests/bench/run-trace.sh): one
# 64 KiB register + DMA + deregister round trip of one client, which the
# host's gdb single-steps through every call the core makes into the client.
#   bench_trace [client=rs|ref] [wait=SECONDS]
# Prints every module symbol (KSYM lines) and TRACE-READY, then
# waits for gdb to attach and set its breakpoints before the traced round
# trip. Two untraced round trips first, so that first-use costs (slab
# caches, the provider's first pin) stay out of the trace.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
wait_s=${rel_arg_wait:-10}
# The persistent client (the bench's headline mode; client_params reads it).
# shellcheck disable=SC2034
pers=1
mod=$REL_MOD
stack_up_fixtures
# shellcheck disable=SC2046
load "$mod" $(client_params)
st roundtrip 64K >/dev/null || fail "untraced round trip failed"
st roundtrip 64K >/dev/null || fail "untraced round trip failed"
grep -E "\]$" /proc/kallsyms | sed "s/^/KSYM /"
echo "TRACE-READY $mod"
sleep "$wait_s"
_o=$(st roundtrip 64K) || fail "traced round trip failed: $_o"
echo "TRACE-DONE $mod"
stack_down
pass
