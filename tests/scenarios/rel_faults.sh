#!/bin/sh
# Fault injection into every provider and core call the module makes
# (issue 5), with each documented errno of the NVIDIA P2P API.
#   rel_faults.sh [generation=modern] [peerdirect_support=0] [persistent_api_support=0|1] [errnos=EIO[+ENOMEM...]]
#                 [calls=dma_unmap_pages[+put_pages...]]
# For each operation (the fixtures' fault names) and errno (EINVAL, ENOTSUPP,
# ENOMEM, EIO), the first call fails once (and with persistent_api_support=0 also the second,
# with EIO, where the operation is called twice in a life cycle), inside one
# registration life cycle:
#   cycle "reg":  alloc, sentinel, mr-reg (unaligned), HCA DMA + verify,
#                 mr-dereg, cudaFree
#   cycle "free": alloc, mr-reg, cudaFree (free callback), mr-dereg
# Expected: a failed registration returns an errno to its caller; a fault
# the module absorbs leaves the registration working (DMA verified) and
# dereg/cudaFree succeed; afterwards nothing is pinned, mapped or registered. Exception, by
# the provider's own refusal: when the provider fails put_pages_persistent,
# nvidia_p2p_free_page_table or nvidia_p2p_free_dma_mapping, the page table
# it refused to release stays with the provider (figure provider_residue=);
# it is collected when the provider unloads, and our module must have said
# so in the kernel log. At the load: the core's registration fails (each of
# the client registrations in turn): the load fails with a message and
# nothing stays registered. The module's own allocations: rel_failslab.sh.
# errnos=, calls=: only these errnos on the first call, only these calls
# (each must be reached). For the mofed51 and legacy cores (issue 30):
# what differs there is the core's path around the teardown calls (under
# the mapping lock, from inside the invalidation), not the errno.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh

ERRNOS="22:EINVAL 524:ENOTSUPP 12:ENOMEM 5:EIO"
if [ -n "$rel_arg_errnos" ]; then
	_e=
	for _n in $(echo "$rel_arg_errnos" | tr '+' ' '); do
		for _x in $ERRNOS; do
			[ "${_x#*:}" = "$_n" ] && _e="$_e $_x"
		done
	done
	[ -n "$_e" ] || fail "errnos=$rel_arg_errnos: not among $ERRNOS"
	ERRNOS=$_e
fi
OPS="get_pages get_pages_persistent dma_map_pages acquire_alloc ticket_alloc sg_alloc dma_unmap_pages put_pages"
RESIDUE_OPS="put_pages_persistent free_page_table free_dma_mapping"
if [ "$pers" = 1 ]; then
	MUST_REACH="get_pages_persistent put_pages_persistent dma_map_pages dma_unmap_pages acquire_alloc sg_alloc"
else
	MUST_REACH="get_pages put_pages dma_map_pages dma_unmap_pages free_page_table free_dma_mapping acquire_alloc ticket_alloc sg_alloc"
fi
if [ -n "$rel_arg_calls" ]; then
	_calls=$(echo "$rel_arg_calls" | tr '+' ' ')
	for _c in $_calls; do
		case " $OPS $RESIDUE_OPS " in
		*" $_c "*) ;;
		*) fail "calls=$rel_arg_calls: $_c is not among $OPS $RESIDUE_OPS" ;;
		esac
	done
	_keep() {
		_k=
		for _o in $1; do
			case " $_calls " in *" $_o "*) _k="$_k $_o" ;; esac
		done
		echo "$_k"
	}
	OPS=$(_keep "$OPS")
	RESIDUE_OPS=$(_keep "$RESIDUE_OPS")
	MUST_REACH=$_calls
fi

residue=0
reached=
refused_regs=0
absorbed=0

in_list() {
	case " $2 " in *" $1 "*) return 0 ;; esac
	return 1
}

# cycle KIND: one registration life cycle; sets reg_out, reg_rc.
cycle() {
	simtest_to _o gpu-alloc 192K || fail "gpu-alloc: $_o" $(figures)
	kv_set va va "$_o"
	st gpu-fill "$va" 192K fill:0x11 >/dev/null || fail "gpu-fill" $(figures)
	simtest_to reg_out mr-reg $((va + 100)) 80K
	reg_rc=$?
	REL_OPS=$((REL_OPS + 3))
	if [ "$reg_rc" != 0 ]; then
		st gpu-free "$va" >/dev/null || fail "cudaFree after a failed registration" $(figures)
		REL_OPS=$((REL_OPS + 1))
		return
	fi
	kv_set mr mr "$reg_out"
	if [ "$1" = free ]; then
		st gpu-free "$va" >/dev/null || fail "cudaFree of a registered buffer failed ($op $ename)" $(figures)
		simtest_to _o mr-dereg "$mr" || fail "dereg after cudaFree failed ($op $ename): $_o" $(figures)
	else
		st hca-write "$mr" 0 80K seed:7 >/dev/null || fail "DMA write ($op $ename)" $(figures)
		st gpu-check $((va + 100)) 80K seed:7 >/dev/null || fail "data did not land ($op $ename)" $(figures)
		simtest_to _o mr-dereg "$mr" || fail "dereg failed ($op $ename): $_o" $(figures)
		st gpu-free "$va" >/dev/null || fail "cudaFree after dereg failed ($op $ename)" $(figures)
	fi
	REL_OPS=$((REL_OPS + 5))
}

