# shellcheck shell=sh
# Helpers of the reliability scenarios (rel_*.sh, issue 5). Source after
# lib.sh:   . /scenarios/lib.sh; . /scenarios/rel_lib.sh
#
# Arguments every rel_ scenario understands (key=value, from the suite line):
#   gen=modern|mofed51|legacy   PeerDirect core generation (default modern)
#   pds=0|1                     peerdirect_support of nvidia_peermem_rs
#   pers=0|1                    persistent_api_support of nvidia_peermem_rs
#   client=rs|ref               the client under test: our module (default)
#                               or the fixtures' C reference client (to
#                               check a scenario itself)
#   defects=BUG                 client=ref only: the reference client with
#                               that field bug brought back on purpose
#                               (field-teeth: the scenario must catch it)
# Figures every rel_ scenario reports: ops faults races leaks splats.

REL_MOD=nvidia_peermem_rs
gen=modern
pds=0
pers=0
client=rs
for _a in "$@"; do
	case "$_a" in
	*=*) eval "rel_arg_${_a%%=*}=\${_a#*=}" ;;
	esac
done
gen=${rel_arg_gen:-$gen}
pds=${rel_arg_pds:-$pds}
pers=${rel_arg_pers:-$pers}
client=${rel_arg_client:-$client}
[ "$client" = ref ] && REL_MOD=peermem_refclient

# Figures, accumulated by the helpers below.
REL_OPS=0
REL_FAULTS=0
REL_RACES=0
REL_LEAKS=0
REL_MARK_N=0
REL_START=

# The kernel-log signatures the verdict counts as splats (tests/verdict/src/log.rs).
REL_SPLAT_RE='BUG:|WARNING:|KASAN:|UBSAN:|Oops|general protection fault|circular locking dependency|possible recursive locking|inconsistent lock state|suspicious RCU usage|unreferenced object 0x|blocked for more than|soft lockup|hard LOCKUP|detected stalls|Kernel panic|list_add corruption|list_del corruption'

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
	else
		echo "peerdirect_support=$pds persistent_api_support=$pers"
	fi
}

# stack_down: unload the client and the whole simulated stack, in order.
stack_down() {
	unload nvidia_peermem_rs peermem_refclient peermem_refclient2 \
		peermem_sim peerdirect_sim nvidia_p2p_sim
}

# stack_up: fresh fixtures of generation $gen (and $1... extra core params),
# without the client.
stack_up_fixtures() {
	stack_down
	load nvidia_p2p_sim
	load peerdirect_sim generation="$gen" "$@"
	load peermem_sim
	[ -c /dev/peermem_sim ] || fail "/dev/peermem_sim did not appear"
}

# stack_up: fixtures plus the client under test; records its idle refcount.
stack_up() {
	stack_up_fixtures
	# shellcheck disable=SC2046
	load "$REL_MOD" $(client_params)
	REL_IDLE_REF=$(cat /sys/module/$REL_MOD/refcnt)
	log "stack up: gen=$gen pds=$pds pers=$pers client=$REL_MOD idle refcnt=$REL_IDLE_REF"
}

refcnt() {
	cat /sys/module/$REL_MOD/refcnt 2>/dev/null || echo gone
}

# The end-of-scenario checks ---------------------------------------------------

# sysfs_balanced: every client's core counters balance (MRs allocated =
# deallocated, pages and bytes registered = deregistered).
sysfs_balanced() {
	for _d in /sys/kernel/mm/memory_peers/*/; do
		[ -r "$_d/num_alloc_mrs" ] || continue
		for _pair in alloc_mrs:dealloc_mrs reg_pages:dereg_pages reg_bytes:dereg_bytes; do
			_a=$(cat "$_d/num_${_pair%%:*}")
			_b=$(cat "$_d/num_${_pair#*:}")
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
	_lc=$(simtest leak-check) || {
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
		for _k in registrations_live pinned_pages pinned_bytes dma_mappings; do
			_v=$(sed -n "s/^$_k //p" $_st)
			[ -z "$_v" ] || [ "$_v" = 0 ] ||
				fail "$REL_MOD debugfs: $_k $_v when idle" $(figures)
		done
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
		eval "REL_WIN0_$_w=$(ctr win_$_w)"
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

# rel_pass [extra figures]: pass with the standard figures, failing instead
# if a splat appeared in the kernel log during the scenario.
rel_pass() {
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
	_why=$(since_mark | grep -E -- "$_m|Unknown symbol|invalid for parameter" | head -n 3 | tr '\n' ' ')
	[ -n "$_why" ] || fail "$_desc: the load failed silently (no kernel log line; $(echo "$_out" | head -n 1))" $(figures)
	log "$_desc: refused: $(echo "$_out" | head -n 1) | kernel: $_why"
}

mark
