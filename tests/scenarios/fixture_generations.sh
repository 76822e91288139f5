#!/bin/sh
# Core generations and client ABIs: an invalid generation= refuses to load;
# the legacy core (4.9) takes an extended client (its ex_size/flags words
# sit where it reads the two private-data pointers) and then never offers
# it an MR, as it never offers one to a client with get_context_private_data
# set, whose hooks it never calls around acquire; plain and legacy clients
# register on every generation; the modern core honours the opt-in only
# with the mark, ex_size and the flag. generation=legacy: the legacy core's
# part only (registration of each ABI, never_offered).
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
if [ "${arg_generation:-}" != legacy ]; then
	load nvidia_p2p_sim
	if try_load peerdirect_sim generation=mofed99 2>/dev/null; then
		fail "generation=mofed99 accepted"
	fi
	dmesg_has "invalid generation=mofed99" || fail "no message for the generation"
	unload nvidia_p2p_sim
fi

# registered_as GEN ABI [PARAM...]: the core's registration line
registered_line() {
	dmesg | grep "registered peer memory client ref_mem" | tail -n 1
}

# never_offered ABI [PARAM...]: MLNX_OFED 4.9 registers the client and then
# skips it at every acquire, because the word it reads as
# get_context_private_data is set (an extended client's ex_size, or a
# legacy client's hook) and no verbs context carries private data for it;
# the hooks are never called.
never_offered() {
	_what="abi=$*"
	load_refclient "$@" || fail "the legacy core refused a client ($_what)"
	va=$(gpu_alloc 64K)
	st_errno EFAULT mr-reg "$va" 4096
	st gpu-free "$va" >/dev/null
	unload peermem_refclient
	dmesg | grep "client ref_mem unregistered" | tail -n 1 |
		grep -q "acquires=0 .*private_gets=0 private_puts=0" ||
		fail "the legacy core offered an MR or called a hook ($_what): $(dmesg | grep "client ref_mem unregistered" | tail -n 1)"
}

# round_trip ABI: the reference client of ABI loaded, one MR registered
# and deregistered, the client unloaded
round_trip() {
	load_refclient abi="$1"
	va=$(gpu_alloc 64K)
	mr_reg "$va" 4096
	st mr-dereg "$mr_id" >/dev/null
	st gpu-free "$va" >/dev/null
	unload peermem_refclient
}

load_sim_stack generation=legacy
never_offered ex
never_offered legacy private_data=1
if [ "${arg_generation:-}" = legacy ]; then
	# the legacy part alone (it runs on MLNX_OFED 4.9's real core too)
	round_trip legacy
	teardown
	pass
fi
# 4.9 refuses a client without get_page_size at registration
if try_load peermem_refclient abi=legacy omit=get_page_size 2>/dev/null; then
	fail "the legacy core took a client without get_page_size"
fi
dmesg_has "lacks the mandatory op get_page_size" ||
	fail "no message for the legacy core's missing get_page_size"
for abi in plain legacy; do
	round_trip $abi
done
teardown

for gen in modern mofed51; do
	load_sim_stack generation=$gen
	for abi in ex plain legacy; do
		load_refclient abi=$abi
		line=$(registered_line)
		case "$gen,$abi,$line" in
		modern,ex,*"invalidate unmaps"*) ;;
		*"invalidate unmaps"*) fail "$gen core, abi=$abi: $line" ;;
		modern,ex,*) fail "modern core ignored the opt-in: $line" ;;
		esac
		unload peermem_refclient
	done
	# the mark and ex_size without the flag: no opt-in
	load_refclient abi=ex ex_flags=0
	case "$(registered_line)" in
	*"invalidate unmaps"*) fail "opt-in without the flag" ;;
	esac
	unload peermem_refclient
	# persistent: no invalidate function. The real core reads the flag for
	# it too (ib_peer_unmap_on_invalidate looks at the client, not at the
	# MR): its deregistration then unmaps after dropping the mapping lock.
	load_refclient abi=ex persistent=1
	registered_line | grep -q "persistent" || fail "not persistent: $(registered_line)"
	if [ "$gen" = modern ]; then
		registered_line | grep -q "persistent, invalidate unmaps)" ||
			fail "the modern core ignored a persistent client's flag: $(registered_line)"
	else
		registered_line | grep -q "persistent)" ||
			fail "a $gen core read the extension: $(registered_line)"
	fi
	unload peermem_refclient
	teardown
done
pass
