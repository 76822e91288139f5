#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# An open debugfs file holds the module: while a reader has stats (or
# registrations) open, refcnt counts it and rmmod is refused; once it is
# closed the module unloads. The files' file_operations live in the module
# and the file's release is called through them at close, so a module that
# unloaded under an open file would be called after it is gone (the
# kernel crate's own debugfs files carry no module owner: see
# kmod/debugfs.rs).
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
refused=0
for f in stats registrations; do
	exec 3<"$PM_DEBUGFS"/$f || fail "cannot open debugfs $f"
	refcnt=$(cat /sys/module/nvidia_peermem_rs/refcnt)
	[ "$refcnt" = 1 ] || fail "refcnt $refcnt with debugfs $f open, want 1"
	if rmmod nvidia_peermem_rs 2>/tmp/rmmod.err; then
		fail "rmmod succeeded with debugfs $f open"
	fi
	loaded nvidia_peermem_rs || fail "module gone"
	log "rmmod with $f open refused: $(cat /tmp/rmmod.err)"
	refused=$((refused + 1))
	# Still readable after the refused rmmod.
	first=$(head -n 1 <&3)
	[ -n "$first" ] || fail "debugfs $f read nothing after the refused rmmod"
	exec 3<&-
	[ "$(cat /sys/module/nvidia_peermem_rs/refcnt)" = 0 ] ||
		fail "refcnt $(cat /sys/module/nvidia_peermem_rs/refcnt) after closing $f"
done
rmmod nvidia_peermem_rs || fail "rmmod failed with no debugfs file open"
[ ! -e "$PM_DEBUGFS" ] || fail "debugfs directory left after rmmod"
finish_clean
pass refused_rmmods=$refused
