#!/bin/sh
# peermem-check validate --backend sim in the VM (issue 6): the tool's whole
# data-path flow against the simulated stack, for the invalidating and the
# persistent client, aligned and unaligned ranges, both HCA engines; then
# its failure paths: no client loaded (the cause must name it), JSON shape.
#   tool_validate [generation=modern|mofed51|legacy] [persistent_api_support=0|1]
. /scenarios/lib.sh
generation=modern
pers=0
for a in "$@"; do
	case $a in
	generation=*) generation=${a#*=} ;;
	persistent_api_support=*) pers=${a#*=} ;;
	esac
done
load_sim_stack generation="$generation"

# Without a peer-memory client the core cannot pin GPU memory: validate must
# fail with exit 1 and say why (no panic, nothing left behind).
out=$(peermem-check validate --backend sim --size 64K 2>&1)
rc=$?
echo "$out" | sed 's/^/SCENARIO-LOG tool_validate: /'
[ $rc = 1 ] || fail "validate without a client exited $rc, want 1"
echo "$out" | grep -q "FAIL" || fail "validate without a client printed no failure"
echo "$out" | grep -q "fix:" || fail "validate without a client printed no fix"

# A legacy (4.9 LTS) core needs the legacy ABI.
pds=0
[ "$generation" = legacy ] && pds=1
load nvidia_peermem_rs peerdirect_support="$pds" persistent_api_support="$pers"
# pers=1: one persistent nv_mem; pers=0: invalidating nv_mem registered
# first (takes the MRs) and persistent nv_mem_nc.
want=nv_mem

check "validate, aligned and unaligned, cpu engine" \
	peermem-check validate --backend sim --size 64K,1M,300000 --offset 0,4097,65535 --iterations 3 --seed 7
check "validate, edu engine (real emulated PCI DMA)" \
	peermem-check validate --backend sim --engine edu --size 16K,100000 --offset 0,4660 --seed 8

json=$(peermem-check validate --backend sim --json --size 128K --offset 1 --seed 9)
echo "$json" | grep -q '"verdict": "pass"' || fail "JSON verdict is not pass: $json"
echo "$json" | grep -q "\"client\": \"$want\"" || fail "JSON does not name client $want"
echo "$json" | grep -q '"gpu_mismatched_bytes": 0' || fail "JSON lacks gpu_mismatched_bytes=0"
runs=$(echo "$json" | grep -c '"result": "pass"')
[ "$runs" = 1 ] || fail "JSON has $runs passing runs, want 1"

lc=$(simtest leak-check) || fail "validate left something behind: $lc"
unload nvidia_peermem_rs
unload_sim_stack
no_new_leaks
pass runs=$((3 * 3 * 3 + 2 * 2 + 1)) leaks="$LEAKS"
