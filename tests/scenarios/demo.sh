#!/bin/sh
# make demo: load the simulated GPUDirect stack and nvidia_peermem_rs, show
# what a user would look at, and validate a transfer end to end.
. /scenarios/lib.sh
load_sim_stack generation=modern
load nvidia_peermem_rs persistent_api_support=0
echo "---- lsmod"
lsmod
echo "---- /sys/module/nvidia_peermem_rs/version: $(cat /sys/module/nvidia_peermem_rs/version)"
echo "---- NCCL's detection paths"
for p in /sys/kernel/mm/memory_peers/nv_mem/version \
	/sys/kernel/mm/memory_peers/nv_mem_nc/version; do
	echo "$p: $(cat "$p" 2>/dev/null || echo missing)"
done
check "nv_mem is published" test -r /sys/kernel/mm/memory_peers/nv_mem/version
echo "---- peermem-check doctor"
peermem-check doctor || log "doctor reports problems (expected in a VM without a GPU driver)"
echo "---- peermem-check validate --backend sim"
check "validate --backend sim passes" peermem-check validate --backend sim --size 1M --iterations 2
echo "---- counters after validate"
simtest counters
unload nvidia_peermem_rs
unload_sim_stack
no_new_leaks
pass validated=yes leaks="$LEAKS"
