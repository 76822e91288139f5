#!/bin/sh
# shellcheck shell=sh
# In-VM benchmarks of peer-memory clients (make bench; tests/bench/README.md).
#   bench.sh [mode=persistent|invalidating] [clients=rust,ref]
#            [what=cycle,invalidate,throughput,memory] [profile=full|quick]
#            [rounds=N]   (quick: 1, full: 3; more for BENCH_CLOCK=wall)
#            [tp_ms=MS]   throughput window per thread count and round
#                         (default 300)
#            [threads=N,N...]  throughput thread counts (full: 1,2,4,8)
#            [cycle=SIZE:N,...]  the cycle's sizes and iterations per round
#                         (default: the profile's)
#            [cost=PROFILE]  the provider's cost model (v100, b200, aws or off; default:
#                         the boot's peermem.provider_cost, tests/scenarios/lib.sh)
# A client is `rust`, `ref`, `nvidia`, `nvidia-opt` (NVIDIA's module where its
# release has this mode, else left out with a log line), or
# `rust+PARAM=VALUE[+...]` (the Rust module with extra parameters, e.g.
# rust+coalesce_sg=1). `nvidia` is
# NVIDIA's own nvidia-peermem.c of the newest release built (the packaged
# one, or a 560+ one the user gave), unmodified, built against the fixtures:
# the baseline the headline ratios are taken against. Before 560 it has no
# persistent nv_mem (its invalidating nv_mem takes every MR), so it runs in
# mode=invalidating only; from 560 on in either mode. The clients take turns,
# one loaded at a time, for `rounds` rounds (ABBA order, so that a drift of
# the host's speed during the run weighs on each client alike); each round
# runs its share of the iterations. Every `simtest bench` prints one
# `BENCH-RESULT {json}` line the host collects and pools by label. The
# scenario passes when every bench ran and nothing leaked; it never judges
# a time.
. /scenarios/lib.sh

mode=persistent
clients=rust,ref
what=cycle,invalidate,throughput,memory
profile=full
rounds=
tp_ms_arg=
threads_arg=
cycle_arg=
for kv in "$@"; do
	# shellcheck disable=SC2034 # PSIM_COST: lib.sh's load_provider reads it
	case $kv in
	mode=*) mode=${kv#mode=} ;;
	clients=*) clients=${kv#clients=} ;;
	what=*) what=${kv#what=} ;;
	profile=*) profile=${kv#profile=} ;;
	rounds=*) rounds=${kv#rounds=} ;;
	tp_ms=*) tp_ms_arg=${kv#tp_ms=} ;;
	threads=*) threads_arg=${kv#threads=} ;;
	cycle=*) cycle_arg=${kv#cycle=} ;;
	cost=*) PSIM_COST=${kv#cost=} ;;
	*) fail "bad argument $kv" ;;
	esac
done
case $mode in persistent | invalidating) ;; *) fail "unknown mode $mode" ;; esac

# Per round, SIZE:ITERATIONS. Every size runs in the provider's scale mode:
# at most 256 backing chunks of 64 KiB, which the GPU pages of larger
# allocations alias (so 1 GiB and 16 GiB fit the VM, and the provider's
# own DMA mapping work stays the same from 16 MiB up); page tables, DMA
# address arrays and SG tables are full size.
scale=256
if [ "$profile" = quick ]; then
	: "${rounds:=1}"
	cycle_runs="64K:5 2M:5 64M:2 1G:2 16G:1"
	inval_runs="64K:3 2M:3"
	mem_runs="64K:8 2M:4 1G:1"
	threads="1 2"
	tp_ms=300
else
	: "${rounds:=3}"
	cycle_runs="64K:8 2M:8 64M:4 1G:4 16G:4"
	inval_runs="64K:5 2M:5 64M:4"
	mem_runs="64K:32 2M:16 64M:4 1G:2 16G:1"
	threads="1 2 4 8"
	tp_ms=300
fi
case $tp_ms_arg in
'') ;;
*[!0-9]* | 0) fail "tp_ms=$tp_ms_arg: expected a positive number of milliseconds" ;;
*) tp_ms=$tp_ms_arg ;;
esac
case $cycle_arg in
'') ;;
*[!0-9KMG:,]* | ,* | *, | *,,*) fail "cycle=$cycle_arg: expected SIZE:N pairs, e.g. 64K:8,1G:4" ;;
*) cycle_runs=$(echo "$cycle_arg" | tr ',' ' ') ;;
esac
case $threads_arg in
'') ;;
*[!0-9,]* | ,* | *, | *,,*) fail "threads=$threads_arg: expected thread counts, e.g. 2 or 1,2,4" ;;
*) threads=$(echo "$threads_arg" | tr ',' ' ') ;;
esac

