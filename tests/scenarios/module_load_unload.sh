#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Load and unload nvidia_peermem_rs with the given parameters: the clients
# appear under /sys/kernel/mm/memory_peers with our version where the core
# publishes that tree (memory_peers=1) and nowhere there where it does not
# (0: DOCA-OFED 23.10+ on Linux 6.6+), /sys/module/nvidia_peermem_rs/version
# and the parameters read back, debugfs is root-only, and everything
# disappears on unload. Only the
# invalidating nv_mem is an extended client (at peerdirect_support=0); a
# persistent client registers as a plain peer_memory_client, as NVIDIA's
# does, and the load message names the invalidation mode of the
# invalidating client only.
#   module_load_unload [generation=..] [peerdirect_support=N] [persistent_api_support=N] [memory_peers=0|1]
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
dmesg -c >/dev/null
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
if [ "$PD_MEMORY_PEERS" = 0 ]; then
	[ ! -e "$PM_PEERS" ] || fail "$PM_PEERS exists on a core without the tree: $(ls "$PM_PEERS")"
elif [ "$(cat "$PM_PEERS"/nv_mem/version)" != "$version" ]; then
	fail "memory_peers/nv_mem/version is '$(cat "$PM_PEERS"/nv_mem/version 2>&1)', want $version"
elif [ "$persistent_api_support" = 0 ]; then
	[ "$(cat "$PM_PEERS"/nv_mem_nc/version)" = "$version" ] || fail "memory_peers/nv_mem_nc/version missing"
else
	[ ! -e "$PM_PEERS"/nv_mem_nc ] || fail "nv_mem_nc registered with persistent_api_support=1"
fi
# core_line NAME: how the simulated core registered client NAME.
core_line() {
	dmesg | sed -n "s/.*peerdirect_sim: registered peer memory client $1 (version [^,]*, \(.*\))$/\1/p"
}
ours=$(dmesg | grep "nvidia_peermem_rs: version $version: registered")
[ -n "$ours" ] || fail "no load message: $(dmesg | grep nvidia_peermem_rs)"
if [ "$persistent_api_support" = 0 ]; then
	want_nv_mem=invalidating
	[ "$peerdirect_support" = 0 ] && [ "$generation" = modern ] &&
		want_nv_mem="invalidating, invalidate unmaps"
	[ "$(core_line nv_mem_nc)" = persistent ] ||
		fail "nv_mem_nc registered as '$(core_line nv_mem_nc)', want a plain persistent client"
	if [ "$peerdirect_support" = 0 ]; then
		want_ours="nv_mem (invalidating, extended PeerDirect ABI, PEER_MEM_INVALIDATE_UNMAPS) and nv_mem_nc (persistent)"
	else
		want_ours="nv_mem (invalidating, legacy PeerDirect ABI) and nv_mem_nc (persistent)"
	fi
else
	want_nv_mem=persistent
	want_ours="nv_mem (persistent)"
fi
[ "$(core_line nv_mem)" = "$want_nv_mem" ] ||
	fail "nv_mem registered as '$(core_line nv_mem)', want '$want_nv_mem'"
case "$ours" in
*"registered $want_ours; PeerDirect core: "*) ;;
*) fail "load message '$ours', want 'registered $want_ours; PeerDirect core: ...'" ;;
esac
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
