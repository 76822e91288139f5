#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Every refusal says why and leaves nothing pinned or mapped: GPU page sizes
# other than 64 KiB, incompatible page-table and mapping versions, and
# provider/core failures at each step; a failed unpin is retried at release.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
if [ "$persistent_api_support" = 0 ]; then
	get_op=get_pages
	put_op=put_pages
else
	get_op=get_pages_persistent
	put_op=put_pages_persistent
fi
cases=0

# refuse_reg WHAT MESSAGE: mr-reg of a fresh allocation must fail, with
# MESSAGE in dmesg, and leave nothing behind.
refuse_reg() {
	dmesg -c >/dev/null
	sim gpu-alloc 256K
	_va=$(kv va "$out")
	if _out=$(simtest mr-reg $((_va + 10)) 100000); then
		fail "$1: MR registered: $_out"
	fi
	if [ -n "$2" ]; then
		dmesg | grep -q "nvidia_peermem_rs: .*$2" || fail "$1: no '$2' in dmesg: $(dmesg | grep nvidia_peermem_rs)"
	fi
	sim fault-clear
	sim config
	sim gpu-free "$_va"
	no_leaks "$1"
	cases=$((cases + 1))
}

sim config page_size=4k
refuse_reg "4 KiB GPU pages" "GPU page size is 4 KiB (type 0), only 64 KiB pages are supported"
sim config page_size=128k
refuse_reg "128 KiB GPU pages" "GPU page size is 128 KiB (type 2), only 64 KiB pages are supported"
sim config pt_version=0x00030000
refuse_reg "page table major 3" "page table version 0x00030000 is not supported (this module reads 0x00010002 to 0x00020000"
sim config pt_version=0x00010001
refuse_reg "page table minor 1" "page table version 0x00010001 is not supported"
sim config map_version=0x00030003
refuse_reg "mapping major 3" "DMA mapping version 0x00030003 is incompatible with 0x00020003"
sim config map_version=0x00020002
refuse_reg "mapping minor 2" "DMA mapping version 0x00020002 is incompatible"
sim fault dma_map_pages 1 EIO
refuse_reg "dma_map_pages fails" "dma_map of .* failed"
# The first get_pages is acquire's probe, the second the real pin.
sim fault $get_op 2 ENOMEM
refuse_reg "$get_op fails after acquire" "get_pages of .* failed"
sim fault sg_alloc 1 ENOMEM
refuse_reg "the core's SG allocation fails" ""
sim fault acquire_alloc 1 ENOMEM
refuse_reg "the core's MR allocation fails" ""

# A newer minor version is compatible.
sim config pt_version=0x00010007 map_version=0x00020009
sim gpu-alloc 128K
va=$(kv va "$out")
sim mr-reg "$va" 128K
mr=$(kv mr "$out")
sim hca-write "$mr" 0 128K seed:3 cpu
sim gpu-check "$va" 128K seed:3
sim mr-dereg "$mr"
sim config
no_leaks "newer minor versions"

# Unpinning fails once at deregistration: kept, retried at release.
sim mr-reg "$va" 128K
mr=$(kv mr "$out")
dmesg -c >/dev/null
sim fault $put_op 1 EIO
sim mr-dereg "$mr"
sim fault-clear
dmesg | grep -q "nvidia_peermem_rs: .*unpinning .* failed" || fail "failed unpin not reported"
[ "$(pm_stat error_put_pages)" -ge 1 ] || fail "put_pages error not counted"
no_leaks "unpin retried at release"
sim gpu-free "$va"

# The persistent API unsupported (MIG, vGPU): the persistent client says so.
if [ "$persistent_api_support" = 1 ]; then
	sim config persistent=0
	refuse_reg "persistent API unsupported" "persistent P2P API is not supported .* persistent_api_support=0"
fi
finish_clean
pass refusals=$cases
