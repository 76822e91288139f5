#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# The drop-in (issue 16): this project's module built as nvidia-peermem.ko,
# installed where DKMS puts it (/lib/modules/<kernel>/updates/dkms), is
# what `modprobe nvidia-peermem` loads by NVIDIA's name. NCCL's three
# detection paths exist, doctor names the implementation, the demo's
# validated transfer passes through it, and it unloads leaving nothing.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

rel=$(uname -r)
[ -f "/lib/modules/$rel/updates/dkms/nvidia-peermem.ko" ] ||
	fail "the drop-in nvidia-peermem.ko is not staged under updates/dkms"
load_sim_stack generation=modern
depmod || fail "depmod failed"
modprobe nvidia-peermem persistent_api_support=0 || fail "modprobe nvidia-peermem failed"
[ -d /sys/module/nvidia_peermem ] || fail "modprobe nvidia-peermem did not load module nvidia_peermem"
[ ! -d /sys/module/nvidia_peermem_rs ] || fail "nvidia_peermem_rs was loaded instead"
# The module under NVIDIA's name is ours: our parameter and version.
[ -e /sys/module/nvidia_peermem/parameters/coalesce_sg ] ||
	fail "the loaded nvidia_peermem is not this project's (no coalesce_sg)"
for p in /sys/kernel/mm/memory_peers/nv_mem/version \
	/sys/kernel/mm/memory_peers/nv_mem_nc/version \
	/sys/module/nvidia_peermem/version; do
	[ -r "$p" ] || fail "NCCL detection path $p missing"
	log "$p: $(cat "$p")"
done
doc=$(peermem-check doctor 2>&1)
echo "$doc" | grep -q "nvidia_peermem loaded (nvidia-peermem-rs drop-in" ||
	fail "doctor does not name the drop-in: $(echo "$doc" | grep -i peer-memory)"
check "validate --backend sim passes through the drop-in" \
	peermem-check validate --backend sim --size 1M --iterations 2
# busybox's modprobe -r also tries the dependencies (the simulated core and
# provider, still in use here) and then exits non-zero: judge by /sys/module.
modprobe -r nvidia-peermem 2>/dev/null
[ ! -d /sys/module/nvidia_peermem ] || fail "modprobe -r nvidia-peermem left nvidia_peermem loaded"
[ ! -e /sys/kernel/mm/memory_peers/nv_mem ] || fail "nv_mem still registered after unload"
unload_sim_stack
no_new_leaks
pass nccl_paths=3 implementation=drop-in leaks="$LEAKS"
