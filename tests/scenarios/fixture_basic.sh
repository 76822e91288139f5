#!/bin/sh
# The MR path through the simulated core with the reference client: call
# order and counters (core, provider, sysfs), SG trimming, and DMA by the
# simulated HCA landing the right bytes at the right GPU offsets (CPU and edu
# engines), then a clean deregistration.
#   fixture_basic.sh generation=modern|mofed51|legacy abi=ex|plain|legacy
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
abi=${arg_abi:-ex}

load_sim_stack generation="$gen"
load_refclient abi="$abi"
expect_peer_attr ref_mem version 1.0-ref
expect_counter clients_registered 1
phase_reset

va=$(gpu_alloc 1M)
st gpu-fill "$va" 1M fill:0xa5 >/dev/null
# unaligned range: 0x1234 into the first 64 KiB page, ends inside the third
start=$((va + 0x1234))
len=$((0x20000))
mr_reg "$start" "$len"
[ "$mr_sg" = 3 ] || fail "3 SG entries expected, got $mr_sg"
[ "$mr_client" = ref_mem ] || fail "client $mr_client, expected ref_mem"
for p in acquire get_pages dma_map get_page_size; do
	expect_phase $p 1
done
for p in dma_unmap put_pages release; do
	expect_phase $p 0
done
expect_counter mrs_live 1
expect_counter num_alloc_mrs 1
expect_counter num_reg_pages 3
expect_counter num_reg_bytes $len
expect_counter pages_pinned 3
expect_counter page_tables_live 1
expect_counter dma_mappings_live 1
# acquire probes with a pin/unpin, then get_pages pins for real
expect_counter get_pages_calls 2
expect_counter put_pages_calls 1
expect_peer_attr ref_mem num_alloc_mrs 1
expect_peer_attr ref_mem num_reg_pages 3
expect_peer_attr ref_mem num_reg_bytes $len
st mr-query "$mr_id" | grep -q state=live || fail "MR not live"

# CPU engine: 32 KiB at MR offset 0x100, across the first page boundary
st hca-write "$mr_id" 0x100 0x8000 seed:7 cpu >/dev/null
st gpu-check $((start + 0x100)) 0x8000 seed:7 >/dev/null
st hca-check "$mr_id" 0x100 0x8000 seed:7 cpu >/dev/null
# edu engine (real emulated PCI DMA): 6 KiB across the second page boundary
off=$((0x10000 - 0x1234 - 0x800))
st hca-write "$mr_id" $off 0x1800 seed:9 edu >/dev/null
st gpu-check $((start + off)) 0x1800 seed:9 >/dev/null
st hca-check "$mr_id" $off 0x1800 seed:9 edu >/dev/null
st hca-check "$mr_id" 0x100 0x100 seed:7 edu >/dev/null
# the last byte of the MR, and nothing outside it was touched
st hca-write "$mr_id" $((len - 1)) 1 fill:0x5a cpu >/dev/null
st gpu-check $((start + len - 1)) 1 fill:0x5a >/dev/null
st gpu-check "$va" $((0x1334)) fill:0xa5 >/dev/null
st gpu-check $((start + len)) $((0x100000 - 0x1234 - len)) fill:0xa5 >/dev/null
st gpu-check $((start + 0x8100)) $((off - 0x8100)) fill:0xa5 >/dev/null
st_errno EINVAL hca-write "$mr_id" $((len - 1)) 2 fill:1 cpu

st mr-dereg "$mr_id" >/dev/null
for p in dma_unmap put_pages release; do
	expect_phase $p 1
done
expect_counter num_dealloc_mrs 1
# stuck at 0 from MLNX_OFED 5.5 on (the modern core)
if [ "$gen" = modern ]; then
	expect_counter num_dereg_pages 0
else
	expect_counter num_dereg_pages 3
fi
expect_counter num_dereg_bytes $len
expect_peer_attr ref_mem num_dealloc_mrs 1
expect_peer_attr ref_mem num_dereg_bytes $len
expect_peer_attr ref_mem num_free_callbacks 0
expect_counter free_callbacks 0
st_errno ENOENT mr-dereg "$mr_id"
st gpu-free "$va" >/dev/null
no_leaks
unload peermem_refclient
dmesg | grep "client ref_mem unregistered" | tail -n 1 | grep -q contexts_left=0 ||
	fail "the reference client leaked a context"
[ ! -d /sys/kernel/mm/memory_peers/ref_mem ] || fail "sysfs entry left"
teardown
pass mrs=1 dma_checks=9
