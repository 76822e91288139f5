#!/bin/sh
# What the core hands the client, as MLNX_OFED's peer_mem.c does it, seen
# from the reference client (log_args=1):
#  - get_pages(write=1, force=!writable, sg_head=NULL): a read-only MR asks
#    for CoW breaking without failing on read-only memory;
#  - the SG table while the MR lives: on the modern core (5.5 and later) the
#    first and last entries trimmed to the PAGE_SIZE boundaries around the
#    user's range, sg->length as well as the DMA length; older cores trim
#    nothing;
#  - after an invalidation of a client that unmaps itself
#    (PEER_MEM_INVALIDATE_UNMAPS): the table restored as the client built it.
# Also run against MLNX_OFED's real core (docs/real-core.md).
#   fixture_core_args.sh generation=modern|mofed51
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
load_sim_stack generation="$gen"
load_refclient log_args=1
va=$(gpu_alloc 256K)

# force = !writable
for acc in rr lw; do
	_o=$(st mr-reg "$va" 64K "$acc") || exit 1
	line=$(dmesg | grep "ref_mem: get_pages addr=" | tail -n 1)
	case "$acc,$line" in
	rr,*"write=1 force=1 sg_head=NULL") ;;
	lw,*"write=1 force=0 sg_head=NULL") ;;
	*) fail "access $acc: the core passed: $line" ;;
	esac
	st mr-dereg "$(kv mr "$_o")" >/dev/null
done

# 0x1234 into the first 64 KiB page, ending 0x1234 into the third
mr_reg $((va + 0x1234)) $((0x20000))
[ "$mr_sg" = 3 ] || fail "3 SG entries expected, got $mr_sg"
st gpu-free "$va" >/dev/null
before=$(dmesg | grep "ref_mem: sg before invalidate:" | tail -n 1)
log "$before"
case "$gen" in
modern)
	# head: 0x1000 (the 4 KiB page of the start within its 64 KiB page);
	# tail: 0x30000 - 0x22000 past the 4 KiB page of the end
	want="first length=0xf000 dma_len=0xf000 dma=0x"
	case "$before" in
	*"$want"*" last length=0x2000 dma_len=0x2000") ;;
	*) fail "the live table is not trimmed as the modern core does: $before" ;;
	esac
	after=$(dmesg | grep "ref_mem: sg after invalidate:" | tail -n 1)
	log "$after"
	case "$after" in
	*"first length=0x10000 dma_len=0x10000 dma=0x"*" last length=0x10000 dma_len=0x10000") ;;
	*) fail "the table is not restored before the client gets it back: $after" ;;
	esac
	# the restored first entry starts where the trimmed one began, less
	# the head
	kv_set a0 dma "${before#*first }"
	kv_set a1 dma "${after#*first }"
	[ $((a0 - a1)) = $((0x1000)) ] ||
		fail "first entry restored to $a1, trimmed at $a0 (head 0x1000)"
	;;
*)
	case "$before" in
	*"first length=0x10000 dma_len=0x10000 dma=0x"*" last length=0x10000 dma_len=0x10000") ;;
	*) fail "a $gen core trims nothing: $before" ;;
	esac
	;;
esac
st mr-dereg "$mr_id" >/dev/null
no_leaks
teardown
pass
