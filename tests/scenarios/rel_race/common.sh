# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# Helpers of the rel_race windows, sourced by rel_race.sh once the stack is
# up: steps run in the background, a registration the invalidating client
# must take, a round whose window was missed, and the waits and checks
# several families of windows share.
# bg_run VAR CMD...: runs CMD in the background, output to /tmp/bg.$VAR.
bg_run() {
	_v=$1
	shift
	# emptied first: a poll (bg_done) never reads the last step's rc
	: >/tmp/bg.$_v
	("$@" >/tmp/bg.$_v 2>&1; echo "rc=$?" >>/tmp/bg.$_v) &
	eval "pid_$_v=$!"
}

bg_rc() {
	sed -n 's/^rc=//p' /tmp/bg.$1 | tail -n 1
}

# no_cleared_client_read: fails where a real core from MLNX_OFED 5.4-3 on
# would dereference NULL: an invalidation that reached the MR after the
# client's release returned (the simulator says so in the log).
no_cleared_client_read() {
	if _after "$REL_START" | grep -q "invalidation after the MR's release"; then
		fail "an invalidation reached the MR after its release: a NULL dereference in a real core (MLNX_OFED 5.4-3 and later)" $(figures)
	fi
}

# release_waits: the client under test does not return from release while
# a free callback of the same registration is inside the core's invalidate:
# nvidia_peermem_rs on a core with the stop notifier (MLNX_OFED 5.4-3 and
# later: the simulated modern generations), whichever client table it
# registered; the only cores that read the MR's client after its release.
release_waits() {
	[ "$client" = rs ] && { [ "$gen" = modern ] || [ "$gen" = modern2410 ]; }
}

# test_delay POINT MS: arms a delay point of our module's test build for
# one pass (it busy-waits there, saying so in the kernel log, until
# test_delay_release is written or MS ms are over).
test_delay() {
	echo "$2" >/sys/module/$REL_MOD/parameters/test_delay_ms &&
		echo "$1" >/sys/module/$REL_MOD/parameters/test_delay ||
		fail "cannot arm the test build's delay point $1" $(figures)
}

