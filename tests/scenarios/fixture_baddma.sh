#!/bin/sh
# The simulated HCA is only as right as the DMA addresses a client returns:
# a deliberately broken reference client (bad_dma=) must be caught. GPU
# virtual addresses fault (CPU engine) or never arrive (edu); the next page's
# address corrupts the neighbour; physical addresses work only without an
# IOMMU (with one they fault). Proves the DMA checks of the other scenarios
# can fail.
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
iommu=off
for d in /sys/bus/pci/devices/*; do
	if [ "$(cat "$d/vendor")" = 0x1234 ] && [ "$(cat "$d/device")" = 0x11e8 ] &&
		grep -q DMA "$d/iommu_group/type" 2>/dev/null; then
		iommu=on
	fi
done
load_sim_stack generation="${arg_generation:-modern}"

# setup MODE: a fresh client with bad_dma=MODE and a 128 KiB MR on
# sentinel-filled GPU memory (sets va, mr_id)
setup() {
	load_refclient bad_dma="$1"
	va=$(gpu_alloc 128K)
	st gpu-fill "$va" 128K fill:0xa5 >/dev/null
	mr_reg "$va" $((0x20000))
}
cleanup() {
	st mr-dereg "$mr_id" >/dev/null
	st gpu-free "$va" >/dev/null
	unload peermem_refclient
	no_leaks
}
# mismatch CMD...: simtest must report a data mismatch (exit 3)
mismatch() {
	simtest "$@" >/dev/null
	[ $? = 3 ] || fail "no data mismatch from: simtest $*"
}

setup gpuva
st_errno EFAULT hca-write "$mr_id" 0 4096 seed:1 cpu
st_errno EFAULT hca-check "$mr_id" 0 4096 seed:1 cpu
st hca-write "$mr_id" 0 2048 seed:1 edu >/dev/null
st gpu-check "$va" 128K fill:0xa5 >/dev/null
mismatch hca-check "$mr_id" 0 2048 seed:1 edu
cleanup

setup shift
st hca-write "$mr_id" 0 4096 seed:2 cpu >/dev/null
mismatch gpu-check "$va" 4096 seed:2
st gpu-check $((va + 0x10000)) 4096 seed:2 >/dev/null
cleanup

setup phys
if [ $iommu = on ]; then
	st_errno EFAULT hca-write "$mr_id" 0 4096 seed:3 cpu
	st hca-write "$mr_id" 0x100 2048 seed:3 edu >/dev/null
	st gpu-check "$va" 128K fill:0xa5 >/dev/null
else
	st hca-write "$mr_id" 0x100 4096 seed:3 cpu >/dev/null
	st gpu-check $((va + 0x100)) 4096 seed:3 >/dev/null
fi
cleanup
teardown
pass iommu=$iommu
