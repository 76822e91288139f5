#!/bin/sh
# The fixtures under load, with the reference client: simtest stress (many
# threads allocating, registering, DMAing through both engines, freeing
# while MRs are live, deregistering orphans) must end with exact data, no
# leak, balanced core counters and a clean kernel log.
#   fixture_stress.sh generation=G abi=A [ops=N]
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
gen=${arg_generation:-modern}
abi=${arg_abi:-ex}
ops=${arg_ops:-4000}
load_sim_stack generation="$gen"
load_refclient abi="$abi"
out=$(command simtest stress --threads 4 --ops "$ops" --edu-every 200 2>&1) || {
	echo "$out" | grep -E "^stress: (unexpected|mr )" | head -n 10 | sed 's/^/SCENARIO-LOG stress: /'
	fail "stress: $(echo "$out" | grep -E "^stress: (unexpected|mr )" | head -n 2 | tr '\n' ' ')$(echo "$out" | tail -n 3 | tr '\n' ' ')"
}
log "$(echo "$out" | tail -n 1)"
no_leaks
teardown
pass ops="$ops"