# await_test_delay POINT: waits (up to 10 s) until the delay point POINT of
# the test build is taken after the last mark.
await_test_delay() {
	_w=0
	while ! since_mark_has "test delay $1: [0-9]+ ms" && [ $_w -lt $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; do
		nap 0.1
		_w=$((_w + 1))
	done
	since_mark_has "test delay $1: [0-9]+ ms" || fail "the test build's delay point $1 was never reached" $(figures)
}

# test_delay_held POINT: the last pass through the test build's delay point
# POINT since the mark was ended by the scenario (test_delay_release, once
# the other side had landed) or lasted at least the time it was armed for,
# by the kernel log's clock. A hold that ended sooner by itself tests less
# than the scenario says (the other side may never have run inside it).
test_delay_held() {
	_h=$(since_mark | awk -v p="test delay $1: " '
		{
			i = index($0, p)
			if (!i)
				next
			t = $0
			sub(/^\[ */, "", t)
			sub(/\].*/, "", t)
			rest = substr($0, i + length(p))
			if (rest ~ /^[0-9]+ ms/) {
				t0 = t
				ms = rest + 0
			} else if (rest ~ /^done/ && t0 != "") {
				held = int((t - t0) * 1000)
				asked = ms
				released = rest ~ /\(released\)/
			}
		}
		END { if (asked != "") print held, asked, released }')
	[ -n "$_h" ] || fail "no whole pass through the delay point $1 in the kernel log" $(figures)
	# shellcheck disable=SC2086 # two numbers
	set -- "$1" $_h
	if [ "$4" = 1 ]; then
		log "the delay point $1 held $2 ms, until released ($3 ms armed)"
		return 0
	fi
	log "the delay point $1 held $2 ms ($3 ms armed)"
	[ "$2" -ge $(($3 * 9 / 10)) ] ||
		fail "the delay point $1 held $2 ms of the $3 ms armed: the window was shorter than the scenario assumes" $(figures)
}

# release_waited: how many releases of our module have waited so.
release_waited() {
	sed -n 's/^release_waited_for_invalidation //p' /sys/kernel/debug/$REL_MOD/stats
}

# release_waited_since N0: a release has waited since release_waited read N0.
release_waited_since() {
	[ "$(release_waited)" != "$1" ]
}

# free_waited_for_unmap: how many free callbacks of our module have waited
# for an unmap inside the provider (counted as the wait begins).
free_waited_for_unmap() {
	sed -n 's/^free_waited_for_unmap //p' /sys/kernel/debug/$REL_MOD/stats
}

free_waited_for_unmap_since() {
	[ "$(free_waited_for_unmap)" != "$1" ]
}

# delays_taken_reached N: N delay points have been entered in all.
delays_taken_reached() {
	simtest_to _dt counters delays_taken
	[ "$_dt" -ge "$1" ]
}

# load_unwinding_waits: the failing load of the background step "load"
# waits for what is in flight (or has ended).
load_unwinding_waits() {
	bg_done load ||
		since_mark_has "unregister: waiting for the client list|unregister nv_mem: waiting for 1 registrations|the load failed \(.*\): waiting for [0-9]* registrations"
}

# release_waited_or_dereg_done N0: a release has waited since
# release_waited read N0, or the background deregistration has returned.
release_waited_or_dereg_done() {
	release_waited_since "$1" || bg_done dereg
}

# bg_done VAR: the background step VAR (bg_run) has ended (read in the
# shell: a poll of it creates no process).
bg_done() {
	[ -f /tmp/bg.$1 ] || return 1
	while read -r _l; do
		case $_l in rc=*) return 0 ;; esac
	done </tmp/bg.$1
	return 1
}

# dereg_done_free_held: the background deregistration has returned; sets
# ovl to 1 when the background cudaFree had not (it is held in the core).
dereg_done_free_held() {
	bg_done dereg || return 1
	ovl=1
	! bg_done free || ovl=0
}

# alloc_reg SIZE OFFSET LEN: sets va, mr. With persistent_api_support=0 the
# invalidating nv_mem client must take the MR (else no free callback is ever
# raced).
alloc_reg() {
	simtest_to _o gpu-alloc "$1" || fail "gpu-alloc: $_o" $(figures)
	kv_set va va "$_o"
	simtest_to _o mr-reg $((va + $2)) "$3" || fail "mr-reg: $_o" $(figures)
	kv_set mr mr "$_o"
	[ "$pers" = 1 ] || [ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not the invalidating nv_mem" $(figures)
	REL_OPS=$((REL_OPS + 2))
}

# finish_round VA [MR]: whatever survived the race is torn down normally.
finish_round() {
	if [ -n "$2" ] && st mr-query "$2" >/dev/null 2>&1; then
		st mr-dereg "$2" >/dev/null || fail "dereg after the race failed" $(figures)
	fi
	st gpu-free "$1" >/dev/null 2>&1
	REL_OPS=$((REL_OPS + 2))
	simtest_to _lc leak-check || fail "round left something behind: $_lc" $(figures)
}

# missed_round WINDOW: a round whose window counter did not move tested
# nothing: it is run again, its delay twice as long (a loaded host can be
# slower to start the other side than the window lasts); four such rounds
# in a row fail the scenario.
missed=0
missed_round() {
	missed=$((missed + 1))
	retried=$((retried + 1))
	log "round $i: the window $1 was not reached ($missed in a row)"
	[ $missed -lt 4 ] ||
		fail "the window $1 was not reached in $missed tries in a row: the race was never run" $(figures)
}
retried=0

rmmod_refused() {
	mark
	if rmmod $REL_MOD 2>/tmp/rmmod.err; then
		fail "rmmod succeeded $1" $(figures)
	fi
	loaded $REL_MOD || fail "module gone after a refused rmmod $1" $(figures)
	log "rmmod refused $1: $(cat /tmp/rmmod.err)"
	REL_RACES=$((REL_RACES + 1))
}

# held_window TRIES MS CAP MISSED TRY...: runs the command TRY... with the
# argument MS until it returns 0. A try that returns 1 did not hold its
# window (a host too loaded to keep it: nothing was tested, nothing is
# left) and runs again with the window doubled, at most CAP ms; the
# TRIES-th miss fails with MISSED.
held_window() {
	_hw_left=$1 _hw_ms=$2 _hw_cap=$3 _hw_missed=$4
	shift 4
	while ! "$@" "$_hw_ms"; do
		_hw_left=$((_hw_left - 1))
		[ $_hw_left -gt 0 ] || fail "$_hw_missed (the last window $_hw_ms ms)" $(figures)
		log "$_hw_missed in a window of $_hw_ms ms; again with a longer one"
		_hw_ms=$((_hw_ms * 2))
		[ $_hw_ms -le "$_hw_cap" ] || _hw_ms=$_hw_cap
	done
}

# wait_delay D0: until a delay point was entered since the counter was D0.
wait_delay() {
	_w=0
	while simtest_to _dt counters delays_taken && [ "$_dt" = "$1" ] && [ $_w -lt $((150 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; do
		nap 0.02
		_w=$((_w + 1))
	done
	simtest_to _dt counters delays_taken
	[ "$_dt" != "$1" ] || fail "the delay point was never reached" $(figures)
}
