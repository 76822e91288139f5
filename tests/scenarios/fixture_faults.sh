#!/bin/sh
# Every fault knob and delay point of the fixtures, with the reference client:
# the injected error comes out of mr-reg (or is absorbed where the contract
# says so), the core unwinds in order, and nothing leaks afterwards.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
load_sim_stack generation="${arg_generation:-modern}"
load_refclient
va=$(gpu_alloc 256K)
n=0

# reg_fails OP NTH ERRNO EXPECTED_ERRNO: arm, register, expect the error.
reg_fails() {
	st fault "$1" "$2" "$3" >/dev/null
	st_errno "$4" mr-reg "$va" 0x30000
	expect_counter mrs_live 0
	st fault-clear >/dev/null
	no_leaks_but_alloc
	n=$((n + 1))
}

# everything released except the one allocation
no_leaks_but_alloc() {
	simtest_to _l leak-check
	for k in pages_pinned page_tables_live dma_mappings_live mrs_live; do
		[ "$(kv $k "$_l")" = 0 ] || fail "leak after fault: $_l"
	done
}

# provider get_pages: the acquire probe (1st call) -> not mine -> EFAULT;
# the real pin (2nd call) -> its errno, then release only
phase_reset
reg_fails get_pages 1 EIO EFAULT
expect_phase release 0
phase_reset
reg_fails get_pages 2 ENOMEM ENOMEM
expect_phase dma_map 0
expect_phase put_pages 0
expect_phase release 1
# provider dma_map_pages: put_pages and release follow, no dma_unmap
phase_reset
reg_fails dma_map_pages 1 ENOMEM ENOMEM
expect_phase put_pages 1
expect_phase dma_unmap 0
expect_phase release 1
# core: allocation of the MR, allocation of the SG table
phase_reset
reg_fails acquire_alloc 1 ENOMEM ENOMEM
expect_phase acquire 0
phase_reset
reg_fails sg_alloc 1 ENOMEM ENOMEM
expect_phase dma_map 0
expect_phase put_pages 1
expect_phase release 1
# the HCA fails to create the MR, the umem got (the mapping lock still
# held for an invalidating client): mlx5 stops the notifier and releases
# the umem; the client unmaps, unpins and is released (MLNX_OFED 5.4-3 ..
# 24.10 deadlock there instead, docs/real-core.md)
phase_reset
reg_fails hca_mr_create 1 ENOMEM ENOMEM
expect_phase dma_unmap 1
expect_phase put_pages 1
expect_phase release 1
# count: fail 2 calls in a row starting with the 2nd
st fault get_pages 2 EIO 2 >/dev/null
st_errno EIO mr-reg "$va" 4096
st_errno EFAULT mr-reg "$va" 4096
mr_reg "$va" 4096
st mr-dereg "$mr_id" >/dev/null
no_leaks_but_alloc

# provider dma_unmap_pages failing at deregistration: the client ignores
# it, put_pages then frees the mapping with the page table
mr_reg "$va" 0x20000
st fault dma_unmap_pages 1 EIO >/dev/null
st mr-dereg "$mr_id" >/dev/null
no_leaks_but_alloc

# provider put_pages failing at deregistration: the pin stays (the leak
# check sees it) until cudaFree fires the callback, whose invalidation then
# names an MR the core no longer has (unknown ticket: ignored, returns 0)
mr_reg "$va" 0x20000
st fault put_pages 1 EIO >/dev/null
st mr-dereg "$mr_id" >/dev/null
[ "$(counter pages_pinned)" = 2 ] || fail "a failed put_pages unpinned"
[ "$(counter page_tables_live)" = 1 ] || fail "page table not kept"
before=$(counter num_free_callbacks)
st gpu-free "$va" >/dev/null
expect_counter num_free_callbacks $((before + 1))
no_leaks
va=$(gpu_alloc 256K)

# the free callback's own calls failing: no leak, as with the driver (515
# on), which frees the page table and its mappings itself once the callback
# returns (free_page_table/free_dma_mapping are no-ops there)
mr_reg "$va" 0x10000
st fault free_page_table 1 EIO >/dev/null
st fault free_dma_mapping 1 EIO >/dev/null
st gpu-free "$va" >/dev/null
st mr-dereg "$mr_id" >/dev/null
simtest_to l leak-check || fail "the driver did not free the page table after the callback: $l"
expect_counter faults_injected 12

# provider knobs the client must refuse: page size, struct versions
va=$(gpu_alloc 128K)
for cfg in page_size=4k page_size=128k pt_version=0x00030000 \
	pt_version=0x00010001 map_version=0x00030003 map_version=0x00020002; do
	st config $cfg >/dev/null
	st_errno EINVAL mr-reg "$va" 4096
	st config >/dev/null
done
# newer minor versions are compatible
st config pt_version=0x00010009 map_version=0x00020007 >/dev/null
mr_reg "$va" 4096
st mr-dereg "$mr_id" >/dev/null
st config >/dev/null

# delay points: each is taken once
for p in get_pages dma_map p2p_get_pages p2p_dma_map; do
	st delay $p 50 1 >/dev/null
done
d0=$(counter delays_taken)
mr_reg "$va" 4096
expect_counter delays_taken $((d0 + 4))
st delay core_dereg_locked 50 1 >/dev/null
st mr-dereg "$mr_id" >/dev/null
mr_reg "$va" 4096
for p in free_cb_before free_cb_after core_invalidate; do
	st delay $p 50 1 >/dev/null
done
st gpu-free "$va" >/dev/null
st mr-dereg "$mr_id" >/dev/null
expect_counter delays_taken $((d0 + 8))
st_errno EINVAL delay no_such_point 10
# a delay point is a gate: held until released (its 60 s are the deadline)
va=$(gpu_alloc 128K)
st delay get_pages 60000 1 >/dev/null
(st mr-reg "$va" 4096 >/tmp/gate.reg 2>&1; echo "rc=$?" >>/tmp/gate.reg) &
gate_reg=$!
n=0
while [ "$(counter delays_held)" != 1 ] && [ $n -lt 500 ]; do
	nap 0.02
	n=$((n + 1))
done
expect_counter delays_held 1
st release dma_map >/dev/null
nap 0.2
kill -0 $gate_reg 2>/dev/null || fail "a release of another point let the held registration go"
st release get_pages >/dev/null
wait $gate_reg
grep -q "^rc=0" /tmp/gate.reg || fail "the released registration failed: $(cat /tmp/gate.reg)"
expect_counter delays_held 0
kv_set mr_id mr "$(cat /tmp/gate.reg)"
st mr-dereg "$mr_id" >/dev/null
st gpu-free "$va" >/dev/null
st_errno EINVAL release no_such_point
st_errno EINVAL fault no_such_op 1 EIO

unload peermem_refclient
teardown
no_new_leaks
pass faults=$n leaks="$LEAKS"
