#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Loading never fails silently: with the name nv_mem already taken by
# another peer-memory client (here the fixtures' reference client, as
# nvidia_peermem or nv_peer_mem would), the load fails and says what to
# unload; after unloading the other client it loads. The load fails with
# EBUSY (NVIDIA's module says EINVAL there; the decision is in the README's
# troubleshooting and kmod/core_client.rs).
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load peermem_refclient name=nv_mem
dmesg -c >/dev/null
try_load nvidia_peermem_rs 2>/tmp/insmod.err && fail "loaded while nv_mem was taken"
grep -q "Device or resource busy" /tmp/insmod.err ||
	fail "the refused load did not fail with EBUSY: $(cat /tmp/insmod.err)"
dmesg | grep -q "nvidia_peermem_rs: .*nv_mem.*unload it first (rmmod nvidia_peermem nv_peer_mem)" ||
	fail "no message saying what to unload: $(dmesg | grep nvidia_peermem_rs)"
! loaded nvidia_peermem_rs || fail "module loaded"
unload peermem_refclient
load_module
[ -r "$PM_PEERS"/nv_mem/version ] || fail "nv_mem not published after the other client left"
finish_clean
pass
