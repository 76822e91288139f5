#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Every refusal says why and leaves nothing pinned or mapped: GPU page sizes
# other than 64 KiB, incompatible page-table and mapping versions, and
# provider/core failures at each step; a failed unpin is retried at release.
# acquire pins once and its pin is the one get_pages takes (issue 35).
# Decided at acquire ("not mine", as NVIDIA's acquire answers, issue 31): a
# page table version this module cannot read, a pin that fails, and a
# refused pin whose unpin fails (the pin is not lost). The MIG/vGPU warning
# is said once a load, every refusal counted.
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

# refuse_reg WHAT MESSAGE [at_acquire]: mr-reg of a fresh allocation must
# fail, with MESSAGE in dmesg, and leave nothing behind. at_acquire: every
# client answered "not mine", no registration was committed to us.
refuse_reg() {
	dmesg -c >/dev/null
	sim gpu-alloc 256K
	kv_set _va va "$out"
	_acquired=$(pm_stat acquired)
	if simtest_to _out mr-reg $((_va + 10)) 100000; then
		fail "$1: MR registered: $_out"
	fi
	if [ -n "$2" ]; then
		dmesg | grep -q "nvidia_peermem_rs: .*$2" || fail "$1: no '$2' in dmesg: $(dmesg | grep nvidia_peermem_rs)"
	fi
	if [ "$3" = at_acquire ]; then
		[ "$(pm_stat acquired)" = "$_acquired" ] ||
			fail "$1: acquire said mine, the refusal came after the core committed the MR: $(dmesg | grep nvidia_peermem_rs)"
		[ "$(dmesg | grep -c "nvidia_peermem_rs: ")" = 1 ] ||
			fail "$1: not one line: $(dmesg | grep nvidia_peermem_rs)"
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
refuse_reg "page table major 3" "page table version 0x00030000 is not supported (this module reads 0x00010002 to 0x00020000" at_acquire
sim config pt_version=0x00010001
refuse_reg "page table minor 1" "page table version 0x00010001 is not supported" at_acquire
sim config map_version=0x00030003
refuse_reg "mapping major 3" "DMA mapping version 0x00030003 is incompatible with 0x00020003"
sim config map_version=0x00020002
refuse_reg "mapping minor 2" "DMA mapping version 0x00020002 is incompatible"
sim fault dma_map_pages 1 EIO
refuse_reg "dma_map_pages fails" "dma_map of .* failed"
# The pin fails: not ours. With persistent_api_support=0 the core then
# offers the range to nv_mem_nc, whose persistent pin works.
if [ "$persistent_api_support" = 0 ]; then
	sim gpu-alloc 128K
	kv_set va va "$out"
	sim fault get_pages 1 ENOMEM
	sim mr-reg "$va" 128K
	kv_set mr mr "$out"
	[ "$(kv client "$out")" = nv_mem_nc ] ||
		fail "get_pages fails at acquire: the MR went to $(kv client "$out"), want nv_mem_nc after nv_mem said not mine"
	sim mr-dereg "$mr"
	sim fault-clear
	sim gpu-free "$va"
	no_leaks "get_pages fails at acquire"
else
	sim fault get_pages_persistent 1 ENOMEM
	refuse_reg "$get_op fails at acquire" ""
fi
# The core fails between acquire and get_pages (the invalidating client's
# ticket): release unpins acquire's pin. Checked before the cudaFree, whose
# callback would end a pin left behind.
if [ "$persistent_api_support" = 0 ]; then
	acquired=$(pm_stat acquired)
	released=$(pm_stat released)
	sim gpu-alloc 128K
	kv_set va va "$out"
	sim fault ticket_alloc 1 ENOMEM
	if simtest_to _out mr-reg "$va" 128K; then
		fail "the core's ticket allocation fails: MR registered: $_out"
	fi
	sim fault-clear
	[ "$(pm_stat acquired)" -gt "$acquired" ] && [ "$(pm_stat released)" -gt "$released" ] ||
		fail "the core's ticket allocation fails: acquire did not say mine, or no release followed"
	no_leaks "the core's ticket allocation fails (before the cudaFree)"
	sim gpu-free "$va"
	cases=$((cases + 1))
fi
sim fault sg_alloc 1 ENOMEM
refuse_reg "the core's SG allocation fails" ""
sim fault acquire_alloc 1 ENOMEM
refuse_reg "the core's MR allocation fails" ""

# A newer minor version is compatible.
sim config pt_version=0x00010007 map_version=0x00020009
sim gpu-alloc 128K
kv_set va va "$out"
sim mr-reg "$va" 128K
kv_set mr mr "$out"
sim hca-write "$mr" 0 128K seed:3 cpu
sim gpu-check "$va" 128K seed:3
sim mr-dereg "$mr"
sim config
no_leaks "newer minor versions"

# Unpinning fails once at deregistration: kept, retried at release.
sim mr-reg "$va" 128K
kv_set mr mr "$out"
dmesg -c >/dev/null
sim fault $put_op 1 EIO
sim mr-dereg "$mr"
sim fault-clear
dmesg | grep -q "nvidia_peermem_rs: .*unpinning .* failed" || fail "failed unpin not reported"
[ "$(pm_stat error_put_pages)" -ge 1 ] || fail "put_pages error not counted"
no_leaks "unpin retried at release"
sim gpu-free "$va"

# acquire refuses its pin (4 KiB GPU pages) and the unpin fails: not ours
# (NVIDIA's acquire answers so), not a registration committed to us whose
# get_pages then fails. With persistent_api_support=0 the core then offers
# the range to nv_mem_nc, which refuses the page size too. The pin is not
# lost: an invalidating one ends with its free callback (cudaFree), a
# persistent one is unpinned again at unload at the latest.
dmesg -c >/dev/null
sim config page_size=4k
sim gpu-alloc 128K
kv_set va va "$out"
acquired=$(pm_stat acquired)
sim fault $put_op 1 EIO
if simtest_to _out mr-reg "$va" 128K; then
	fail "refused pin's unpin failed: MR registered: $_out"
fi
if [ "$persistent_api_support" = 1 ]; then
	[ "$(pm_stat acquired)" = "$acquired" ] ||
		fail "refused pin's unpin failed: acquire said mine: $(dmesg | grep nvidia_peermem_rs)"
fi
sim fault-clear
sim config
dmesg | grep -q "nvidia_peermem_rs: .*unpinning acquire's pin .* failed" ||
	fail "refused pin's unpin failed: not reported: $(dmesg | grep nvidia_peermem_rs)"
sim gpu-free "$va"
unload nvidia_peermem_rs
no_leaks "refused pin's unpin failed"
load_module

# The persistent API unsupported (MIG, vGPU): the persistent client says so,
# once a load; every refusal is counted (debugfs error_persistent_unsupported).
if [ "$persistent_api_support" = 1 ]; then
	sim config persistent=0
	refuse_reg "persistent API unsupported" "persistent P2P API is not supported .* persistent_api_support=0"
	sim config persistent=0
	before=$(pm_stat error_persistent_unsupported)
	dmesg -c >/dev/null
	for _i in 1 2 3; do
		sim gpu-alloc 128K
		kv_set va va "$out"
		simtest mr-reg "$va" 128K >/dev/null && fail "persistent API unsupported: MR registered"
		sim gpu-free "$va"
	done
	sim config
	said=$(dmesg | grep -c "persistent P2P API is not supported")
	[ "$said" = 0 ] || fail "the MIG/vGPU warning was said $said more times in the same load"
	[ "$(pm_stat error_persistent_unsupported)" = $((before + 3)) ] ||
		fail "persistent API refusals counted $before -> $(pm_stat error_persistent_unsupported), want +3"
fi
finish_clean
pass refusals=$cases
