#!/bin/sh
# The stop notifier's two branches that MLNX_OFED 5.4-3 .. 24.10 swap
# (generation=modern2410) and 25.04 fixed (modern): a persistent client's
# deregistration (unmapped without the mapping lock on the older cores,
# whose lock they then release unheld), and an MR whose creation in the HCA
# fails before activation (mlx5 stops the notifier with the mapping lock
# still held: the older cores lock it again and the registration
# deadlocks; the fixture says so and goes on). Either way the client is
# unmapped, unpinned and released, and nothing leaks.
#   fixture_stop.sh generation=modern|modern2410
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
load_sim_stack generation="$gen"
va=$(gpu_alloc 128K)

load_refclient persistent=1 abi=plain
phase_reset
mr_reg "$va" 64K
st mr-dereg "$mr_id" >/dev/null
expect_phase dma_unmap 1
expect_phase put_pages 1
expect_phase release 1
n=$(dmesg_count "this core unmaps without the mapping lock, then unlocks it unheld")
case "$gen,$n" in
modern2410,1 | modern,0) ;;
*) fail "$gen core, persistent deregistration: $n unlocked stops said" ;;
esac
unload peermem_refclient

load_refclient
phase_reset
st fault hca_mr_create 1 ENOMEM >/dev/null
st_errno ENOMEM mr-reg "$va" 64K
st fault-clear >/dev/null
expect_phase dma_unmap 1
expect_phase put_pages 1
expect_phase release 1
n=$(dmesg_count "this core takes the mapping lock its caller holds")
case "$gen,$n" in
modern2410,1 | modern,0) ;;
*) fail "$gen core, MR creation failed: $n self-deadlocks said" ;;
esac
mr_reg "$va" 64K
st mr-dereg "$mr_id" >/dev/null
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass
