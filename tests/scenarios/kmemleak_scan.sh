#!/bin/sh
# Two kmemleak scans, as close together as the rules allow: kmemleak reports
# an object that is unreferenced in a scan, whose checksum that scan found
# unchanged since the scan before (so the first scan, which records every
# new object's checksum, can run at once), and that was allocated at least
# its minimum age (5 s) before the reporting scan started. Under TCG a scan
# takes seconds, so the first scan usually covers the age and no sleep is
# left; the old "sleep 6; scan; scan" paid the sleep every time.
# Exit 1 when kmemleak is not there or refused a scan (disabled, e.g. after
# an internal error): the leak check did not happen.
k=/sys/kernel/debug/kmemleak
[ -w $k ] || exit 1
read -r t0 _ </proc/uptime
echo scan >$k || exit 1
read -r t1 _ </proc/uptime
wait_ms=$(echo "$t0 $t1" | awk '{ w = 6000 - ($2 - $1) * 1000; print (w > 0 ? int(w) : 0) }')
[ "$wait_ms" -gt 0 ] && usleep $((wait_ms * 1000))
echo scan >$k || exit 1
