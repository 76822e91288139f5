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

# unmapped, unpinned and released: the provider's counts, and the client's
# own at its unload (the real core in place of this one times no phase)
released() {
	expect_counter dma_mappings_live 0
	expect_counter pages_pinned 0
	unload peermem_refclient
	dmesg | grep "client ref_mem unregistered" | tail -n 1 |
		grep -q "contexts_left=0" || fail "$1: a context was not released"
}

load_refclient persistent=1 abi=plain
mr_reg "$va" 64K
st mr-dereg "$mr_id" >/dev/null
n=$(dmesg_count "this core unmaps without the mapping lock, then unlocks it unheld")
case "$gen,$n" in
modern2410,1 | modern,0) ;;
*) fail "$gen core, persistent deregistration: $n unlocked stops said" ;;
esac
released "persistent deregistration"

load_refclient
st fault hca_mr_create 1 ENOMEM >/dev/null
st_errno ENOMEM mr-reg "$va" 64K
st fault-clear >/dev/null
n=$(dmesg_count "this core takes the mapping lock its caller holds")
case "$gen,$n" in
modern2410,1 | modern,0) ;;
*) fail "$gen core, MR creation failed: $n self-deadlocks said" ;;
esac
released "failed MR creation"
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass
