#!/bin/sh
# shellcheck disable=SC2046,SC2086
# Bad input (issue 5): every one gets a clean error, loses nothing, leaks
# nothing and splats nothing.
#   rel_badinput.sh part=ranges [persistent_api_support=0|1]   registrations of bad ranges
#   rel_badinput.sh part=load                bad loads
# ranges: zero length; addr+size overflowing u64 (at the core, and only once
# aligned out to 64 KiB, which the core lets through); unaligned start and
# end (these must work, data checked); a range beyond the allocation, one
# spanning two allocations (across the guard gap), one in memory already
# freed, one not GPU memory at all; huge sizes (1 TiB, 2^63, up to the top
# of the address space).
# load: invalid values of both parameters (-1, 2, 1000, non-numeric, empty,
# overflowing), loading without the providers (no NVIDIA P2P, no PeerDirect
# core), and a second client named nv_mem (or nv_mem_nc) already registered
# by the fixtures' reference client: the load fails with a clear message,
# the module is not left loaded, and nothing of ours stays registered.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
part=${rel_arg_part:-ranges}

# bad_reg DESC VA LEN: the registration must fail with an errno.
bad_reg() {
	simtest_to _o mr-reg "$2" "$3"
	_rc=$?
	REL_OPS=$((REL_OPS + 1))
	if [ $_rc = 0 ]; then
		st mr-dereg "$(sval mr "$_o")" >/dev/null
		fail "$1: registration of va=$2 len=$3 succeeded ($_o)" $(figures)
	fi
	case "$_o" in
	*errno=*) ;;
	*) fail "$1: failed without an errno (rc=$_rc): $_o" $(figures) ;;
	esac
	log "$1: refused: $_o"
	REL_FAULTS=$((REL_FAULTS + 1))
	# (the test's own allocations are live: only pins, mappings, MRs count)
	simtest_to _lc leak-check
	for _k in pages_pinned page_tables_live dma_mappings_live mrs_live; do
		[ "$(sval $_k "$_lc")" = 0 ] || fail "$1 left $_lc" $(figures)
	done
}

# good_reg DESC VA LEN: the registration must work, and DMA to its first
# and last byte land exactly there.
good_reg() {
	simtest_to _o mr-reg "$2" "$3" || fail "$1: registration of va=$2 len=$3 failed: $_o" $(figures)
	kv_set _mr mr "$_o"
	st hca-write "$_mr" 0 "$3" seed:3 >/dev/null || fail "$1: DMA write" $(figures)
	st gpu-check "$2" "$3" seed:3 >/dev/null || fail "$1: the DMA did not land at the unaligned range" $(figures)
	st mr-dereg "$_mr" >/dev/null || fail "$1: dereg" $(figures)
	REL_OPS=$((REL_OPS + 4))
	log "$1: ok ($_o)"
}

alloc() {
	simtest_to _o gpu-alloc "$1" || fail "gpu-alloc $1: $_o" $(figures)
	sval va "$_o"
}

ranges() {
	stack_up
	a=$(alloc 256K)
	b=$(alloc 256K)
	c=$(alloc 128K)
	st gpu-fill "$a" 256K fill:0x11 >/dev/null
	st gpu-free "$c" >/dev/null
	bad_reg "zero length" "$a" 0
	bad_reg "zero length, unaligned" $((a + 1)) 0
	bad_reg "addr+size wraps" 0xffffffffffff0000 0x20000
	bad_reg "wraps only once aligned to 64 KiB" 0xffffffffffff0001 0xfffe
	bad_reg "end at the top of the address space" 0xfffffffffffe0000 0x1ffff
	bad_reg "one byte beyond the allocation" "$a" $((256 * 1024 + 1))
	bad_reg "starts inside, ends beyond" $((a + 200000)) 100000
	bad_reg "spans two allocations" $((a + 128 * 1024)) $((b - a))
	bad_reg "starts in the guard gap" $((a + 256 * 1024 + 10)) 4096
	bad_reg "memory already freed" "$c" 128K
	bad_reg "not GPU memory" 0x10000 64K
	bad_reg "huge: 1 TiB" "$a" 0x10000000000
	bad_reg "huge: 2^63" "$a" 0x8000000000000000
	bad_reg "huge: to the top" "$a" "$(printf '0x%x' $((-1 - a)))"
	good_reg "unaligned start and end" $((a + 1)) $((192 * 1024 - 3))
	good_reg "one byte" $((a + 65535)) 1
	good_reg "two bytes across a 64 KiB boundary" $((a + 65535)) 2
	good_reg "the whole allocation" "$a" 256K
	st gpu-free "$a" >/dev/null
	st gpu-free "$b" >/dev/null
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass
}

