# shellcheck shell=sh
# Helpers of the reliability scenarios (rel_*.sh, issue 5). Source after
# lib.sh:   . /scenarios/lib.sh; . /scenarios/rel_lib.sh
#
# Arguments every rel_ scenario understands (key=value, from the suite line):
#   generation=modern|mofed51|legacy
#                               PeerDirect core generation (default modern)
#   peerdirect_support=0|1      of nvidia_peermem_rs (default 0)
#   persistent_api_support=0|1  of nvidia_peermem_rs (default 0)
#   client=rs|ref|nv535|nv550|nv555
#                               the client under test: our module (default),
#                               the fixtures' C reference client (to check a
#                               scenario itself), or NVIDIA's own
#                               nvidia-peermem.c of that release, unmodified,
#                               built against the fixtures (issue 33:
#                               tests/nvidia/build-nvidia-peermem.sh, module
#                               nvidia_peermem_<major>; suite nvidia-vs-ours)
#   defects=BUG                 client=ref only: the reference client with
#                               that field bug brought back on purpose
#                               (field-teeth: the scenario must catch it)
#   coalesce_sg=0|1             client=rs only: the module's coalesce_sg
# Figures every rel_ scenario reports: ops faults races leaks splats.

REL_MOD=nvidia_peermem_rs
gen=modern
pds=0
pers=0
client=rs
# The keys above and those of each rel_ scenario: any other argument (a
# misspelt knob, a short name) fails the scenario rather than running it in
# the default configuration.
REL_KEYS="generation peerdirect_support persistent_api_support client defects \
coalesce_sg rm_lockdep iommu window variant rounds wait bug part errnos calls \
ops threads seed max kmemleak"
for _a in "$@"; do
	_k=${_a%%=*}
	case "$_a" in
	*=*) ;;
	*) fail "scenario argument $_a is not KEY=VALUE" ;;
	esac
	case " $REL_KEYS " in
	*" $_k "*) eval "rel_arg_$_k=\${_a#*=}" ;;
	*) fail "unknown scenario argument $_a (keys: $REL_KEYS)" ;;
	esac
done
gen=${rel_arg_generation:-$gen}
pds=${rel_arg_peerdirect_support:-$pds}
pers=${rel_arg_persistent_api_support:-$pers}
client=${rel_arg_client:-$client}
case "$client" in
rs) ;;
ref) REL_MOD=peermem_refclient ;;
nv[0-9][0-9][0-9]) REL_MOD=nvidia_peermem_${client#nv} ;;
*) fail "unknown client=$client (rs, ref, nv535, nv550, nv555)" ;;
esac
# nvidia_client: the client under test is NVIDIA's module. Its releases up
# to 555 register the invalidating nv_mem and the persistent nv_mem_nc,
# always (persistent_api_support came with 560): persistent_api_support=1 does not exist.
nvidia_client() {
	case "$client" in nv*) return 0 ;; esac
	return 1
}
if nvidia_client && [ "$pers" = 1 ]; then
	fail "client=$client: NVIDIA's nvidia-peermem before 560 has no persistent_api_support (persistent_api_support=1 is not a configuration of it)"
fi
# rm_lockdep=1: the provider's driver (RM API) lock is one lockdep tracks
# (nvidia_p2p_sim rm_lock_lockdep=1, stricter than the real driver, whose
# lock is made of semaphores lockdep does not see). The lock-order tests.
PSIM_RM_LOCKDEP=${rel_arg_rm_lockdep:-${PSIM_RM_LOCKDEP:-0}}

# What an earlier, failed scenario left registered with our module goes
# first (as in module_lib.sh): unloading the control device deregisters its
# MRs and frees its GPU memory, so the client's rmmod in stack_up does not
# fail on them. Only then: an idle module (refcount 0) is left as it is.
for _m in nvidia_peermem_rs nvidia_peermem_535 nvidia_peermem_550 nvidia_peermem_555; do
	if [ -d /sys/module/peermem_sim ] && [ -r /sys/module/$_m/refcnt ] &&
		[ "$(cat /sys/module/$_m/refcnt)" != 0 ]; then
		rmmod peermem_sim 2>/dev/null
	fi
done

# Figures, accumulated by the helpers below.
REL_OPS=0
REL_FAULTS=0
REL_RACES=0
REL_LEAKS=0
REL_MARK_N=0
REL_START=

