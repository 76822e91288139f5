#!/bin/sh
# Buffers in GPU memory that are not MRs (a CQ, QP or SRQ buffer; a doorbell
# record): mlx5 gets their umems without IB_PEER_MEM_INVAL_SUPP, so the core
# asks only persistent clients (an invalidating client registered first is
# skipped), and releases them with no stop notifier. A doorbell umem is the
# one 4 KiB page holding the record. Also run against MLNX_OFED's real core
# (docs/real-core.md).
#   fixture_umem.sh generation=modern|mofed51
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
# PSIM_ACCESS_UMEM | local write, PSIM_ACCESS_DOORBELL | local write
cq_access=0x101
db_access=0x201
load_sim_stack generation="$gen"
load_refclient name=ref_inv
va=$(gpu_alloc 192K)
# an invalidating client alone: a CQ buffer in GPU memory is nobody's
st_errno EFAULT mr-reg "$va" 64K "$cq_access"

load peermem_refclient2 name=ref_pers persistent=1 abi=plain log_args=1
# an MR still goes to the first client
mr_reg "$va" 64K
[ "$mr_client" = ref_inv ] || fail "an MR went to $mr_client, not ref_inv"
st mr-dereg "$mr_id" >/dev/null

# a CQ buffer: to the persistent client, skipping the invalidating one
_o=$(st mr-reg "$va" 128K "$cq_access") || exit 1
kv_set cq mr "$_o"
[ "$(kv client "$_o")" = ref_pers ] || fail "a CQ buffer went to: $_o"
st hca-write "$cq" 0x100 0x1000 seed:5 cpu >/dev/null
st gpu-check $((va + 0x100)) 0x1000 seed:5 >/dev/null

# a doorbell record 0x40 into the second 64 KiB page: its 4 KiB page only,
# a GPU page the CQ buffer pins too
_o=$(st mr-reg $((va + 0x10040)) 8 "$db_access") || exit 1
kv_set db mr "$_o"
[ "$(kv client "$_o")" = ref_pers ] || fail "a doorbell went to: $_o"
q=$(st mr-query "$db")
[ "$(kv va "$q")" = "$(printf '0x%x' $((va + 0x10000)))" ] &&
	[ "$(kv len "$q")" = 4096 ] || fail "doorbell umem: $q"
line=$(dmesg | grep "ref_pers: get_pages addr=" | tail -n 1)
case "$line" in
*"addr=$(printf '0x%x' $((va + 0x10000))) size=0x1000 write=1 force=0 "*) ;;
*) fail "the doorbell's get_pages: $line" ;;
esac
st hca-write "$db" 0x40 8 fill:0x77 cpu >/dev/null
st gpu-check $((va + 0x10040)) 8 fill:0x77 >/dev/null
st hca-check "$cq" 0x10040 8 fill:0x77 cpu >/dev/null

# released without a stop, in either order
st mr-dereg "$cq" >/dev/null
st hca-check "$db" 0x40 8 fill:0x77 cpu >/dev/null
st mr-dereg "$db" >/dev/null
st gpu-free "$va" >/dev/null
no_leaks
teardown
pass
