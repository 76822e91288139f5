#!/bin/sh
# shellcheck disable=SC2046,SC2086
# Randomized stress (issue 5): >= 8 threads run seeded random sequences of
# gpu_alloc / mr_reg / DMA write+read+verify (CPU and edu engines) /
# gpu_free / mr_dereg over shared buffers; cudaFree of registered buffers
# races the deregistration of their MRs by other threads. The seed is printed
# (figure seed=) so a failure replays with seed=N.
#   rel_stress.sh [generation=..] [peerdirect_support=..] [persistent_api_support=..] [threads=8] [ops=100000] [seed=N]
#                 [coalesce_sg=1]
# coalesce_sg=1: the module merges DMA-contiguous GPU pages into one SG
# entry; the provider's backing stays one 64 KiB allocation per GPU page,
# so some neighbours are contiguous and some not, and every DMA is checked.
# After the run: nothing pinned, mapped or registered, core counters balanced
# (simtest's own check and the core's sysfs), our module's refcount idle,
# kmemleak clean. The figures win_*= say how often each of the real core's
# race windows (tests/fixtures/README.md) was really open during the run.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
threads=${rel_arg_threads:-8}
ops=${rel_arg_ops:-100000}
seed_opt=
[ -n "$rel_arg_seed" ] && seed_opt="--seed $rel_arg_seed"

stack_up
if [ -n "$rel_arg_coalesce_sg" ]; then
	read -r _c </sys/module/$REL_MOD/parameters/coalesce_sg
	[ "$_c" = "$rel_arg_coalesce_sg" ] ||
		fail "$REL_MOD loaded with coalesce_sg=$_c, want $rel_arg_coalesce_sg" $(figures)
fi
simtest_to before_cb counters free_callbacks
windows_mark
# Shown live (seed first, then progress), so a hang still tells the seed.
# shellcheck disable=SC2086
(
	simtest stress --threads "$threads" --ops "$ops" $seed_opt 2>&1
	echo "rc=$?" >/tmp/stress.rc
) | tee /tmp/stress.out | sed 's/^/SCENARIO-LOG stress: /'
rc=$(sed -n 's/^rc=//p' /tmp/stress.rc)
out=$(grep -v '^stress: progress' /tmp/stress.out)
last=$(grep '^result=' /tmp/stress.out | tail -n 1)
kv_set seed seed "$last"
kv_set REL_OPS ops "$last"
[ -n "$seed" ] || seed=$(echo "$out" | sed -n 's/^# stress seed=\([0-9]*\).*/\1/p' | head -n 1)
log "seed=$seed (replay: scenario rel_stress ... seed=$seed)"
# Races: MRs deregistered by another thread while (or after) cudaFree of
# their memory ran (orphan deregs); free callbacks fired, as a figure.
simtest_to cb counters free_callbacks
cb=$((cb - before_cb))
kv_set REL_RACES orphan_deregs "$last"
[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] ||
	fail "stress failed (rc=$rc): $last" $(figures) seed="$seed"
[ "${REL_OPS:-0}" -ge "$ops" ] || fail "only ${REL_OPS} of $ops operations ran" $(figures) seed="$seed"
settle_idle
if [ "$ops" -ge 100000 ]; then kmemleak_check; else kmemleak_check light; fi
rel_pass seed="$seed" threads="$threads" dmas="$(sval dmas "$last")" \
	edu_dmas="$(sval edu_dmas "$last")" free_callbacks="$cb" \
	elapsed_ms="$(sval elapsed_ms "$last")" $(windows_figures)