# The kernel-log signatures the verdict counts as splats: its own list
# (tests/verdict/src/log.rs), as one regex that mkinitramfs.sh puts in the
# initramfs, so a scenario and the verdict look for the same lines.
REL_SPLAT_RE=$(cat /etc/peermem/splat.re 2>/dev/null)
[ -n "$REL_SPLAT_RE" ] || fail "no /etc/peermem/splat.re in the initramfs: the scenario cannot check its splats"

# mark: a unique line in the kernel log; since_mark prints the log after it.
mark() {
	REL_MARK_N=$((REL_MARK_N + 1))
	REL_MARK="rel-mark $$-$REL_MARK_N $SCENARIO_ID"
	echo "$REL_MARK" >/dev/kmsg
	[ -n "$REL_START" ] || REL_START=$REL_MARK
}

# _after MARK: the kernel log after the last line containing MARK (all of
# it if MARK has scrolled out of the ring buffer).
_after() {
	dmesg | awk -v m="$1" '{ l[NR] = $0 } index($0, m) { s = NR }
		END { for (i = s + 1; i <= NR; i++) print l[i] }'
}

since_mark() {
	_after "$REL_MARK"
}

# since_mark_has PATTERN (extended regex)
since_mark_has() {
	since_mark | grep -q -E -- "$1"
}

# splats_so_far: splat lines in the kernel log since the scenario began.
# Lines matching $REL_EXPECTED_RE (set by a scenario whose suite declares
# that splat with expect_splat) are left out.
splats_so_far() {
	_after "$REL_START" | grep -E -- "$REL_SPLAT_RE" |
		grep -c -v -E -- "${REL_EXPECTED_RE:-^\$}"
}

# lockdep_alive: lockdep still validates (it turns itself off after a report).
lockdep_alive() {
	grep -q -E 'debug_locks: +1' /proc/lockdep_stats
}

st() {
	simtest "$@"
}

# sval KEY LINE: the value of KEY= in a line of key=value words.
sval() {
	kv "$@"
}

ctr() {
	simtest counters "$1"
}

