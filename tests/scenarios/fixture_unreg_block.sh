#!/bin/sh
# ib_unregister_peer_memory_client blocks until every MR of the client is
# gone: rmmod of the client hangs while an MR is live, and finishes once it
# is deregistered. The reference client takes a module reference per
# registration (rmmod is refused instead), so this runs it without
# (defects=no_module_ref) to get as far as the core's unregister.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
load_sim_stack generation="${arg_generation:-modern}"
load_refclient defects=no_module_ref
va=$(gpu_alloc 64K)
mr_reg "$va" 65536
rmmod peermem_refclient &
rm_pid=$!
sleep 3
kill -0 $rm_pid 2>/dev/null || fail "rmmod returned while an MR was live"
dmesg_has "unregister ref_mem: waiting for 1 registrations" ||
	fail "the core did not say it waits"
# the client still works meanwhile
st hca-write "$mr_id" 0 64 seq cpu >/dev/null
st mr-dereg "$mr_id" >/dev/null
wait $rm_pid || fail "rmmod failed"
loaded peermem_refclient && fail "client still loaded"
expect_counter clients_registered 0
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass blocked_s=3
