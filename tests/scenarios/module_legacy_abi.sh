#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A legacy (MLNX_OFED <= 5.0) core reads the extension words as the two
# private-data callbacks: with peerdirect_support=0 it refuses the client
# and our load fails with a message; peerdirect_support=1 loads and works.
. /scenarios/lib.sh
set -- generation=legacy
. /scenarios/module_lib.sh

load_sim_stack generation=legacy
dmesg -c >/dev/null
try_load nvidia_peermem_rs peerdirect_support=0 && fail "extended client loaded on a legacy core"
dmesg | grep -q "nvidia_peermem_rs: the PeerDirect core refused client \"nv_mem\"" ||
	fail "no refusal message: $(dmesg | tail -n 5)"
load nvidia_peermem_rs peerdirect_support=1
sim gpu-alloc 128K
va=$(kv va "$out")
sim mr-reg "$va" 128K
mr=$(kv mr "$out")
sim hca-write "$mr" 0 128K seed:9 edu
sim gpu-check "$va" 128K seed:9
sim mr-dereg "$mr"
sim gpu-free "$va"
no_leaks "legacy ABI"
finish_clean
pass