# await_delay D0 [N]: waits (up to 10 s) until N (default 1) delay points
# have been entered since the delays_taken counter read D0, so what comes
# next lands inside the held window however slowly a loaded host started the
# other side.
await_delay() {
	_n=0
	while simtest_to _dt counters delays_taken; [ "$_dt" -lt $(($1 + ${2:-1})) ]; do
		_n=$((_n + 1))
		[ $_n -le $((100 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ] || return 1
		nap 0.1
	done
}

# A held window is a gate (tests/fixtures/psim_inject.h): armed with a
# generous deadline (GATE_MS), it lasts until the scenario has seen the
# other side of the race land and releases it, so a slow or loaded host
# makes the window longer, never missed. The deadline only ends a window
# whose other side never came (a hang, or a scenario's mistake); it stays
# far below the hung-task detector's threshold.
GATE_MS=30000

# release_point POINT: the threads held at the simulator's delay point
# POINT go on; POINT test_delay: the one held at the test build's.
release_point() {
	if [ "$1" = test_delay ]; then
		echo 1 >/sys/module/$REL_MOD/parameters/test_delay_release
	else
		st release "$1" >/dev/null
	fi
}

# release_when POINT CHECK...: once the check CHECK... succeeds (polled,
# within a bound that scales with the host), release_point POINT. Returns
# 1 when the check never succeeded (the point is released all the same).
release_when() {
	_rp=$1
	shift
	_rn=0
	until "$@"; do
		_rn=$((_rn + 1))
		if [ $_rn -gt $((500 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100)) ]; then
			release_point "$_rp"
			return 1
		fi
		nap 0.02
	done
	release_point "$_rp"
}

# counter_moved NAME V0: the simulated stack's counter NAME is not V0 now.
counter_moved() {
	simtest_to _cm counters "$1"
	[ "$_cm" != "$2" ]
}

# The client under test ------------------------------------------------------

# client_params: insmod parameters of the client under test for $pds/$pers.
client_params() {
	if [ "$client" = ref ]; then
		_abi=ex
		[ "$pds" = 1 ] && _abi=plain
		[ "$gen" = legacy ] && [ "$pds" = 1 ] && _abi=legacy
		_p=0
		[ "$pers" = 1 ] && _p=1
		echo "name=nv_mem abi=$_abi persistent=$_p${rel_arg_defects:+ defects=$rel_arg_defects}"
	elif nvidia_client; then
		echo "peerdirect_support=$pds"
	else
		echo "peerdirect_support=$pds persistent_api_support=$pers${rel_arg_coalesce_sg:+ coalesce_sg=$rel_arg_coalesce_sg}"
	fi
}

# stack_down: unload the client and the whole simulated stack, in order.
stack_down() {
	unload nvidia_peermem_rs peermem_refclient peermem_refclient2 \
		nvidia_peermem_535 nvidia_peermem_550 nvidia_peermem_555 \
		peermem_sim peerdirect_sim nvidia_p2p_sim
}

# stack_up: fresh fixtures of generation $gen (and $1... extra core params),
# without the client.
stack_up_fixtures() {
	# what a failed scenario left goes before this one's window opens
	stack_down
	[ -n "$REL_START" ] || mark
	# NVIDIA's module of a release runs on a provider of that release's
	# generation (r535: drivers 535 to 555), as it would on a node
	# shellcheck disable=SC2046
	load nvidia_p2p_sim rm_lock_lockdep="$PSIM_RM_LOCKDEP" $(nvidia_client && echo driver=r535)
	load peerdirect_sim generation="$gen" memory_peers="$PD_MEMORY_PEERS" "$@"
	load peermem_sim
	[ -c /dev/peermem_sim ] || fail "/dev/peermem_sim did not appear"
}

# stack_up: fixtures plus the client under test; records its idle refcount.
stack_up() {
	stack_up_fixtures
	# shellcheck disable=SC2046
	load "$REL_MOD" $(client_params)
	REL_IDLE_REF=$(cat /sys/module/$REL_MOD/refcnt)
	log "stack up: generation=$gen peerdirect_support=$pds persistent_api_support=$pers client=$REL_MOD idle refcnt=$REL_IDLE_REF"
}

refcnt() {
	{ read -r _rc </sys/module/$REL_MOD/refcnt && echo "$_rc"; } 2>/dev/null || echo gone
}

# The end-of-scenario checks ---------------------------------------------------

# sysfs_balanced: every client's core counters balance (MRs allocated =
# deallocated, bytes registered = deregistered; not pages: from MLNX_OFED
# 5.5 on num_dereg_pages stays 0).
sysfs_balanced() {
	for _d in /sys/kernel/mm/memory_peers/*/; do
		[ -r "$_d/num_alloc_mrs" ] || continue
		for _pair in alloc_mrs:dealloc_mrs reg_bytes:dereg_bytes; do
			# read, not $(cat): no fork and exec (together ~1.7 s
			# a call under TCG with KASAN, 48 ms with read)
			read -r _a <"$_d/num_${_pair%%:*}"
			read -r _b <"$_d/num_${_pair#*:}"
			if [ "$_a" != "$_b" ]; then
				log "unbalanced $_d: num_${_pair%%:*}=$_a num_${_pair#*:}=$_b"
				return 1
			fi
		done
	done
	return 0
}

# module_debugfs: prints our module's debugfs summary files (for the log).
module_debugfs() {
	_dd=/sys/kernel/debug/$REL_MOD
	[ -d $_dd ] || return 0
	for _f in $_dd/*; do
		[ -f "$_f" ] || continue
		log "debugfs $(basename "$_f"): $(head -c 400 "$_f" | tr '\n' ' ')"
	done
}

# settle_idle: the idle state after a scenario's work: nothing pinned, mapped
# or registered in the fixtures, core counters balanced, our module's
# reference count back to its idle value. Fails the scenario otherwise.
settle_idle() {
	simtest_to _lc leak-check || {
		REL_LEAKS=$((REL_LEAKS + $(sval leaks "$_lc")))
		fail "the simulated stack is not idle: $_lc" $(figures)
	}
	sysfs_balanced || fail "core counters unbalanced" $(figures)
	_r=$(refcnt)
	[ "$_r" = "$REL_IDLE_REF" ] ||
		fail "module refcount $_r, idle value $REL_IDLE_REF" $(figures)
	# Our module's own books: nothing registered, pinned or mapped.
	_st=/sys/kernel/debug/$REL_MOD/stats
	if [ -r $_st ]; then
		while read -r _k _v; do
			case "$_k" in
			registrations_live | pinned_pages | pinned_bytes | dma_mappings)
				[ -z "$_v" ] || [ "$_v" = 0 ] ||
					fail "$REL_MOD debugfs: $_k $_v when idle" $(figures) ;;
			esac
		done <$_st
	fi
	module_debugfs
}

# kmemleak_check [light]: adds kmemleak's new reports to the leak figure and
# fails on any. Scenarios pass "light" where the suite's final scan (see
# lib.sh's kmemleak_new) is enough; kmemleak=1 on the scenario's line, or
# peermem.kmemleak=each for the boot, makes it scan anyway.
kmemleak_check() {
	if [ "$1" = light ] && [ "${rel_arg_kmemleak:-0}" != 1 ] && ! kmemleak_each; then
		return 0
	fi
	_n=$(kmemleak_new force)
	[ "$_n" = off ] && return 0
	REL_LEAKS=$((REL_LEAKS + _n))
	[ "$_n" = 0 ] || fail "kmemleak reports $_n unreferenced object(s)" $(figures)
}

figures() {
	echo "ops=$REL_OPS faults=$REL_FAULTS races=$REL_RACES leaks=$REL_LEAKS splats=$(splats_so_far)"
}

# The core's race-window counters (simtest counters win_*): windows_mark
# remembers them, windows_reached NAME prints how often window NAME (without
# the win_ prefix) was really open since the mark.
REL_WINDOWS="invalidate_unlocked dereg_unlocked put_release release_in_invalidation"
windows_mark() {
	for _w in $REL_WINDOWS; do
		simtest_to "REL_WIN0_$_w" counters "win_$_w"
	done
}
windows_reached() {
	eval "_w0=\${REL_WIN0_$1:-0}"
	echo $(($(ctr "win_$1") - _w0))
}
# windows_figures: win_NAME=N for every window reached since the mark.
windows_figures() {
	for _w in $REL_WINDOWS; do
		_n=$(windows_reached "$_w")
		[ "$_n" = 0 ] || printf 'win_%s=%s ' "$_w" "$_n"
	done
}

# rel_no_splats [extra figures]: fails the scenario, naming the first splat,
# if the kernel log has one since the scenario began. Before the idle checks,
# so a splat is the reason given and not what it left behind.
rel_no_splats() {
	_s=$(splats_so_far)
	if [ "$_s" != 0 ]; then
		_first=$(_after "$REL_START" | grep -E -- "$REL_SPLAT_RE" |
			grep -v -E -- "${REL_EXPECTED_RE:-^\$}" | head -n 1 | sed 's/^\[[^]]*\] *//')
		fail "$_s splat line(s) in the kernel log during the scenario, first: $_first" $(figures) "$@"
	fi
}

# rel_pass [extra figures]: unloads the stack (a splat or a refused rmmod
# while the modules go is this scenario's, not the next one's), then passes
# with the standard figures, failing instead if a splat appeared in the
# kernel log during the scenario.
rel_pass() {
	stack_down
	rel_no_splats "$@"
	pass $(figures) "$@"
}

# modload MODULE PARAMS...: one finit_module(2) (simtest load-module):
# busybox insmod retries a failed finit_module with init_module, which runs
# a failing init twice and hides a fault injected once.
modload() {
	_m=$1
	shift
	_p=$(mod_path "$_m")
	[ -n "$_p" ] || fail "module $_m is not in the initramfs"
	simtest load-module "$_p" "$@"
}

# insmod_refused DESC MODULE PARAMS...: the load must fail, the module must
# not stay loaded, and the kernel log must explain why (a new line naming the
# module, or the loader's own "Unknown symbol" / "invalid for parameter").
insmod_refused() {
	_desc=$1
	shift
	_m=$1
	shift
	mark
	if _out=$(modload "$_m" "$@" 2>&1); then
		fail "$_desc: loading $_m $* succeeded" $(figures)
	fi
	loaded "$_m" && fail "$_desc: $_m stayed loaded after a failed load" $(figures)
	# (NVIDIA's nvidia-peermem prefixes its lines "nvidia-peermem")
	_why=$(since_mark | grep -E -- "$_m|nvidia-peermem |Unknown symbol|invalid for parameter" | head -n 3 | tr '\n' ' ')
	[ -n "$_why" ] || fail "$_desc: the load failed silently (no kernel log line; $(echo "$_out" | head -n 1))" $(figures)
	log "$_desc: refused: $(echo "$_out" | head -n 1) | kernel: $_why"
}

mark

# cudaFree racing each phase of an MR (the lock-order matrix, issue 12) ------
#
# phase_race PHASE: one cudaFree forced into one phase of one MR with the
# fixtures' delay points, the two racing operations in the background, and a
# bounded wait: both must end within REL_HANG_S seconds, else the tasks are
# stuck (a deadlock) and the phase reads "hang" (the VM stays wedged: the
# caller must stop there). Sets PHASE_RESULT to ok, hang or missed (the
# window counter did not move: the cudaFree landed outside the window).
#   get_pages  inside the client's get_pages, the pin made and its callback
#              armed (provider point p2p_get_pages_done; persistent pins:
#              p2p_get_pages), the core holding the mapping lock; for ours,
#              whose pin is acquire's (issue 35), just before the core
#              calls get_pages (core point get_pages), the lock held too
#   pinned     between get_pages and dma_map (core_reg_pinned)
#   dma_map    inside the client's dma_map, in the provider before its
#              driver lock (p2p_dma_map)
#   activate   between dma_map and the HCA's activation, the mapping lock
#              held on return (hca_mr_create)
#   live       an activated MR
#   dereg      inside a deregistration's put_pages, in the provider before
#              its driver lock (p2p_put_pages; under the mapping lock where
#              the core unmaps under it)
REL_HANG_S=$(scaled_s "${REL_HANG_S:-15}")
PHASE_MS=${PHASE_MS:-500}

# _bg_wait PID...: waits for every PID up to REL_HANG_S seconds; returns 1
# (leaving them) if one is still running then.
_bg_wait() {
	_t=0
	while [ $_t -lt $((${_hang_s:-$REL_HANG_S} * 10)) ]; do
		_alive=0
		for _p in "$@"; do
			kill -0 "$_p" 2>/dev/null && _alive=1
		done
		[ $_alive = 0 ] && return 0
		nap 0.1
		_t=$((_t + 1))
	done
	return 1
}

# _stuck_tasks: the simtest tasks in D state and where they wait.
_stuck_tasks() {
	# every thread: simtest calls run on threads of the simtest server
	for _d in /proc/[0-9]*/task/[0-9]*; do
		[ "$(cat "$_d/comm" 2>/dev/null)" = simtest ] || continue
		_s=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "$_d/status" 2>/dev/null)
		[ "$_s" = D ] || continue
		printf '%s(%s: %s) ' "${_d#/proc/}" "$(tr '\0' ' ' <"$_d/cmdline" | cut -d' ' -f2)" \
			"$(head -n 6 "$_d/stack" 2>/dev/null | sed 's/^\[<[0-9a-f]*>\] //; s/+0x.*//' | tr '\n' '<')"
	done
}

phase_race() {
	_ph=$1
	_win=
	_pre=0
	_point=
	_count=1
	case "$_ph" in
	get_pages)
		_win=free_in_get_pages
		if [ "$client" = rs ]; then
			# ours pins once, in acquire (issue 35): the core's get_pages
			# takes that pin, and the free lands just before it
			_point=get_pages
		else
			# the acquire's probe pins first: the second pass is get_pages
			_count=2
			if [ "$pers" = 1 ]; then _point=p2p_get_pages; else _point=p2p_get_pages_done; fi
		fi ;;
	pinned) _win=free_pinned _point=core_reg_pinned ;;
	dma_map) _win=free_in_dma_map _point=p2p_dma_map ;;
	activate) _win=free_before_activate _point=hca_mr_create ;;
	live) _win=free_live _pre=1 ;;
	dereg) _win=free_in_dereg _pre=1 _point=p2p_put_pages ;;
	*) fail "no phase $_ph" ;;
	esac
	simtest_to _o gpu-alloc 256K || fail "gpu-alloc: $_o" $(figures)
	kv_set _va va "$_o"
	simtest_to _w0 counters "win_$_win"
	_mr=
	if [ $_pre = 1 ]; then
		simtest_to _o mr-reg $((_va + 4096)) 200K || fail "mr-reg ($_ph): $_o" $(figures)
		kv_set _mr mr "$_o"
	fi
	[ -z "$_point" ] || st delay "$_point" $PHASE_MS $_count >/dev/null ||
		fail "delay $_point" $(figures)
	if [ $_pre = 1 ]; then
		if [ "$_ph" = dereg ]; then
			command simtest mr-dereg "$_mr" >/tmp/phase.op 2>&1 &
		else
			: >/tmp/phase.op
			sleep 0 &
		fi
	else
		command simtest mr-reg $((_va + 4096)) 200K >/tmp/phase.op 2>&1 &
	fi
	_op=$!
	# into the window: the delay's middle (get_pages: its second pass)
	[ -z "$_point" ] || usleep $(((PHASE_MS * (_count - 1) + PHASE_MS / 2) * 1000))
	command simtest gpu-free "$_va" >/tmp/phase.free 2>&1 &
	_fr=$!
	# the bounded wait, plus the delay itself (longer on a retry)
	_hang_s=$((REL_HANG_S + PHASE_MS * _count / 1000))
	if ! _bg_wait $_op $_fr; then
		PHASE_RESULT=hang
		PHASE_STUCK=$(_stuck_tasks)
		log "phase $_ph: HANG after ${_hang_s}s: $PHASE_STUCK"
		return 0
	fi
	wait $_op
	_orc=$?
	wait $_fr || fail "phase $_ph: cudaFree failed: $(cat /tmp/phase.free)" $(figures)
	st delay clear >/dev/null
	_state=
	[ -z "$_mr" ] || [ "$_ph" = dereg ] || { simtest_to _q mr-query "$_mr"; kv_set _state state "$_q"; }
	# what is left: the MR (registered, maybe invalidated) goes
	[ "$_ph" = dereg ] || {
		[ -n "$_mr" ] || { [ $_orc = 0 ] && _mr=$(sval mr "$(cat /tmp/phase.op)"); }
		[ -z "$_mr" ] || st mr-dereg "$_mr" >/dev/null || fail "phase $_ph: dereg of what is left" $(figures)
	}
	REL_OPS=$((REL_OPS + 4))
	REL_RACES=$((REL_RACES + 1))
	simtest_to _n counters "win_$_win"
	_n=$((_n - _w0))
	if [ "$_ph" = live ] && [ "$pers" = 1 ]; then
		# a persistent pin has no callback: the cudaFree leaves the MR live
		[ "$_state" = live ] || fail "phase live: a persistent MR is $_state after cudaFree" $(figures)
		_n=1
	fi
	if [ "$_n" = 0 ]; then
		PHASE_RESULT=missed
	else
		PHASE_RESULT=ok
	fi
	log "phase $_ph: $PHASE_RESULT (win_$_win +$_n, operation rc $_orc: $(tr '\n' ' ' </tmp/phase.op | head -c 200))"
	simtest_to _lc leak-check || fail "phase $_ph left the stack busy: $_lc" $(figures)
}

