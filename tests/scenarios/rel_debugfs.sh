#!/bin/sh
# shellcheck disable=SC1091,SC2015,SC2034,SC2046,SC2086 # rel_lib.sh reads REL_OPS, REL_RACES
# debugfs reads under registration churn (issue 30): two readers read the
# module's debugfs files (registrations, stats) in a loop, one with cat, one
# in 37-byte reads (seq_file's partial reads), while simtest stress
# registers, DMAs, frees and deregisters from 4 threads, cudaFree racing
# the deregistration of live MRs. No splat, and every read well formed:
#   registrations  "count N", then exactly N lines "ID KIND [START, END)
#                  pages=P sg_entries=S state=STATE" with a KIND and STATE
#                  the module has, 1 <= P <= 4 (stress's largest buffer) and
#                  S 0 (not mapped) or P (one entry per GPU page)
#   stats          the names of the idle read, in its order, each with a
#                  number (or the version / API word)
# Some reads must have seen live registrations (else the churn was never
# observed and the scenario fails). After the run: idle (rel_lib's
# settle_idle).
#   rel_debugfs.sh [generation=modern] [peerdirect_support=0] [persistent_api_support=0] [ops=1000] [threads=4]
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
threads=${rel_arg_threads:-4}
ops=${rel_arg_ops:-1000}
DD=/sys/kernel/debug/$REL_MOD

stack_up
[ -r $DD/registrations ] && [ -r $DD/stats ] || fail "no debugfs files in $DD" $(figures)
keys=$(awk '{ printf "%s ", $1 }' $DD/stats)
[ -n "$keys" ] || fail "debugfs stats is empty" $(figures)

# reader N cat|dd: reads both files until /tmp/dbg.stop exists, with cat or
# in 37-byte reads, every read after a "@@ FILE" line, into /tmp/dbg.N.
reader() {
	while [ ! -e /tmp/dbg.stop ]; do
		for _f in registrations stats; do
			echo "@@ $_f"
			if [ "$2" = dd ]; then
				dd bs=37 if=$DD/$_f 2>/dev/null || echo "@@ read-error $_f"
			else
				cat $DD/$_f || echo "@@ read-error $_f"
			fi
		done
		# leave the guest's two CPUs to the churn most of the time
		nap 0.1
	done >/tmp/dbg.$1
}
rm -f /tmp/dbg.stop /tmp/dbg.1 /tmp/dbg.2
reader 1 cat &
r1=$!
reader 2 dd &
r2=$!
out=$(command simtest stress --threads "$threads" --ops "$ops" 2>&1)
rc=$?
touch /tmp/dbg.stop
wait $r1 $r2
last=$(echo "$out" | grep '^result=' | tail -n 1)
kv_set REL_OPS ops "$last"
kv_set REL_RACES orphan_deregs "$last"
[ "$rc" = 0 ] && [ "$(sval result "$last")" = pass ] ||
	fail "stress failed (rc=$rc): $last" $(figures)
rel_no_splats
res=$(cat /tmp/dbg.1 /tmp/dbg.2 | awk -v ref="$keys" '
	BEGIN { nref = split(ref, want, " ") }
	function bad(m) { if (!err) err = m ": " $0 }
	function block_end() {
		if (mode == "r") {
			if (cnt < 0) bad("registrations read without a count line")
			else if (lines != cnt) bad("count " cnt " but " lines " registration lines")
			reads++
			if (cnt > 0) busy++
			if (cnt > most) most = cnt
		} else if (mode == "s") {
			if (k != nref) bad("stats read of " k " lines, want " nref)
			reads++
		}
		mode = ""
	}
	/^@@ read-error/ { block_end(); bad("a read failed"); next }
	/^@@ / { block_end(); mode = ($2 == "registrations") ? "r" : "s"; cnt = -1; lines = 0; k = 0; next }
	mode == "r" && cnt < 0 {
		if ($0 !~ /^count (0|[1-9][0-9]*)$/) bad("not a count line")
		cnt = $2 + 0
		next
	}
	mode == "r" {
		lines++
		if ($0 !~ /^[0-9]+ (invalidating|persistent) \[0x[0-9a-f]+, 0x[0-9a-f]+\) pages=[0-9]+ sg_entries=[0-9]+ state=(acquired|pinning|pinned|mapping|mapped|reading|unmapping|unpinning|invalidating|invalidated)$/) {
			bad("malformed registration line")
			next
		}
		p = substr($5, 7) + 0
		s = substr($6, 12) + 0
		if (p < 1 || p > 4) bad("pages out of range")
		if (s != 0 && s != p) bad("sg_entries neither 0 nor pages")
		next
	}
	mode == "s" {
		k++
		if ($1 != want[k]) bad("stats line " k " is not " want[k])
		else if ($0 !~ /^[a-z0-9_]+ ([0-9]+|0x[0-9a-f]+|0x[0-9a-f]+-0x[0-9a-f]+|get_pages_persistent|get_pages_without_callback)$/) bad("malformed stats line")
		next
	}
	{ bad("a line outside any read") }
	END {
		block_end()
		printf "reads=%d busy_reads=%d most_live=%d", reads, busy, most
		if (err) { printf " error=%s\n", err; exit 1 }
		printf "\n"
	}')
arc=$?
log "debugfs reads: $res"
[ "$arc" = 0 ] || fail "a debugfs read under churn: $(echo "$res" | sed 's/.* error=//')" $(figures)
[ "$(sval busy_reads "$res")" -gt 0 ] ||
	fail "no debugfs read saw a live registration: the churn was not observed ($res)" $(figures)
settle_idle
kmemleak_check light
rel_pass $res
