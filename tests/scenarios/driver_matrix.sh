#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh, at /scenarios in the VM
# One cell of the NVIDIA driver generation x PeerDirect core generation
# matrix (issue 17): the simulated provider as driver D (page table version
# and size, persistent calls or not), the core as generation G, and a client
# (this module or the C reference client) registering GPU memory both ways:
# persistent (then DMA through the HCA, deregistration) and invalidating
# (then DMA, cudaFree with the MR live: invalidated, deregistration).
#   driver_matrix.sh client=module|refclient driver=r525|r535|r560|r580 generation=modern|mofed51|legacy [pt_flags=0|1]
# pt_flags=1 (issue 30): the provider marks each page table of the 40-byte
# layout CPU-cacheable (flags=1, as 580.65.06+ on coherent platforms); the
# module counts each in debugfs cpu_cacheable_page_tables and registers as
# usual. Without it (and on the 32-byte layout) the count stays 0; and a
# 40-byte page table stamped with version 0x00010002 has no flags word for
# the module to read (it must not count the one the provider wrote).
. /scenarios/lib.sh

client=module
driver=r580
generation=modern
pt_flags=0
for _a in "$@"; do
	case "$_a" in
	client=module | client=refclient) client=${_a#*=} ;;
	driver=r525 | driver=r535 | driver=r560 | driver=r580) driver=${_a#*=} ;;
	generation=modern | generation=mofed51 | generation=legacy) generation=${_a#*=} ;;
	pt_flags=0 | pt_flags=1) pt_flags=${_a#*=} ;;
	*) fail "unknown scenario argument $_a" ;;
	esac
done

for _m in peermem_sim nvidia_peermem_rs peermem_refclient peerdirect_sim \
	nvidia_p2p_sim nvidia_p2p_sim_r525; do
	[ -d /sys/module/$_m ] && rmmod $_m 2>/dev/null
done

PM_DEBUGFS=/sys/kernel/debug/nvidia_peermem_rs
case "$driver" in
r580) want_version=0x00020000 ;;
*) want_version=0x00010002 ;;
esac
# Page tables the module must count as CPU-cacheable: the 40-byte layout
# only, flags only where the provider writes them.
want_cacheable=0
[ "$driver" = r580 ] && [ "$pt_flags" = 1 ] && want_cacheable=1
case "$driver" in
r525) want_api=get_pages_without_callback ;;
*) want_api=get_pages_persistent ;;
esac
# Legacy cores take the invalidating client only in the legacy ABI (the
# persistent one is plain in both).
pds=0
ref_abi=ex
ref_extra=
if [ "$generation" = legacy ]; then
	pds=1
	# 4.9 never offers an MR to a client with the private-data hooks
	ref_abi=legacy
fi

# sim CMD...: simtest, failing the scenario; output in $out.
sim() {
	simtest_to out "$@" || fail "simtest $* failed: $out"
}

pm_stat() {
	file_value "$PM_DEBUGFS"/stats "$1"
}

# load_client PERSISTENT: the client under test, persistent (1) or
# invalidating (0).
load_client() {
	if [ "$client" = module ]; then
		load nvidia_peermem_rs peerdirect_support=$pds persistent_api_support="$1"
		want_client=nv_mem
	else
		# shellcheck disable=SC2086
		load peermem_refclient persistent="$1" abi=$ref_abi $ref_extra
		want_client=ref_mem
	fi
}

unload_client() {
	unload nvidia_peermem_rs peermem_refclient
}

# nothing_left WHAT: the provider and the core hold nothing.
nothing_left() {
	simtest_to _l leak-check 2>/dev/null
	leak_fields_zero "$1" "$_l"
}

PSIM_DRIVER=$driver
PSIM_PT_FLAGS=$pt_flags
load_sim_stack generation="$generation"
dmesg | grep -q "driver $driver: page table $want_version" ||
	fail "the provider did not come up as $driver ($want_version)"
ops=0
for pers in 1 0; do
	load_client $pers
	sim gpu-alloc 512K
	kv_set va va "$out"
	sim gpu-fill "$va" 512K seed:5
	sim mr-reg $((va + 100)) 200000
	kv_set mr mr "$out"
	[ "$(kv client "$out")" = "$want_client" ] ||
		fail "persistent=$pers: the MR went to $(kv client "$out"), want $want_client"
	sim hca-check "$mr" 0 200000 seed:5 cpu 100
	sim hca-write "$mr" 0 200000 seed:6 cpu
	sim gpu-check $((va + 100)) 200000 seed:6
	if [ "$client" = module ]; then
		[ "$(pm_stat page_table_version)" = "$want_version" ] ||
			fail "debugfs page_table_version $(pm_stat page_table_version), want $want_version"
		[ "$(pm_stat persistent_api)" = "$want_api" ] ||
			fail "debugfs persistent_api $(pm_stat persistent_api), want $want_api"
		# one page table since the module was loaded
		[ "$(pm_stat cpu_cacheable_page_tables)" = "$want_cacheable" ] ||
			fail "persistent=$pers pt_flags=$pt_flags: debugfs cpu_cacheable_page_tables $(pm_stat cpu_cacheable_page_tables), want $want_cacheable"
	fi
	if [ "$pers" = 0 ]; then
		sim gpu-free "$va"
		sim mr-query "$mr"
		echo "$out" | grep -q "state=invalidated" ||
			fail "cudaFree did not invalidate the MR: $out"
		sim mr-dereg "$mr"
	else
		sim mr-dereg "$mr"
		sim gpu-free "$va"
	fi
	nothing_left "persistent=$pers"
	unload_client
	ops=$((ops + 6))
done

# A page table version from the future is refused with a message naming it
# and the range this module reads; nothing stays pinned.
if [ "$client" = module ] && [ "$driver" = r580 ]; then
	load_client 1
	sim config pt_version=0x00030000
	sim gpu-alloc 128K
	kv_set va va "$out"
	if simtest_to o mr-reg "$va" 128K; then
		fail "a page table version 0x00030000 was accepted: $o"
	fi
	dmesg | grep -q "page table version 0x00030000 is not supported (this module reads 0x00010002 to 0x00020000" ||
		fail "no clear refusal for page table version 0x00030000"
	sim config pt_version=0
	sim gpu-free "$va"
	nothing_left "after the refused version"
	if [ "$pt_flags" = 1 ]; then
		# A 40-byte table (flags=1 in its last word) stamped 0x00010002:
		# the version-1 layout has no flags word; nothing to count.
		n0=$(pm_stat cpu_cacheable_page_tables)
		sim config pt_version=0x00010002
		sim gpu-alloc 128K
		kv_set va va "$out"
		sim mr-reg "$va" 128K
		kv_set mr mr "$out"
		[ "$(pm_stat page_table_version)" = 0x00010002 ] ||
			fail "debugfs page_table_version $(pm_stat page_table_version), want 0x00010002"
		[ "$(pm_stat cpu_cacheable_page_tables)" = "$n0" ] ||
			fail "a version 0x00010002 page table was counted CPU-cacheable (flags read past the version-1 layout)"
		sim mr-dereg "$mr"
		sim config pt_version=0
		sim gpu-free "$va"
		nothing_left "after the version-1 stamp"
		ops=$((ops + 4))
	fi
	unload_client
fi
unload_sim_stack
pass ops=$ops page_table=$want_version persistent_api=$want_api cpu_cacheable=$want_cacheable