# name_hung_tasks: after a forced phase hung, lets the hung-task detector
# name the stuck tasks inside the scenario (timeout cut to 5 s, up to 30 s),
# then silences it: the tasks stay stuck (the scenario must be its boot's
# last) and a report after the scenario would be the boot's. Sets
# HUNG_REPORTS (how many it printed).
name_hung_tasks() {
	echo 5 >/proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
	_i=0
	while [ $_i -lt 30 ] && ! since_mark_has "blocked for more than"; do
		sleep 1
		_i=$((_i + 1))
	done
	HUNG_REPORTS=$(since_mark | grep -c "blocked for more than")
	echo 0 >/proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
}

# phase_race_reached PHASE: phase_race, once more while the cudaFree missed
# the window (TCG's timing on a loaded host), the delay twice as long each
# time, four tries in all; a phase never raced fails the scenario (it would
# have tested nothing). Sets PHASE_RESULT (ok or hang) and PHASE_TRIES.
phase_race_reached() {
	PHASE_TRIES=1
	_ms0=$PHASE_MS
	phase_race "$1"
	while [ "$PHASE_RESULT" = missed ] && [ $PHASE_TRIES -lt 4 ]; do
		PHASE_TRIES=$((PHASE_TRIES + 1))
		PHASE_MS=$((PHASE_MS * 2))
		phase_race "$1"
	done
	PHASE_MS=$_ms0
	[ "$PHASE_RESULT" != missed ] ||
		fail "phase $1: the cudaFree missed the window win_$_win in all $PHASE_TRIES tries: the phase was never raced" $(figures)
}

# phase_matrix [PHASE...]: phase_race_reached for each phase (all six by
# default), stopping at a hang; a phase never raced fails the scenario; sets
# PHASE_FIGURES (p_PHASE=ok|hang ..., tries_PHASE=N where it took more) and
# PHASE_HANG (the first phase that hung, or "none").
PHASES="get_pages pinned dma_map activate live dereg"
phase_matrix() {
	PHASE_FIGURES=
	PHASE_HANG=none
	for _phase in ${*:-$PHASES}; do
		# a window the cudaFree missed is raced again, then fails
		phase_race_reached "$_phase"
		PHASE_FIGURES="$PHASE_FIGURES p_$_phase=$PHASE_RESULT"
		[ "$PHASE_TRIES" = 1 ] || PHASE_FIGURES="$PHASE_FIGURES tries_$_phase=$PHASE_TRIES"
		if [ "$PHASE_RESULT" = hang ]; then
			PHASE_HANG=$_phase
			return 0
		fi
	done
}
