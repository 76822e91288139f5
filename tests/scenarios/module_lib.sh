# shellcheck shell=sh disable=SC2034
# Helpers of the module_*.sh scenarios (nvidia_peermem_rs). Source after
# lib.sh:  . /scenarios/lib.sh; . /scenarios/module_lib.sh
#
# The script's arguments KEY=VALUE (the positional parameters a sourced
# file sees) become shell variables, only the keys below, with defaults:
# generation=modern peerdirect_support=0 persistent_api_support=1
# coalesce_sg=0, when=live (module_invalidate: when the cudaFree comes),
# and memory_peers=0|1 (whether the simulated core publishes
# /sys/kernel/mm/memory_peers: lib.sh's PD_MEMORY_PEERS, 1 unless given).

generation=modern
peerdirect_support=0
persistent_api_support=1
coalesce_sg=0
when=live
for _a in "$@"; do
	case "$_a" in
	generation=modern | generation=modern2410 | generation=mofed51 | generation=legacy) generation=${_a#*=} ;;
	peerdirect_support=[0-9]*) peerdirect_support=${_a#*=} ;;
	persistent_api_support=[0-9]*) persistent_api_support=${_a#*=} ;;
	coalesce_sg=[0-9]*) coalesce_sg=${_a#*=} ;;
	when=live | when=before_activation) when=${_a#*=} ;;
	memory_peers=0 | memory_peers=1) PD_MEMORY_PEERS=${_a#*=} ;;
	*) fail "unknown scenario argument $_a" ;;
	esac
done

# Whatever an earlier, failed scenario left loaded goes first (unloading the
# control device deregisters its MRs and frees its GPU memory). Those
# deregistrations come from rmmod's task, not from the simtest server that
# registered them: the module leaves each pin to its owner, and the GPU
# memory's free ends it. Intended; rel_field unload_order checks that path
# and the owner's ordinary unpin beside it.
for _m in peermem_sim nvidia_peermem_rs nvidia_peermem peermem_refclient peerdirect_sim nvidia_p2p_sim nvidia_p2p_sim_r525; do
	[ -d /sys/module/$_m ] && rmmod $_m 2>/dev/null
done

PM_DEBUGFS=/sys/kernel/debug/nvidia_peermem_rs
PM_PEERS=/sys/kernel/mm/memory_peers

# load_module [PARAM=VALUE ...]: nvidia_peermem_rs with the scenario's
# parameters (extra ones override).
load_module() {
	load nvidia_peermem_rs peerdirect_support="$peerdirect_support" \
		persistent_api_support="$persistent_api_support" \
		coalesce_sg="$coalesce_sg" "$@"
}

# The client expected to take GPU memory: nv_mem in both modes (in mode 0
# the invalidating nv_mem registers first).
expected_client=nv_mem

# pm_stat NAME: a counter from debugfs stats.
pm_stat() {
	file_value "$PM_DEBUGFS"/stats "$1"
}

# pm_live: number of live registrations (debugfs).
pm_live() {
	file_value "$PM_DEBUGFS"/registrations count
}

# kv KEY OUTPUT: value of KEY= in a simtest output line.
# sim CMD...: run simtest, fail the scenario if it fails; its output is in
# $out (never call it inside $(...): a failure there would be lost).
sim() {
	simtest_to out "$@" || fail "simtest $* failed: $out"
}

# no_leaks WHAT: the provider and core hold nothing, nor do we.
no_leaks() {
	# Exits non-zero when something is left; the fields tell what.
	simtest_to _l leak-check 2>/dev/null
	leak_fields_zero "$1" "$_l"
	if [ -r "$PM_DEBUGFS"/stats ]; then
		# One read of each file, in this shell.
		_pinned='' _maps='' _live=''
		while read -r _fk _fv; do
			case "$_fk" in
			pinned_bytes) _pinned=$_fv ;;
			dma_mappings) _maps=$_fv ;;
			esac
		done <"$PM_DEBUGFS"/stats
		while read -r _fk _fv; do
			[ "$_fk" = count ] && _live=$_fv
		done <"$PM_DEBUGFS"/registrations
		[ "$_pinned" = 0 ] || fail "$1: module still counts $_pinned pinned bytes"
		[ "$_maps" = 0 ] || fail "$1: module still counts $_maps mappings"
		[ "$_live" = 0 ] || fail "$1: $_live registrations still live"
	fi
}

# finish_clean: unload everything, then the leak check (no_new_leaks).
finish_clean() {
	unload nvidia_peermem_rs
	unload_sim_stack
	no_new_leaks
}
