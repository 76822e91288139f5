#!/bin/sh
# Registration rules: the mandatory-op check (and get_page_size, which the
# real cores call without a check), name uniqueness (sysfs),
# acquire in registration order, declined and unclaimed ranges (-EFAULT, what
# ibv_reg_mr gives on GPU memory without a client), the register fault knob.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
load_sim_stack generation="${arg_generation:-modern}"
va=$(gpu_alloc 128K)

# nobody registered: the range is nobody's
st_errno EFAULT mr-reg "$va" 4096

# each mandatory op
for op in acquire get_pages put_pages dma_map dma_unmap; do
	if try_load peermem_refclient omit=$op 2>/dev/null; then
		fail "a client without $op was registered"
	fi
	dmesg_has "lacks the mandatory op $op" || fail "no message for $op"
done
# release is optional
load_refclient omit=release name=ref_norel
unload peermem_refclient
# get_page_size is not: the cores from MLNX_OFED 5.1-2.3.7.1 on take such a
# client and call it unconditionally at its first MR (an oops on a node;
# the simulator refuses the MR and says why), 4.9 refuses the client
# (fixture_generations)
load_refclient omit=get_page_size name=ref_nops
st_errno EFAULT mr-reg "$va" 4096
dmesg_has "client ref_nops has no get_page_size" ||
	fail "no message for a client without get_page_size"
unload peermem_refclient

# a taken name
load_refclient name=ref_mem
if try_load peermem_refclient2 name=ref_mem 2>/dev/null; then
	fail "two clients named ref_mem"
fi
dmesg_has "named ref_mem is already registered" || fail "no message for the name"
expect_counter clients_registered 1

# registration order: ref_mem first
load peermem_refclient2 name=ref_two
[ -d /sys/kernel/mm/memory_peers/ref_two ] || fail "no sysfs dir for ref_two"
mr_reg "$va" 4096
[ "$mr_client" = ref_mem ] || fail "first client ref_mem expected, got $mr_client"
st mr-dereg "$mr_id" >/dev/null
unload peermem_refclient
[ ! -d /sys/kernel/mm/memory_peers/ref_mem ] || fail "ref_mem's sysfs dir left"
load_refclient name=ref_mem
mr_reg "$va" 4096
[ "$mr_client" = ref_two ] || fail "ref_two (now first) expected, got $mr_client"
st mr-dereg "$mr_id" >/dev/null
unload peermem_refclient peermem_refclient2

# a client that declines everything: the next one is asked
load_refclient name=ref_no decline=1
load peermem_refclient2 name=ref_yes
phase_reset
mr_reg $((va + 100)) 5000
[ "$mr_client" = ref_yes ] || fail "ref_yes expected, got $mr_client"
expect_phase acquire 2
st mr-dereg "$mr_id" >/dev/null
# not GPU memory: every client says no
phase_reset
st_errno EFAULT mr-reg 0x10000 4096
expect_phase acquire 2
expect_phase get_pages 0
unload peermem_refclient peermem_refclient2

# the register fault knob (count 2: busybox insmod retries a failed load)
st fault register_client 1 ENOMEM 2 >/dev/null
if try_load peermem_refclient 2>/dev/null; then
	fail "register_client fault not injected"
fi
st fault-clear >/dev/null
load_refclient
unload peermem_refclient
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass
