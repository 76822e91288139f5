#!/bin/sh
# peermem-check validate --backend sim in the VM (issue 6): the tool's whole
# data-path flow against the simulated stack, for the invalidating and the
# persistent client, aligned and unaligned ranges, both HCA engines; then
# its failure paths: no client loaded (the cause must name it), JSON shape.
#   tool_validate [generation=modern|mofed51|legacy] [persistent_api_support=0|1]
#                 [peerdirect_support=0|1] [client=rs|nv535|nv550|nv555] [quick=1]
# peerdirect_support: default 0, 1 on a legacy core. client=nvNNN: NVIDIA's
# own nvidia-peermem of that release (issue 33; it has no
# persistent_api_support before 560: both its clients, the invalidating
# nv_mem first). The one cell where the load must be refused (a legacy core,
# peerdirect_support=0, an invalidating nv_mem) checks the refusal instead:
# clean, and explained. quick=1: one validate run of each engine (suite
# nvidia-vs-ours, which walks every cell).
. /scenarios/lib.sh
generation=modern
pers=0
pds=
client=rs
quick=0
for a in "$@"; do
	case $a in
	generation=*) generation=${a#*=} ;;
	persistent_api_support=*) pers=${a#*=} ;;
	peerdirect_support=*) pds=${a#*=} ;;
	client=*) client=${a#*=} ;;
	quick=*) quick=${a#*=} ;;
	*) fail "unknown argument $a" ;;
	esac
done
# A legacy (4.9 LTS) core needs the legacy ABI.
if [ -z "$pds" ]; then
	pds=0
	[ "$generation" = legacy ] && pds=1
fi
case $client in
rs)
	mod=nvidia_peermem_rs
	params="peerdirect_support=$pds persistent_api_support=$pers"
	msg_re=nvidia_peermem_rs
	;;
nv[0-9][0-9][0-9])
	mod=nvidia_peermem_${client#nv}
	[ "$pers" = 0 ] || fail "NVIDIA's nvidia-peermem before 560 has no persistent_api_support"
	params="peerdirect_support=$pds"
	msg_re=nvidia-peermem
	# on a provider of its own generation (drivers 535 to 555)
	PSIM_DRIVER=r535
	;;
*) fail "unknown client=$client" ;;
esac
# What an earlier, failed scenario left loaded goes first (the control
# device first: it deregisters its MRs and frees its GPU memory).
for m in peermem_sim nvidia_peermem_rs nvidia_peermem_535 nvidia_peermem_550 nvidia_peermem_555 \
	peerdirect_sim nvidia_p2p_sim; do
	[ -d /sys/module/$m ] && rmmod $m 2>/dev/null
done
# Splats while it runs fail the scenario, naming the first (the boot would
# fail on them anyway; here the scenario says which client, and a declared
# red of NVIDIA's module can name it).
start_mark="tool_validate-begin $$ $(cat /proc/uptime)"
echo "$start_mark" >/dev/kmsg
splat_re='BUG:|WARNING:|KASAN:|UBSAN:|Oops|general protection fault|circular locking dependency|unreferenced object 0x|blocked for more than'
no_splats() {
	_s=$(dmesg | awk -v m="$start_mark" 'index($0, m) { n = NR } { l[NR] = $0 } END { for (i = n + 1; i <= NR; i++) print l[i] }' |
		grep -E -- "$splat_re" | head -n 1 | sed 's/^\[[^]]*\] *//')
	[ -z "$_s" ] || fail "a splat during the scenario: $_s"
}
load_sim_stack generation="$generation"

# Without a peer-memory client the core cannot pin GPU memory: validate must
# fail with exit 1 and say why (no panic, nothing left behind).
out=$(peermem-check validate --backend sim --size 64K 2>&1)
rc=$?
echo "$out" | sed 's/^/SCENARIO-LOG tool_validate: /'
[ $rc = 1 ] || fail "validate without a client exited $rc, want 1"
echo "$out" | grep -q "FAIL" || fail "validate without a client printed no failure"
echo "$out" | grep -q "fix:" || fail "validate without a client printed no fix"

if [ "$generation,$pds,$pers" = legacy,0,0 ]; then
	# The legacy core would read the extended client's ex_size and flags
	# as its two private-data callbacks: the load must fail, cleanly, and
	# the module must say to load with peerdirect_support=1.
	echo "rel-mark tool_validate $$" >/dev/kmsg
	# shellcheck disable=SC2086
	if out=$(command simtest load-module "$(mod_path $mod)" $params 2>&1); then
		fail "the load of $mod $params on a legacy core succeeded"
	fi
	loaded $mod && fail "$mod stayed loaded after the refused load"
	[ -d /sys/kernel/mm/memory_peers/nv_mem ] && fail "nv_mem is still published after the refused load"
	said=$(dmesg | awk '/rel-mark tool_validate/ { n = NR } { l[NR] = $0 } END { for (i = n + 1; i <= NR; i++) print l[i] }' |
		grep -E -- "$msg_re" | tr '\n' ' ')
	echo "$said" | grep -q "peerdirect_support=1" ||
		fail "the refused load does not tell a legacy core's user to load with peerdirect_support=1 (the module said: ${said:-nothing})"
	no_splats
	unload_sim_stack
	no_new_leaks
	pass refused=yes leaks="$LEAKS"
fi

# shellcheck disable=SC2086
load $mod $params
# persistent_api_support=1: one persistent nv_mem; persistent_api_support=0: invalidating nv_mem registered
# first (takes the MRs) and persistent nv_mem_nc.
want=nv_mem

if [ "$quick" = 1 ]; then
	check "validate, aligned and unaligned, cpu engine" \
		peermem-check validate --backend sim --size 64K,300000 --offset 0,4097 --seed 7
	check "validate, edu engine (real emulated PCI DMA)" \
		peermem-check validate --backend sim --engine edu --size 16K --offset 4660 --seed 8
else
	check "validate, aligned and unaligned, cpu engine" \
		peermem-check validate --backend sim --size 64K,1M,300000 --offset 0,4097,65535 --iterations 3 --seed 7
	check "validate, edu engine (real emulated PCI DMA)" \
		peermem-check validate --backend sim --engine edu --size 16K,100000 --offset 0,4660 --seed 8
fi

json=$(peermem-check validate --backend sim --json --size 128K --offset 1 --seed 9)
echo "$json" | grep -q '"verdict": "pass"' || fail "JSON verdict is not pass: $json"
echo "$json" | grep -q "\"client\": \"$want\"" || fail "JSON does not name client $want"
echo "$json" | grep -q '"gpu_mismatched_bytes": 0' || fail "JSON lacks gpu_mismatched_bytes=0"
runs=$(echo "$json" | grep -c '"result": "pass"')
[ "$runs" = 1 ] || fail "JSON has $runs passing runs, want 1"

simtest_to lc leak-check || fail "validate left something behind: $lc"
no_splats
unload $mod
unload_sim_stack
no_new_leaks
runs=$((3 * 3 * 3 + 2 * 2 + 1))
[ "$quick" = 1 ] && runs=$((2 * 2 + 1 + 1))
pass runs=$runs leaks="$LEAKS"
