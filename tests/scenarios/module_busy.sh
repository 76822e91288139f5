#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A module reference per live registration: rmmod is refused while an MR
# is registered (refcnt counts it, debugfs lists it) and succeeds after the
# MR is deregistered.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
sim gpu-alloc 1M
kv_set va va "$out"
sim mr-reg "$va" 256K
kv_set mr1 mr "$out"
sim mr-reg $((va + 0x40000)) 64K
kv_set mr2 mr "$out"
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 2 ] ||
	fail "refcnt $(cat /sys/module/nvidia_peermem_rs/refcnt) with 2 registrations"
[ "$(pm_live)" = 2 ] || fail "debugfs counts $(pm_live) registrations, want 2"
grep -q "pages=4 sg_entries=4 state=mapped" "$PM_DEBUGFS"/registrations ||
	fail "debugfs does not list the 256K MR as mapped: $(cat "$PM_DEBUGFS"/registrations)"
if rmmod nvidia_peermem_rs 2>/tmp/rmmod.err; then
	fail "rmmod succeeded with live registrations"
fi
loaded nvidia_peermem_rs || fail "module gone"
log "rmmod refused: $(cat /tmp/rmmod.err)"
[ -r "$PM_PEERS"/nv_mem/version ] || fail "nv_mem unpublished by the refused rmmod"
# Still working after the refused rmmod.
sim hca-write "$mr1" 0 4K seed:7
sim hca-check "$mr1" 0 4K seed:7
sim mr-dereg "$mr1"
rmmod nvidia_peermem_rs 2>/dev/null && fail "rmmod succeeded with one registration left"
sim mr-dereg "$mr2"
[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 0 ] || fail "refcnt not back to 0"
no_leaks "after deregistration"
rmmod nvidia_peermem_rs || fail "rmmod failed with no registration"
sim gpu-free "$va"
finish_clean
pass refused_rmmods=2
