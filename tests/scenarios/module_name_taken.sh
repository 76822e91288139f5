#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Loading never fails silently, and never loads beside another client
# module.
#  - With the name nv_mem taken by another client (here the fixtures'
#    reference client): a core with /sys/kernel/mm/memory_peers
#    (memory_peers=1) refuses our registration, and the load fails with
#    EBUSY and says what to unload (NVIDIA's module says EINVAL there; the
#    decision is in the README's troubleshooting and kmod/core_client.rs).
#    A core without the tree (memory_peers=0: DOCA-OFED 23.10+ on Linux
#    6.6+) has no name check: both register, as on a node.
#  - With a module named nvidia_peermem loaded (the stand-in for NVIDIA's
#    copy), nvidia_peermem_rs refuses to load, EBUSY, with one line saying
#    what to unload; the drop-in (module nvidia_peermem) refuses beside
#    nvidia_peermem_rs the same way. The same beside a module named
#    nv_peer_mem (the stand-in for the legacy nv_peer_mem), for both
#    builds. On both cores: the check is the module's own.
#   module_name_taken [memory_peers=0|1]
. /scenarios/lib.sh
. /scenarios/module_lib.sh

rel=$(uname -r)
standin=/lib/modules/$rel/kernel/drivers/video/nvidia-peermem.ko
dropin=/lib/modules/$rel/updates/dkms/nvidia-peermem.ko
[ -f "$standin" ] || fail "the stand-in for the driver's nvidia-peermem.ko is not staged ($standin)"
[ -f "$dropin" ] || fail "the drop-in nvidia-peermem.ko is not staged ($dropin)"
legacy=/extra/standins/nv_peer_mem.ko
[ -f "$legacy" ] || fail "the stand-in for the legacy nv_peer_mem.ko is not staged ($legacy)"

load_sim_stack generation="$generation"
load peermem_refclient name=nv_mem
dmesg -c >/dev/null
if [ "$PD_MEMORY_PEERS" = 1 ]; then
	try_load nvidia_peermem_rs 2>/tmp/insmod.err && fail "loaded while nv_mem was taken"
	grep -q "Device or resource busy" /tmp/insmod.err ||
		fail "the refused load did not fail with EBUSY: $(cat /tmp/insmod.err)"
	dmesg | grep -q "nvidia_peermem_rs: .*nv_mem.*unload it first (rmmod nvidia_peermem nv_peer_mem)" ||
		fail "no message saying what to unload: $(dmesg | grep nvidia_peermem_rs)"
	! loaded nvidia_peermem_rs || fail "module loaded"
	unload peermem_refclient
	load_module
	[ -r "$PM_PEERS"/nv_mem/version ] || fail "nv_mem not published after the other client left"
	name_taken=refused
else
	load_module
	n=$(dmesg | grep -c "peerdirect_sim: registered peer memory client nv_mem ")
	[ "$n" = 1 ] || fail "the core registered nv_mem $n times after the reference client's, want once more (no name check)"
	[ ! -e "$PM_PEERS" ] || fail "$PM_PEERS exists on a core without the tree"
	unload nvidia_peermem_rs peermem_refclient
	load_module
	name_taken=both-registered
fi
unload nvidia_peermem_rs

# refused_beside OTHER WHAT CMD...: loading module WHAT with CMD beside the
# loaded module OTHER fails with EBUSY, registers nothing with the core,
# and leaves one kernel-log line that says to unload OTHER.
refused_beside() {
	_other=$1 _what=$2
	shift 2
	dmesg -c >/dev/null
	"$@" 2>/tmp/insmod.err && fail "$_what loaded beside $_other"
	grep -q "Device or resource busy" /tmp/insmod.err ||
		fail "$_what's refusal beside $_other did not fail with EBUSY: $(cat /tmp/insmod.err)"
	# One line per attempt: busybox's insmod tries init_module again after
	# a refused finit_module, so the same line may come twice.
	_line=$(dmesg | grep "$_what: " | sed 's/^\[[^]]*\] *//' | sort -u)
	[ "$(echo "$_line" | wc -l)" = 1 ] || fail "$_what beside $_other: want one kernel-log line, got: $_line"
	case "$_line" in
	*"$_what: $_other is loaded "*"unload it first (rmmod $_other)") ;;
	*) fail "$_what's refusal beside $_other does not say what to unload: $_line" ;;
	esac
	! loaded "$_what" || fail "module $_what loaded beside $_other"
	! dmesg | grep -q "peerdirect_sim: registered peer memory client" ||
		fail "a client registered with the core during $_what's refused load beside $_other"
	log "$_what refused beside $_other: $_line"
}

# The module's own check, by module name, before it registers anything.
insmod "$standin" || fail "insmod of the stand-in nvidia_peermem failed"
refused_beside nvidia_peermem nvidia_peermem_rs try_load nvidia_peermem_rs
rmmod nvidia_peermem || fail "rmmod of the stand-in failed"

insmod "$legacy" || fail "insmod of the stand-in nv_peer_mem failed"
loaded nv_peer_mem || fail "the stand-in did not load as module nv_peer_mem"
refused_beside nv_peer_mem nvidia_peermem_rs insmod "$(mod_path nvidia_peermem_rs)"
refused_beside nv_peer_mem nvidia_peermem insmod "$dropin"
rmmod nv_peer_mem || fail "rmmod of the nv_peer_mem stand-in failed"

load_module
refused_beside nvidia_peermem_rs nvidia_peermem insmod "$dropin"
finish_clean
pass name_taken="$name_taken" refused_beside=nvidia_peermem,nvidia_peermem_rs,nv_peer_mem
