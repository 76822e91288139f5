#!/bin/sh
# A persistent client (no invalidate function, nvidia_p2p_get/put_pages_
# persistent): cudaFree fires no callback and the pinned memory stays usable
# until the last put. With the provider's persistent API off (-ENOTSUPP, as
# on MIG/vGPU) the client cannot pin and nothing is registered.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
load_sim_stack generation="${arg_generation:-modern}"
load_refclient persistent=1 abi=plain
va=$(gpu_alloc 192K)
mr_reg $((va + 0x8000)) $((0x20000))
[ "$mr_sg" = 3 ] || fail "3 SG entries expected, got $mr_sg"
st hca-write "$mr_id" 0 0x4000 seed:3 cpu >/dev/null
st gpu-free "$va" >/dev/null
expect_counter free_callbacks 0
expect_counter gpu_allocs_live 0
expect_counter pages_pinned 3
st mr-query "$mr_id" | grep -q state=live || fail "persistent MR invalidated"
st hca-check "$mr_id" 0 0x4000 seed:3 cpu >/dev/null
st hca-write "$mr_id" 0x10000 0x800 seed:4 edu >/dev/null
st hca-check "$mr_id" 0x10000 0x800 seed:4 cpu >/dev/null
st mr-dereg "$mr_id" >/dev/null
expect_counter pages_pinned 0
no_leaks

va=$(gpu_alloc 64K)
st config persistent=0 >/dev/null
st_errno EFAULT mr-reg "$va" 4096
st config persistent=1 >/dev/null
mr_reg "$va" 4096
st mr-dereg "$mr_id" >/dev/null
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass
