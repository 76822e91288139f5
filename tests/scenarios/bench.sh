#!/bin/sh
# shellcheck shell=sh
# In-VM benchmarks of one peer-memory client (make bench; tests/bench).
#   bench.sh client=rust|ref [mode=persistent|invalidating]
#            [what=cycle,invalidate,throughput,memory] [profile=full|quick]
#            [PARAM=VALUE ...]   extra module parameters of the Rust client
# Loads the simulated stack and the client, runs `simtest bench ...` for each
# figure (each prints one `BENCH-RESULT {json}` line the host collects) and
# passes when every bench ran and nothing leaked. It never judges a time.
. /scenarios/lib.sh

client=rust
mode=persistent
what=cycle,invalidate,throughput,memory
profile=full
extra=
for kv in "$@"; do
	case $kv in
	client=*) client=${kv#client=} ;;
	mode=*) mode=${kv#mode=} ;;
	what=*) what=${kv#what=} ;;
	profile=*) profile=${kv#profile=} ;;
	*=*) extra="$extra $kv" ;;
	*) fail "bad argument $kv" ;;
	esac
done

case $client in
rust)
	mod=nvidia_peermem_rs
	case $mode in
	persistent) params="persistent_api_support=1" ;;
	invalidating) params="persistent_api_support=0" ;;
	*) fail "unknown mode $mode" ;;
	esac
	params="$params$extra"
	;;
ref)
	mod=peermem_refclient
	[ -z "$extra" ] || fail "module parameters$extra are for client=rust"
	case $mode in
	persistent) params="name=nv_mem persistent=1" ;;
	invalidating) params="name=nv_mem abi=ex ex_flags=1" ;;
	*) fail "unknown mode $mode" ;;
	esac
	;;
*) fail "unknown client $client (rust or ref)" ;;
esac
label="$client/$mode$(echo "$extra" | tr ' ' '+')"

# Per profile: iterations for each size. Scale mode (64 KiB GPU pages
# aliasing 256 backing pages = 16 MiB) for 1 GiB and 16 GiB.
scale=256
if [ "$profile" = quick ]; then
	cycle_runs="64K:5 2M:5 64M:2 1G:2:s 16G:1:s"
	inval_runs="64K:3 2M:3"
	mem_runs="64K:8 2M:4 1G:1:s"
	threads="1 2"
	tp_ms=300
	tp_reps=1
else
	cycle_runs="64K:30 2M:30 64M:10 1G:5:s 16G:3:s"
	inval_runs="64K:20 2M:20 64M:5"
	mem_runs="64K:64 2M:32 64M:8 1G:2:s 16G:1:s"
	threads="1 2 4 8"
	tp_ms=1000
	tp_reps=3
fi

if ! [ -e /sys/kernel/tracing/trace ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
fi

load_sim_stack generation=modern
# shellcheck disable=SC2086
load $mod $params
log "client $mod $params ($label), profile $profile"

ran=0
failed=0
# bench KIND SIZE ARGS...: one simtest bench run; its BENCH-RESULT line
# goes to the console as is.
bench() {
	_out=$(simtest bench "$@" --label "$label" 2>/tmp/bench.err)
	_rc=$?
	echo "$_out" | grep '^BENCH-RESULT ' || true
	if [ $_rc -ne 0 ] || ! echo "$_out" | grep -q '^BENCH-RESULT '; then
		failed=$((failed + 1))
		log "simtest bench $* failed (rc $_rc): $(echo "$_out" | tail -n 1) $(tail -n 3 /tmp/bench.err)"
	fi
	ran=$((ran + 1))
}

# RUN is SIZE:N[:s]: the size, a count, and "s" for scale mode.
run_split() {
	_size=${1%%:*}
	_rest=${1#*:}
	_n=${_rest%%:*}
	_scale=0
	case $_rest in *:s) _scale=$scale ;; esac
}

has() {
	case ",$what," in *",$1,"*) return 0 ;; esac
	return 1
}

if has cycle; then
	for r in $cycle_runs; do
		run_split "$r"
		bench cycle "$_size" --iters "$_n" --warmup 1 --scale "$_scale"
	done
fi
if has invalidate && [ "$mode" = invalidating ]; then
	for r in $inval_runs; do
		run_split "$r"
		bench invalidate "$_size" --iters "$_n" --scale "$_scale"
	done
fi
if has throughput; then
	for t in $threads; do
		bench throughput 64K --threads "$t" --ms "$tp_ms" --reps "$tp_reps"
	done
fi
if has memory; then
	for r in $mem_runs; do
		run_split "$r"
		bench memory "$_size" --live "$_n" --scale "$_scale" --client-module "$mod"
	done
fi

unload "$mod"
leaks=$(simtest leak-check | sed -n 's/.*leaks=\([0-9]*\).*/\1/p')
unload_sim_stack
[ "${leaks:-1}" = 0 ] || fail "the simulated stack reports leaks after the bench" benches=$ran leaks="$leaks"
[ $failed = 0 ] || fail "$failed of $ran benches failed" benches=$ran
pass benches=$ran
