#!/bin/sh
# Scale mode: GPU pages alias a few physical chunks, so a 16 GiB (or SIZE)
# registration fits the VM: 1 page table entry per 64 KiB page (kvmalloc'd),
# every entry DMA-mapped, DMA at far offsets lands where the aliasing says.
#   fixture_scale.sh [gib=16]
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
bytes=$((${arg_gib:-16} * 1024 * 1024 * 1024))
load_sim_stack generation="${arg_generation:-modern}"
load_refclient
st config scale=4 >/dev/null
va=$(gpu_alloc "$bytes")
pages=$((bytes / 65536))
mr_reg "$va" "$bytes"
[ "$mr_sg" = $pages ] || fail "$pages SG entries expected, got $mr_sg"
expect_counter pages_pinned $pages
# the last page aliases chunk (pages - 1) % 4
off=$((bytes - 0x8000))
st hca-write "$mr_id" $off 0x8000 seed:11 cpu >/dev/null
st gpu-check $((va + off)) 0x8000 seed:11 >/dev/null
st gpu-check $((va + (pages - 1) % 4 * 65536 + 0x8000)) 0x8000 seed:11 >/dev/null
st hca-check "$mr_id" $((off + 0x7000)) 0x800 seed:11 edu $((0x7000)) >/dev/null
st mr-dereg "$mr_id" >/dev/null
st gpu-free "$va" >/dev/null
st config >/dev/null
no_leaks
teardown
pass entries=$pages