# refuse_param NAME VALUE: the load must be refused with a message that
# names the parameter.
refuse_param() {
	unload $REL_MOD
	insmod_refused "$1=$2" $REL_MOD "$1=$2"
	since_mark | grep -q -- "$1" || fail "$1=$2: the refusal does not name the parameter" $(figures)
	REL_FAULTS=$((REL_FAULTS + 1))
	simtest_to _cr counters clients_registered
	[ "$_cr" = 0 ] || fail "$1=$2: a client stayed registered" $(figures)
}

load_part() {
	# Without the providers: no symbols to link against.
	stack_down
	insmod_refused "no NVIDIA P2P provider, no PeerDirect core" $REL_MOD
	since_mark_has "Unknown symbol" || fail "no 'Unknown symbol' line for the missing providers" $(figures)
	load nvidia_p2p_sim
	insmod_refused "no PeerDirect core" $REL_MOD
	since_mark_has "Unknown symbol ib_register_peer_memory_client" ||
		fail "the loader did not name the missing core symbol" $(figures)
	unload nvidia_p2p_sim
	load peerdirect_sim generation=modern
	insmod_refused "no NVIDIA P2P provider" $REL_MOD
	since_mark_has "Unknown symbol nvidia_p2p_" ||
		fail "the loader did not name the missing NVIDIA symbol" $(figures)
	unload peerdirect_sim
	REL_FAULTS=$((REL_FAULTS + 3))

	# Invalid parameter values.
	stack_up_fixtures
	for v in -1 2 1000 abc 0x ""; do
		refuse_param peerdirect_support "$v"
		refuse_param persistent_api_support "$v"
	done
	refuse_param peerdirect_support 99999999999999999999
	refuse_param persistent_api_support 1.5

	# Valid values still load (so the refusals were about the values).
	for p in "peerdirect_support=0" "peerdirect_support=1" "persistent_api_support=0" \
		"persistent_api_support=1"; do
		load $REL_MOD "$p"
		unload $REL_MOD
	done

	# nv_mem (and nv_mem_nc) already taken by another client.
	for taken in "nv_mem 1" "nv_mem 0" "nv_mem_nc 0"; do
		name=${taken% *}
		p=${taken#* }
		load peermem_refclient name="$name"
		insmod_refused "$name already registered (persistent_api_support=$p)" $REL_MOD persistent_api_support="$p"
		since_mark | grep "$REL_MOD" | grep -q "$name" ||
			fail "the refusal does not say that $name is taken" $(figures)
		simtest_to _cr counters clients_registered
		[ "$_cr" = 1 ] ||
			fail "$name taken: $_cr clients registered, only the other one may be" $(figures)
		for d in nv_mem nv_mem_nc; do
			[ "$d" = "$name" ] && continue
			[ -d /sys/kernel/mm/memory_peers/$d ] &&
				fail "$name taken: our $d stayed published" $(figures)
		done
		unload peermem_refclient
		REL_FAULTS=$((REL_FAULTS + 1))
	done
	# And the module loads once the name is free again.
	load $REL_MOD persistent_api_support=0
	st roundtrip 128K >/dev/null || fail "the module does not work after the refused loads" $(figures)
	REL_IDLE_REF=$(refcnt)
	settle_idle
	stack_down
	kmemleak_check light
	rel_pass
}

case "$part" in
ranges) ranges ;;
load) load_part ;;
*) fail "unknown part $part" ;;
esac
