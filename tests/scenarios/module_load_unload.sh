#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Load and unload nvidia_peermem_rs with the given parameters: the clients
# appear under /sys/kernel/mm/memory_peers (NCCL's detection paths) with our
# version, /sys/module/nvidia_peermem_rs/version and the parameters read
# back, debugfs is root-only, and everything disappears on unload.
#   module_load_unload [generation=..] [peerdirect_support=N] [persistent_api_support=N]
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
version=$(cat /sys/module/nvidia_peermem_rs/version) || fail "no /sys/module/nvidia_peermem_rs/version"
[ -n "$version" ] || fail "empty module version"
for p in peerdirect_support persistent_api_support coalesce_sg; do
	f=/sys/module/nvidia_peermem_rs/parameters/$p
	[ -r $f ] || fail "no parameter file $f"
	eval want=\$$p
	[ "$(cat $f)" = "$want" ] || fail "$p reads $(cat $f), loaded with $want"
	perm=$(stat -c %a $f)
	[ "$perm" = 444 ] || fail "$f has mode $perm, want 444"
done
[ "$(cat "$PM_PEERS"/nv_mem/version)" = "$version" ] ||
	fail "memory_peers/nv_mem/version is '$(cat "$PM_PEERS"/nv_mem/version 2>&1)', want $version"
if [ "$persistent_api_support" = 0 ]; then
	[ "$(cat "$PM_PEERS"/nv_mem_nc/version)" = "$version" ] || fail "memory_peers/nv_mem_nc/version missing"
else
	[ ! -e "$PM_PEERS"/nv_mem_nc ] || fail "nv_mem_nc registered with persistent_api_support=1"
fi
for f in registrations stats; do
	perm=$(stat -c %a "$PM_DEBUGFS"/$f) || fail "no debugfs $f"
	[ "$perm" = 400 ] || fail "debugfs $f has mode $perm, want 400"
done
[ "$(pm_live)" = 0 ] || fail "registrations before any MR: $(pm_live)"
refcnt=$(cat /sys/module/nvidia_peermem_rs/refcnt)
[ "$refcnt" = 0 ] || fail "refcnt $refcnt with no registration"

rmmod nvidia_peermem_rs || fail "rmmod failed"
[ ! -e "$PM_PEERS"/nv_mem ] || fail "nv_mem still published after rmmod"
[ ! -e "$PM_PEERS"/nv_mem_nc ] || fail "nv_mem_nc still published after rmmod"
[ ! -e $PM_DEBUGFS ] || fail "debugfs directory left after rmmod"
sim counters
counters=$out
[ "$(kv clients_registered "$counters")" = 0 ] || fail "core still has clients: $counters"
finish_clean
pass version="$version"