if ! [ -e /sys/kernel/tracing/trace ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
fi

# nvidia_major: the release of the newest NVIDIA module in the initramfs.
nvidia_major() {
	for _k in /lib/modules/*/extra/nvidia_peermem_[0-9]*.ko; do
		[ -f "$_k" ] && basename "$_k" .ko
	done | sort | tail -n 1 | sed 's/^nvidia_peermem_//'
}

# client_setup SPEC: sets mod, params and label for client SPEC.
client_setup() {
	_name=${1%%+*}
	_extra=
	case $1 in *+*) _extra=$(echo "${1#*+}" | tr '+' ' ') ;; esac
	case $_name in
	rust)
		mod=nvidia_peermem_rs
		case $mode in
		persistent) params="persistent_api_support=1" ;;
		invalidating) params="persistent_api_support=0" ;;
		esac
		params="$params $_extra"
		;;
	ref)
		mod=peermem_refclient
		[ -z "$_extra" ] || fail "module parameters ($_extra) are for the Rust client"
		case $mode in
		persistent) params="name=nv_mem persistent=1" ;;
		invalidating) params="name=nv_mem abi=ex ex_flags=1" ;;
		esac
		;;
	nvidia)
		[ -z "$_extra" ] || fail "module parameters ($_extra) are for the Rust client"
		# the newest release built (nvidia_peermem_<major>.ko)
		_major=$(nvidia_major)
		[ -n "$_major" ] || fail "NVIDIA's nvidia-peermem is not in the initramfs (tests/nvidia/build-nvidia-peermem.sh)"
		mod=nvidia_peermem_$_major
		if [ "$_major" -ge 560 ]; then
			# 560 on: persistent nv_mem by default, both clients with 0
			case $mode in
			persistent) params="persistent_api_support=1" ;;
			invalidating) params="persistent_api_support=0" ;;
			esac
		else
			[ "$mode" = invalidating ] ||
				fail "NVIDIA's nvidia-peermem before 560 ($mod) has no persistent nv_mem: client nvidia runs in mode=invalidating"
			params=
		fi
		;;
	*) fail "unknown client $1 (rust, ref, nvidia or rust+PARAM=VALUE)" ;;
	esac
	label="$_name/$mode"
	[ -z "$_extra" ] || label="$label+$(echo "$_extra" | tr ' ' '+')"
}

ran=0
failed=0
# bench KIND SIZE ARGS...: one simtest bench run; its BENCH-RESULT line
# goes to the console as is.
bench() {
	_out=$(command simtest bench "$@" --label "$label" 2>/tmp/bench.err)
	_rc=$?
	echo "$_out" | grep '^BENCH-RESULT ' || true
	if [ $_rc -ne 0 ] || ! echo "$_out" | grep -q '^BENCH-RESULT '; then
		failed=$((failed + 1))
		log "simtest bench $* ($label) failed (rc $_rc): $(echo "$_out" | tail -n 1) $(tail -n 3 /tmp/bench.err)"
	fi
	ran=$((ran + 1))
}

# run_split SIZE:N: sets _size, _n and _scale.
run_split() {
	_size=${1%%:*}
	_n=${1#*:}
	_scale=$scale
}

has() {
	case ",$what," in *",$1,"*) return 0 ;; esac
	return 1
}

# one_round SPEC ROUND: load client SPEC, run this round's share, unload.
one_round() {
	client_setup "$1"
	# shellcheck disable=SC2086
	load $mod $params
	log "round $2: $mod $params ($label)"
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
			bench throughput 64K --threads "$t" --ms "$tp_ms" --reps 1 --scale "$scale"
		done
	fi
	# memory is deterministic: measured once, in the first round
	if has memory && [ "$2" = 1 ]; then
		for r in $mem_runs; do
			run_split "$r"
			bench memory "$_size" --live "$_n" --scale "$_scale" --client-module "$mod"
		done
	fi
	unload "$mod"
}

load_sim_stack generation=modern
forward=
for c in $(echo "$clients" | tr ',' ' '); do
	if [ "$c" = "nvidia-opt" ]; then
		_major=$(nvidia_major)
		if [ "$mode" = persistent ] && [ "${_major:-0}" -lt 560 ]; then
			log "NVIDIA's nvidia-peermem ${_major:-(none)} has no persistent nv_mem: left out of mode=$mode"
			continue
		fi
		c=nvidia
	fi
	forward="$forward $c"
done
backward=
for c in $forward; do backward="$c $backward"; done
round=1
while [ "$round" -le "$rounds" ]; do
	order=$forward
	[ $((round % 2)) = 0 ] && order=$backward
	for c in $order; do
		one_round "$c" "$round"
	done
	round=$((round + 1))
done

leaks=$(command simtest leak-check | sed -n 's/.*leaks=\([0-9]*\).*/\1/p')
unload_sim_stack
[ "${leaks:-1}" = 0 ] || fail "the simulated stack reports leaks after the bench" benches=$ran leaks="$leaks"
[ $failed = 0 ] || fail "$failed of $ran benches failed" benches=$ran
pass benches=$ran rounds="$rounds"
