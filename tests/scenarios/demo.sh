#!/bin/sh
# shellcheck disable=SC1091 # lib.sh, at /scenarios in the VM
# make demo: what a node the module targets gets from the default install.
# `make deb` and DKMS install the drop-in by default (PEERMEM_DROPIN ?= 1:
# nvidia-peermem.ko, module nvidia_peermem, under updates/dkms, where
# tests/vm/mkinitramfs.sh stages it), and the node's PeerDirect core has
# no /sys/kernel/mm/memory_peers (DOCA-OFED 23.10+ on Linux 6.6+). The demo
# loads it as a user does, `modprobe nvidia-peermem` with its default
# parameters, shows which of the files NCCL and UCX test exist, runs the
# tool's doctor and validates a transfer end to end.
. /scenarios/lib.sh

# kmod's depmod and modprobe, as a node has them (/opt/kmod): their search
# order (updates/ first) is what picks the drop-in over the driver's copy.
[ -x /opt/kmod/modprobe ] || fail "kmod's modprobe is not in the VM (/opt/kmod)"
rel=$(uname -r)
dropin=/lib/modules/$rel/updates/dkms/nvidia-peermem.ko
[ -f "$dropin" ] || fail "the default install's module is not staged ($dropin)"
# The r525 provider exports the loaded provider's symbols too: out of
# depmod's sight while modprobe resolves them, put back at the end.
r525=$(mod_path nvidia_p2p_sim_r525)
if [ -n "$r525" ]; then
	mv "$r525" /tmp/ || fail "cannot set the r525 provider aside"
fi

# shellcheck disable=SC2034 # read by lib.sh's load_sim_stack
PD_MEMORY_PEERS=0
load_sim_stack generation=modern
/opt/kmod/depmod || fail "depmod failed"
echo "---- the default install: $dropin (module nvidia_peermem), loaded by: modprobe nvidia-peermem"
/opt/kmod/modprobe nvidia-peermem || fail "modprobe nvidia-peermem failed"
[ -e /sys/module/nvidia_peermem/parameters/coalesce_sg ] ||
	fail "modprobe nvidia-peermem loaded something else than this project's drop-in"
echo "---- lsmod"
lsmod
echo "---- /sys/module/nvidia_peermem/version: $(cat /sys/module/nvidia_peermem/version)"
for p in peerdirect_support persistent_api_support coalesce_sg; do
	echo "     $p=$(cat /sys/module/nvidia_peermem/parameters/$p) (default)"
done
echo "---- the PeerDirect core: /sys/kernel/mm/memory_peers $([ -e /sys/kernel/mm/memory_peers ] && echo present || echo 'absent (as DOCA-OFED 23.10+ on Linux 6.6+)')"
[ ! -e /sys/kernel/mm/memory_peers ] || fail "the core publishes memory_peers: not the core a node has"
echo "---- the files NCCL (>= 2.23.4) and UCX (>= 1.18.0) test"
for p in /sys/kernel/mm/memory_peers/nv_mem/version \
	/sys/kernel/mm/memory_peers/nv_mem_nc/version \
	/sys/module/nvidia_peermem/version \
	/sys/module/nv_peer_mem/version; do
	echo "$p: $(cat "$p" 2>/dev/null || echo missing)"
done
check "NCCL and UCX find /sys/module/nvidia_peermem/version" test -r /sys/module/nvidia_peermem/version
echo "---- peermem-check doctor"
doc=$(peermem-check doctor 2>&1)
echo "$doc"
want="[PASS] NCCL / UCX will use GPUDirect RDMA: yes (via /sys/module/nvidia_peermem/version) for NCCL >= 2.23.4, UCX >= 1.18.0"
echo "$doc" | grep -qF "$want" ||
	fail "doctor does not say NCCL and UCX see the default install: $(echo "$doc" | grep 'NCCL / UCX')"
echo "---- peermem-check validate --backend sim"
check "validate --backend sim passes" peermem-check validate --backend sim --size 1M --iterations 2
echo "---- counters after validate"
simtest counters
rmmod nvidia_peermem || fail "rmmod nvidia_peermem failed"
unload_sim_stack
if [ -n "$r525" ]; then
	mv "/tmp/$(basename "$r525")" "$r525" && /opt/kmod/depmod
fi
no_new_leaks
pass validated=yes module=nvidia_peermem memory_peers=absent leaks="$LEAKS"
