#!/usr/bin/env bash
# Runs one boot in make test's shared pool of QEMUs:
#   pool-slot.sh SECONDS NAME COMMAND [ARG...]
# With PEERMEM_VM_SLOTS=DIR, waits for a free slot of DIR's pool (its
# size in DIR/jobs), runs COMMAND holding it, and logs the boot's start
# and end as NAME in DIR/log, which make test checks against the pool's
# size (tests/vm/pool-check.py). Longest first across everything waiting:
# a boot expected to take SECONDS lets a longer waiting one go first.
# Without PEERMEM_VM_SLOTS, runs COMMAND at once. Exits with COMMAND's
# status.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: pool-slot.sh SECONDS NAME COMMAND [ARG...]" >&2; exit 2; }
secs=$1
name=$2
shift 2
slots=${PEERMEM_VM_SLOTS:-}
[ -n "$slots" ] || exec "$@"
jobs=$(cat "$slots/jobs" 2>/dev/null) || { echo "pool-slot: $slots/jobs missing" >&2; exit 2; }

# longer_waiting: another live waiter posted a longer boot than ours.
longer_waiting() {
	local w pid t
	for w in "$slots"/waiting.*; do
		[ -f "$w" ] || continue
		pid=${w##*.}
		[ "$pid" != $$ ] || continue
		kill -0 "$pid" 2>/dev/null || continue
		read -r t <"$w" 2>/dev/null || continue
		[ "${t:-0}" -le "$secs" ] || return 0
	done
	return 1
}

trap 'rm -f "$slots/waiting.$$"' EXIT
echo "$secs" >"$slots/waiting.$$"
slot_fd=
while [ -z "$slot_fd" ]; do
	if ! longer_waiting; then
		for ((i = 0; i < jobs; i++)); do
			exec {fd}>"$slots/slot-$i.lock"
			if flock -n "$fd"; then
				slot_fd=$fd
				break
			fi
			exec {fd}>&-
		done
	fi
	[ -n "$slot_fd" ] || sleep 1
done
rm -f "$slots/waiting.$$"
echo "$(date +%s.%N) start $name" >>"$slots/log"
# The command does not inherit the slot: nothing it leaves behind can keep
# a slot held after this script ends.
"$@" {slot_fd}>&-
st=$?
echo "$(date +%s.%N) end $name" >>"$slots/log"
exit $st
