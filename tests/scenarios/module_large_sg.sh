#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A registration above 8 MiB (issue 30): 16 MiB + 4 KiB at an unaligned
# start, 257 GPU pages, so the SG table of one entry per GPU page chains
# past its first page of entries (128 with this kernel's 32-byte
# scatterlist), which no other registration of make test reaches (make
# bench does). The HCA writes the whole MR with the CPU engine, walking the
# core's SG list across both chain links, and the simulated GPU must hold
# every byte where it belongs; the HCA then reads 256 KiB across each link
# and at the end; deregister: nothing left pinned or mapped.
# coalesce_sg=1: the GPU memory is backed physically contiguous (no IOMMU),
# so the entries merge: fewer entries than GPU pages, the same bytes.
#   module_large_sg generation=G peerdirect_support=N persistent_api_support=N [coalesce_sg=N]
. /scenarios/lib.sh
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
load_module
if [ "$coalesce_sg" = 1 ]; then
	sim config contiguous=1
fi
sim gpu-alloc 17M
kv_set va va "$out"
# 0x1234 into the first GPU page, 16 MiB + 4 KiB long: ends inside the
# 257th GPU page. Before the MR: seed:41, after it: seed:43.
off=4660
len=$((16 * 1048576 + 4096))
pages=$(((off + len + 65535) / 65536))
sim gpu-fill "$va" 64K seed:41
sim gpu-fill $((va + off + len)) 64K seed:43
sim mr-reg $((va + off)) $len
kv_set mr mr "$out"
kv_set sg sg "$out"
kv_set client client "$out"
[ "$client" = "$expected_client" ] || fail "MR taken by '$client', want $expected_client"
if [ "$coalesce_sg" = 1 ]; then
	# DMA-contiguous blocks of up to 4 MiB: a handful of entries.
	if [ "$sg" -lt 1 ] || [ "$sg" -ge "$pages" ]; then
		fail "coalesced SG has $sg entries for $pages DMA-contiguous GPU pages"
	fi
else
	[ "$sg" = "$pages" ] || fail "SG has $sg entries, want one per GPU page ($pages)"
	[ "$sg" -gt 128 ] || fail "SG has $sg entries: no chaining past 128"
fi
grep -q "pages=$pages sg_entries=$sg state=mapped" "$PM_DEBUGFS"/registrations ||
	fail "debugfs: $(cat "$PM_DEBUGFS"/registrations)"
[ "$(pm_stat pinned_bytes)" = $((pages * 65536)) ] ||
	fail "pinned_bytes $(pm_stat pinned_bytes), want $((pages * 65536))"
# The whole MR written by the HCA (seed:42, offsets from the MR's start):
# the GPU sees each byte in place; then the HCA reads it back across the
# first chain link (GPU pages 126/127: 127 entries and a link to a page),
# the second (253/254) and up to the MR's end.
sim hca-write "$mr" 0 $len seed:42 cpu
sim gpu-check $((va + off)) $len seed:42
for page in 126 253; do
	o=$((page * 65536 - off - 131072))
	sim hca-check "$mr" $o 256K seed:42 cpu $o
done
o=$((len - 262144))
sim hca-check "$mr" $o 256K seed:42 cpu $o
sim gpu-check "$va" $off seed:41
sim gpu-check $((va + off + len)) 64K seed:43
sim mr-dereg "$mr"
no_leaks "after deregistration"
sim gpu-free "$va"
[ "$coalesce_sg" = 1 ] && sim config
finish_clean
pass sg_entries="$sg" pages="$pages" client="$client"
