#!/bin/sh
# cudaFree of registered GPU memory: the provider fires the free callback
# under its driver mutex, the reference client invalidates through the core.
# Flow 1 (modern core, client opted in with PEER_MEM_INVALIDATE_UNMAPS): the
# core calls neither dma_unmap nor put_pages during the invalidation, nor at
# deregistration (the MR is INVALIDATED: the client unmapped itself). Flow 2
# (anything else): the core calls both from inside the invalidation, not
# again later. The legacy core (4.9) calls release there too.
#   fixture_invalidate.sh generation=modern|mofed51|legacy abi=ex|plain|legacy
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
abi=${arg_abi:-ex}
self_unmaps=0
[ "$gen" = modern ] && [ "$abi" = ex ] && self_unmaps=1
# expect_teardown_calls: dma_unmap and put_pages were called once each by
# the core in the flow without PEER_MEM_INVALIDATE_UNMAPS, never with it
# (the client released them itself in its free callback).
expect_teardown_calls() {
	_n=1
	[ $self_unmaps = 1 ] && _n=0
	expect_phase dma_unmap $_n
	expect_phase put_pages $_n
}

load_sim_stack generation="$gen"
load_refclient abi="$abi"
va=$(gpu_alloc 256K)
mr_reg $((va + 0x10000)) $((0x20000))
[ "$mr_sg" = 2 ] || fail "2 SG entries expected, got $mr_sg"
st hca-write "$mr_id" 0 0x1000 seq cpu >/dev/null
phase_reset

st gpu-free "$va" >/dev/null
expect_counter free_callbacks 1
expect_counter num_free_callbacks 1
expect_peer_attr ref_mem num_free_callbacks 1
expect_phase invalidate 1
st mr-query "$mr_id" | grep -q state=invalidated || fail "MR not invalidated"
# the client released the dead page table and mapping in its callback
expect_counter pages_pinned 0
expect_counter page_tables_live 0
expect_counter dma_mappings_live 0
expect_counter gpu_allocs_live 0
expect_teardown_calls
# the HCA can no longer reach the memory
st_errno EIO hca-write "$mr_id" 0 16 seq cpu
st_errno EIO hca-check "$mr_id" 0 16 seq edu
# MLNX_OFED 4.9: its mlx5 releases the umem from inside the invalidation,
# so the client's release ran inside its own free callback; the others
# release at deregistration.
if [ "$gen" = legacy ]; then
	expect_phase release 1
	expect_counter mrs_live 0
	expect_counter num_dealloc_mrs 1
	[ "$(counter win_release_in_invalidation)" -ge 1 ] ||
		fail "release did not run inside the invalidation"
else
	expect_phase release 0
	expect_counter mrs_live 1
fi

st mr-dereg "$mr_id" >/dev/null
# Neither flow calls them again: the real core (peer_mem.c's
# ib_unmap_peer_client) calls the client only for MAPPED -> UNMAPPED, and
# the MR is INVALIDATED (flow 1) or UNMAPPED (flow 2) by now. Flow 1 calls
# them after an invalidation only when it lands between the deregistration's
# unlock and its dma_unmap (rel_field bug=double_unmap forces that).
expect_teardown_calls
expect_phase release 1
expect_counter mrs_live 0
expect_counter num_dealloc_mrs 1
expect_counter put_pages_calls 1	# the acquire probe's only
no_leaks
unload peermem_refclient
dmesg | grep "client ref_mem unregistered" | tail -n 1 |
	grep -q "invalidations=1 .*contexts_left=0" ||
	fail "the reference client did not see one invalidation or leaked"
teardown
pass flow=$([ $self_unmaps = 1 ] && echo client-unmaps || echo core-unmaps)
