#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Register GPU memory through the simulated core, DMA a pattern through the
# simulated HCA (QEMU edu device and CPU engine) in both directions, check
# it through the simulated GPU, deregister: nothing left pinned or mapped.
#   module_dma_roundtrip generation=G peerdirect_support=N persistent_api_support=N [coalesce_sg=N]
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
contiguous=0
if [ "$coalesce_sg" = 1 ]; then
	# Physically contiguous backing, no IOMMU: DMA-contiguous GPU pages.
	# (simtest took no contiguous= knob until issue 30, and a refused
	# config fell back here in silence: the check below never ran.)
	sim config contiguous=1
	contiguous=1
fi
sim gpu-alloc 1M
kv_set va va "$out"
sim gpu-fill "$va" 1M seed:11
# An unaligned range: 0x1234 into the first GPU page, 300000 bytes long,
# ends inside the 5th GPU page.
off=4660
len=300000
sim mr-reg $((va + off)) $len
kv_set mr mr "$out"
kv_set sg sg "$out"
kv_set client client "$out"
[ "$client" = "$expected_client" ] || fail "MR taken by '$client', want $expected_client"
if [ "$contiguous" = 1 ]; then
	[ "$sg" = 1 ] || fail "coalesced SG has $sg entries for 5 DMA-contiguous GPU pages, want 1"
else
	[ "$sg" = 5 ] || fail "SG has $sg entries, want one per GPU page (5)"
fi
grep -q "pages=5 sg_entries=$sg state=mapped" "$PM_DEBUGFS"/registrations ||
	fail "debugfs: $(cat "$PM_DEBUGFS"/registrations)"
[ "$(pm_stat pinned_bytes)" = $((5 * 65536)) ] || fail "pinned_bytes $(pm_stat pinned_bytes), want $((5 * 65536))"
# CPU engine over the whole MR: the HCA reads what the GPU holds (seed:11,
# offsets from va), writes seed:21 (offsets from the MR's start), and the
# GPU sees it.
sim hca-check "$mr" 0 $len seed:11 cpu $off
sim hca-write "$mr" 0 $len seed:21 cpu
sim gpu-check $((va + off)) $len seed:21
# edu engine (real emulated PCI DMA, 4 KiB per transfer, slow under TCG)
# on a 16 KiB window across the boundary of the first two GPU pages.
woff=$((65536 - off - 8192))
sim hca-check "$mr" $woff 16K seed:21 edu $woff
sim hca-write "$mr" $woff 16K seed:31 edu
sim gpu-check $((va + off + woff)) 16K seed:31
sim gpu-check $((va + off)) $woff seed:21
sim mr-query "$mr"
echo "$out" | grep -q "state=live" || fail "MR not live: $out"
sim mr-dereg "$mr"
no_leaks "after deregistration"
# Bytes outside the MR were never touched.
sim gpu-check "$va" $off seed:11
sim gpu-free "$va"
[ "$contiguous" = 1 ] && sim config
finish_clean
pass sg_entries="$sg" client="$client" contiguous="$contiguous"
