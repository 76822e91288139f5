#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# The drop-in (issue 16): this project's module built as nvidia-peermem.ko,
# installed where DKMS puts it (/lib/modules/<kernel>/updates/dkms), beside
# a stand-in for the NVIDIA driver's own copy (kernel/drivers/video, as
# NVIDIA's installer puts it). `modprobe nvidia-peermem` loads ours by
# NVIDIA's name; on a core without /sys/kernel/mm/memory_peers (DOCA-OFED
# 23.10+ on Linux 6.6+) NCCL and UCX see it (/sys/module/nvidia_peermem/
# version), doctor names the implementation and says so, the demo's
# validated transfer passes through it, it
# unloads leaving nothing; removing it (as `dkms remove` does: delete the
# file, depmod) gives the driver's copy back to `modprobe nvidia-peermem`.
# The copy under test is the one DKMS built from the drop-in package's tree
# when make packaging-test handed it over (/extra/dropin); without it the
# build's copy goes through the same steps and the scenario reports a skip.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

# kmod's depmod/modprobe (tests/vm/mkinitramfs.sh puts them at /opt/kmod):
# their search order (updates/ before the kernel's own directories) is what
# makes the drop-in win on a node; busybox's has none.
[ -x /opt/kmod/modprobe ] || fail "kmod's modprobe is not in the VM (/opt/kmod)"
kdepmod() { /opt/kmod/depmod; }
modprobe() { /opt/kmod/modprobe "$@"; }
# The r525 provider build exports the same symbols as the loaded provider;
# kept out of depmod's sight here so modprobe resolves to the loaded one,
# and put back at the end.
r525=$(mod_path nvidia_p2p_sim_r525)
if [ -n "$r525" ]; then
	mv "$r525" /tmp/ || fail "cannot set the r525 provider aside"
fi
restore_r525() {
	if [ -n "$r525" ]; then
		mv "/tmp/$(basename "$r525")" "$r525"
		/opt/kmod/depmod
	fi
}

rel=$(uname -r)
ours=/lib/modules/$rel/updates/dkms/nvidia-peermem.ko
theirs=/lib/modules/$rel/kernel/drivers/video/nvidia-peermem.ko
source=build
if [ -f /extra/dropin/nvidia-peermem.ko ]; then
	cp /extra/dropin/nvidia-peermem.ko "$ours" || fail "cannot stage the DKMS-built drop-in"
	source=dkms
fi
[ -f "$ours" ] || fail "the drop-in nvidia-peermem.ko is not staged under updates/dkms"
[ -f "$theirs" ] || fail "the stand-in for the driver's nvidia-peermem.ko is not staged"
log "drop-in from the $source build; the driver's copy: $theirs"
# shellcheck disable=SC2034 # read by lib.sh's load_sim_stack
PD_MEMORY_PEERS=0
load_sim_stack generation=modern
kdepmod || fail "depmod failed"
modprobe nvidia-peermem persistent_api_support=0 || fail "modprobe nvidia-peermem failed"
[ -d /sys/module/nvidia_peermem ] || fail "modprobe nvidia-peermem did not load module nvidia_peermem"
[ ! -d /sys/module/nvidia_peermem_rs ] || fail "nvidia_peermem_rs was loaded instead"
# The module under NVIDIA's name is ours: our parameter and version.
[ -e /sys/module/nvidia_peermem/parameters/coalesce_sg ] ||
	fail "modprobe nvidia-peermem loaded the driver's copy, not the drop-in"
[ ! -e /sys/kernel/mm/memory_peers ] || fail "the core publishes memory_peers: not the core without it"
p=/sys/module/nvidia_peermem/version
[ -r "$p" ] || fail "NCCL and UCX detection path $p missing"
log "$p: $(cat "$p")"
doc=$(peermem-check doctor 2>&1)
echo "$doc" | grep -qF "[PASS] NCCL / UCX will use GPUDirect RDMA: yes (via $p)" ||
	fail "doctor does not say NCCL and UCX see the drop-in: $(echo "$doc" | grep 'NCCL / UCX')"
echo "$doc" | grep -q "nvidia_peermem loaded (nvidia-peermem-rs drop-in" ||
	fail "doctor does not name the drop-in: $(echo "$doc" | grep -i peer-memory)"
# doctor reads depmod's choice as modprobe does, and tells ours by its .modinfo.
echo "$doc" | grep -qF "[PASS] modprobe nvidia-peermem: loads the nvidia-peermem-rs drop-in: $ours" ||
	fail "doctor does not say modprobe nvidia-peermem loads the drop-in: $(echo "$doc" | grep -F 'modprobe nvidia-peermem')"
check "validate --backend sim passes through the drop-in" \
	peermem-check validate --backend sim --size 1M --iterations 2
# modprobe -r also tries the dependencies (the simulated core and provider,
# still in use here) and then exits non-zero: judge by /sys/module.
modprobe -r nvidia-peermem 2>/dev/null
[ ! -d /sys/module/nvidia_peermem ] || fail "modprobe -r nvidia-peermem left nvidia_peermem loaded"
# This core has no memory_peers tree (checked above): its own count of
# clients says whether the drop-in's exit unregistered nv_mem.
simtest_to sim_counters counters || fail "simtest counters: $sim_counters"
[ "$(kv clients_registered "$sim_counters")" = 0 ] ||
	fail "nv_mem still registered with the core after unload: $sim_counters"
unload_sim_stack

# Removing the drop-in gives the driver's copy back.
rm -f "$ours"
kdepmod || fail "depmod after removing the drop-in failed"
doc=$(peermem-check doctor 2>&1)
echo "$doc" | grep -qF "modprobe nvidia-peermem: loads NVIDIA's module: $theirs" ||
	fail "doctor does not say modprobe nvidia-peermem loads the driver's copy: $(echo "$doc" | grep -F 'modprobe nvidia-peermem')"
modprobe nvidia-peermem || fail "modprobe nvidia-peermem failed once the drop-in was removed"
[ -d /sys/module/nvidia_peermem ] || fail "the driver's copy did not load"
[ ! -e /sys/module/nvidia_peermem/parameters/coalesce_sg ] ||
	fail "the drop-in still loads after its removal"
[ "$(cat /sys/module/nvidia_peermem/version)" = 580.95.05 ] ||
	fail "an unexpected nvidia_peermem loaded: version $(cat /sys/module/nvidia_peermem/version)"
rmmod nvidia_peermem || fail "rmmod of the driver's copy failed"
restore_r525
no_new_leaks
# The scenario is for the copy DKMS built from the drop-in package: the
# build's copy passing everything above is not that test.
[ "$source" = dkms ] || skip "no DKMS-built drop-in (/extra/dropin, from make packaging-test): only the build's copy was tested" \
	visible_via=sys_module dropin_from="$source" leaks="$LEAKS"
pass visible_via=sys_module implementation=drop-in dropin_from="$source" restored=driver-copy leaks="$LEAKS"
