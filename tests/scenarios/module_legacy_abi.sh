#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A legacy (MLNX_OFED <= 5.0) core reads the extension words as the two
# private-data callbacks: it registers an extended client and then skips it
# for every MR. Only the invalidating nv_mem is an extended client at
# peerdirect_support=0: with persistent_api_support=0 the module, which
# tells the legacy core by its exports (ib_get_peer_client), does not
# register it and fails the load with a message, before the core sees it.
# The persistent client is a plain
# peer_memory_client whatever peerdirect_support says (as NVIDIA registers
# it), so the defaults (persistent_api_support=1) load and work on a legacy
# core too, and so does peerdirect_support=1.
. /scenarios/lib.sh
set -- generation=legacy
. /scenarios/module_lib.sh

# reg_roundtrip WHAT: one MR through the client, DMA both checked, nothing
# left.
reg_roundtrip() {
	sim gpu-alloc 128K
	kv_set va va "$out"
	sim mr-reg "$va" 128K
	kv_set mr mr "$out"
	[ "$(kv client "$out")" = nv_mem ] || fail "$1: the MR went to $(kv client "$out")"
	sim hca-write "$mr" 0 128K seed:9 edu
	sim gpu-check "$va" 128K seed:9
	sim mr-dereg "$mr"
	sim gpu-free "$va"
	no_leaks "$1"
}

load_sim_stack generation=legacy
dmesg -c >/dev/null
try_load nvidia_peermem_rs peerdirect_support=0 persistent_api_support=0 &&
	fail "extended invalidating client loaded on a legacy core"
dmesg | grep -q "nvidia_peermem_rs: not registering the extended client \"nv_mem\" with a legacy PeerDirect core" ||
	fail "no refusal message: $(dmesg | tail -n 5)"
dmesg | grep "nvidia_peermem_rs: not registering the extended client" | grep -q "peerdirect_support=1" ||
	fail "the refusal does not say peerdirect_support=1: $(dmesg | tail -n 5)"
if dmesg | grep "peerdirect_sim: " | grep -q "nv_mem"; then
	fail "the refused client reached the core: $(dmesg | grep "peerdirect_sim: " | grep nv_mem)"
fi

dmesg -c >/dev/null
try_load nvidia_peermem_rs peerdirect_support=0 ||
	fail "the persistent client (plain, as NVIDIA's) was refused by a legacy core: $(dmesg | tail -n 5)"
dmesg | grep -q "registered peer memory client nv_mem (version [^,]*, persistent)" ||
	fail "the core did not register nv_mem as a plain persistent client: $(dmesg | grep peer)"
reg_roundtrip "legacy core, peerdirect_support=0 persistent_api_support=1"
unload nvidia_peermem_rs

load nvidia_peermem_rs peerdirect_support=1
reg_roundtrip "legacy core, peerdirect_support=1"
finish_clean
pass