stack_up
for op in $OPS $RESIDUE_OPS; do
	kind=reg
	case "$op" in free_page_table | free_dma_mapping) kind=free ;; esac
	for nth in 1 2; do
		errnos=$ERRNOS
		[ "$nth" = 1 ] || errnos="5:EIO"
		# persistent_api_support=1 shares the non-persistent ops' code: first calls only.
		[ "$nth" = 2 ] && [ "$pers" = 1 ] && break
		fired_any=0
		for e in $errnos; do
			errno=${e%%:*}
			ename=${e#*:}
			simtest_to lc0 leak-check
			simtest_to f0 counters faults_injected
			st fault "$op" "$nth" "$errno" >/dev/null || fail "cannot arm fault $op" $(figures)
			mark
			cycle $kind
			st fault-clear >/dev/null
			simtest_to fired counters faults_injected
			fired=$((fired - f0))
			if [ "$fired" = 0 ]; then
				[ "$reg_rc" = 0 ] || fail "registration failed with no fault injected: $reg_out" $(figures)
				continue
			fi
			fired_any=1
			REL_FAULTS=$((REL_FAULTS + fired))
			in_list "$op" "$reached" || reached="$reached $op"
			# Any operation may fail a registration (acquire pins with
			# get_pages, and may unpin): then with an errno. A registration
			# that succeeded absorbed the fault (a teardown operation's
			# failure, or a retry).
			if [ "$reg_rc" = 0 ]; then
				absorbed=$((absorbed + 1))
			else
				case "$reg_out" in
				*errno=*) refused_regs=$((refused_regs + 1)) ;;
				*) fail "$op#$nth $ename: registration failed without an errno: $reg_out" $(figures) ;;
				esac
				log "$op#$nth $ename: registration refused: $reg_out"
			fi
			if simtest_to lc leak-check; then
				:
			elif in_list "$op" "$RESIDUE_OPS"; then
				# The provider kept what it refused to release: exactly
				# one page table (and its pages), nothing of the core.
				[ "$(sval mrs_live "$lc")" = 0 ] && [ "$(sval gpu_allocs_live "$lc")" = 0 ] &&
					[ "$(sval page_tables_live "$lc")" -le $(( $(sval page_tables_live "$lc0") + 1 )) ] ||
					fail "$op#$nth $ename: more left behind than the refused page table: $lc" $(figures)
				since_mark_has "$REL_MOD" ||
					fail "$op#$nth $ename: the provider refused a release and the module said nothing" $(figures)
				residue=$((residue + 1))
				log "$op#$nth $ename: provider residue as expected: $lc"
				# Collect it now (the provider reports it when unloading).
				stack_up
			else
				fail "$op#$nth $ename: left behind $lc" $(figures)
			fi
		done
		[ "$fired_any" = 1 ] || break
	done
done
for op in $MUST_REACH; do
	in_list "$op" "$reached" || fail "the module never reached $op in this configuration" $(figures)
done

# The core refuses the client's registration at load: each registration.
nregs=1
[ "$pers" = 0 ] && nregs=2
n=1
while [ $n -le $nregs ]; do
	unload $REL_MOD
	st fault register_client "$n" EIO >/dev/null || fail "cannot arm register_client" $(figures)
	# shellcheck disable=SC2046
	insmod_refused "core refuses registration #$n" $REL_MOD $(client_params)
	st fault-clear >/dev/null
	REL_FAULTS=$((REL_FAULTS + 1))
	simtest_to _cr counters clients_registered
	[ "$_cr" = 0 ] ||
		fail "registration #$n refused: $_cr client(s) stayed registered" $(figures)
	ls /sys/kernel/mm/memory_peers/ | grep -q . &&
		fail "registration #$n refused: memory_peers still lists $(ls /sys/kernel/mm/memory_peers/)" $(figures)
	n=$((n + 1))
done
# shellcheck disable=SC2046
load $REL_MOD $(client_params)
REL_IDLE_REF=$(refcnt)
st roundtrip 256K --offset 4097 --len 150000 >/dev/null || fail "the module does not work after the faults" $(figures)
settle_idle
stack_down
# Leaks: the boot's final scan, which names the scenario that allocated
# each object; a scan here where the boot asks (peermem.kmemleak=each).
kmemleak_check light
rel_pass reached="$(echo $reached | wc -w)" refused_regs="$refused_regs" absorbed="$absorbed" provider_residue="$residue"
