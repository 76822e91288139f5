# shellcheck shell=sh
# Helpers for scenario scripts run inside the test VM. Source it first:
#   . /scenarios/lib.sh
# A scenario ends with exactly one `pass`, `fail` or `skip` (its report, which
# guest-init prints in the scenarios' KTAP document); exiting without any
# reports a failure. Figures are key=value words: pass ops=100 leaks=0.

SCENARIO_ID=${SCENARIO_ID:-$(basename "$0" .sh)}
# Where each report goes: guest-init's file, from which it prints the
# scenario's KTAP lines (the console when the scenario runs outside it).
SCENARIO_REPORT=${SCENARIO_REPORT:-/dev/stdout}
_reported=
_kv_nl='
'

# _report WORD [key=value ...] [reason=TEXT]: one report line, newlines
# turned into spaces (a reason may quote a command's output): guest-init
# prints each line as a KTAP diagnostic, and more than one is a failure.
_report() {
	_reported=1
	_rl="$*"
	# shellcheck disable=SC3060 # busybox ash has ${var//pattern/string}
	echo "${_rl//"$_kv_nl"/ }" >>"$SCENARIO_REPORT"
}

# no_result: the failure of a scenario that exited without reporting.
no_result() {
	[ -n "$_reported" ] && return 0
	_report fail "reason=exited without a result (last command failed?)"
}
trap no_result EXIT

# kv KEY "k=v k=v ...": the value of KEY's first occurrence (words split at
# spaces and newlines), empty if none. Pure shell: the tr | sed pipeline it
# replaces cost ~75 ms of forks per call under TCG, hundreds of calls a suite.
kv() {
	# shellcheck disable=SC3060 # busybox ash has ${var//pattern/string}
	_kv=" ${2//"$_kv_nl"/ } "
	case "$_kv" in
	*" $1="*) ;;
	*) return 0 ;;
	esac
	_kv=${_kv#*" $1="}
	echo "${_kv%% *}"
}

# kv_set VAR KEY "k=v k=v ...": VAR=$(kv KEY ...) without the subshell's
# fork (~0.1 s under TCG with KASAN, lockdep and kmemleak; a suite's
# scenarios run thousands).
kv_set() {
	_kv=" ${3//"$_kv_nl"/ } "
	case "$_kv" in
	*" $2="*)
		_kv=${_kv#*" $2="}
		_kv=${_kv%% *}
		;;
	*) _kv= ;;
	esac
	eval "$1=\$_kv"
}

# nap SECONDS: a pause (fractions allowed) that creates no process: a
# read with a timeout on a FIFO nobody writes to (fd 8, opened once per
# scenario). usleep and sleep are a fork and an exec each, ~0.25 s of guest
# time under TCG with KASAN, lockdep and kmemleak: more than the 0.1 s a
# poll waits, so a poll paced by usleep spent most of its time starting it.
if mkfifo /tmp/nap.$$ 2>/dev/null && exec 8<>/tmp/nap.$$; then
	rm -f /tmp/nap.$$
	nap() {
		read -r -t "$1" -u 8 _ 2>/dev/null
		return 0
	}
else
	nap() {
		sleep "$1"
	}
fi

# simtest CMD...: the simtest command without a process of its own. A
# scenario's shell starts one `simtest relay` (at its first call) and
# writes its requests to it; the relay sends each to the suite's simtest
# server, as a simtest process would, and answers with the output and the
# exit code (tests/sim-client/src/bin/simtest/relay.rs). Starting a
# process costs the guest ~0.36 s under TCG with KASAN, lockdep and
# kmemleak; a suite's scenarios make thousands of simtest calls.
# Only the scenario's own shell uses the relay, one request at a time: a
# subshell or background job (which may run beside it), a command that
# must run in a process of its own (--own-process, load-module, session)
# and one with a newline in an argument run the simtest binary.
# shellcheck disable=SC3003 # busybox ash has $'...'
_sr_us=$'\037'
read -r _sr_shell _ </proc/self/stat
_sr_state=
# _sr_usable ARGS...: whether this call may go through the relay (and the
# relay is running, started here if need be).
_sr_usable() {
	[ -n "$SIMTEST_SERVER" ] && [ "$_sr_state" != off ] || return 1
	read -r _sr_self _ </proc/self/stat
	[ "$_sr_self" = "$_sr_shell" ] || return 1
	case "$1" in
	--own-process | load-module | session | serve | relay) return 1 ;;
	esac
	case "$*" in *"$_kv_nl"* | *"$_sr_us"*) return 1 ;; esac
	[ "$_sr_state" = on ] && return 0
	rm -f /tmp/relay-in.$$ /tmp/relay-out.$$
	if ! mkfifo /tmp/relay-in.$$ /tmp/relay-out.$$; then
		_sr_state=off
		return 1
	fi
	command simtest relay </tmp/relay-in.$$ >/tmp/relay-out.$$ 2>/tmp/relay-err.$$ &
	# read-write: a write never meets a closed pipe (SIGPIPE would end
	# this shell without a word); a relay that died shows as end of file
	# on its answers
	exec 6<>/tmp/relay-in.$$ 7</tmp/relay-out.$$
	rm -f /tmp/relay-in.$$ /tmp/relay-out.$$
	_sr_state=on
}

# _sr_call ARGS...: one request; the command's stdout in $_sr_out, its
# stderr printed, its exit code returned.
_sr_call() {
	_sr_req=
	for _sr_a in "$@"; do
		_sr_req="$_sr_req$_sr_a$_sr_us"
	done
	printf '%s\n' "$_sr_req" >&6
	_sr_out=
	_sr_n=0
	while IFS= read -r _sr_l <&7; do
		case "$_sr_l" in
		"1 "*)
			[ $_sr_n = 0 ] || _sr_out="$_sr_out$_kv_nl"
			_sr_out="$_sr_out${_sr_l#1 }"
			_sr_n=1
			;;
		"2 "*) printf '%s\n' "${_sr_l#2 }" >&2 ;;
		"end rc="*) return "${_sr_l#end rc=}" ;;
		esac
	done
	_sr_state=off
	fail "the simtest relay ended during: simtest $* ($(cat /tmp/relay-err.$$ 2>/dev/null))"
}

simtest() {
	if _sr_usable "$@"; then
		_sr_call "$@"
		_sr_rc=$?
		[ -z "$_sr_out" ] || printf '%s\n' "$_sr_out"
		return $_sr_rc
	fi
	command simtest "$@"
}

# simtest_to VAR CMD...: VAR=$(simtest CMD...) without the subshell (a
# fork); returns simtest's exit code.
simtest_to() {
	_st_var=$1
	shift
	if _sr_usable "$@"; then
		_sr_call "$@"
		_sr_rc=$?
	else
		_sr_out=$(command simtest "$@")
		_sr_rc=$?
	fi
	eval "$_st_var=\$_sr_out"
	return $_sr_rc
}

# file_value FILE KEY: the value on FILE's "KEY VALUE" line (a debugfs
# stats file), read by the shell itself: no sed to exec.
file_value() {
	while read -r _fk _fv; do
		if [ "$_fk" = "$2" ]; then
			echo "$_fv"
			return 0
		fi
	done <"$1"
}

# leak_fields_zero WHAT "k=v ...": fails the scenario unless the provider's
# and core's live counts in a simtest leak-check line are all 0 (checked
# in this shell: no fork per field).
leak_fields_zero() {
	for _k in pages_pinned page_tables_live dma_mappings_live mrs_live; do
		kv_set _lv "$_k" "$2"
		[ "$_lv" = 0 ] || fail "$1: $_k=$_lv left ($2)"
	done
}

# scaled_s N: N seconds grown by the host's time scale (K of the machine
# over the reference's, tests/vm/run-suite.sh), for a bound that decides a
# verdict: a slow host is slow, not red.
scaled_s() {
	echo $(($1 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100))
}

# pass [key=value ...]
pass() {
	_report pass "$@"
	exit 0
}

# fail REASON [key=value ...]: the reason may contain spaces.
fail() {
	_reason=$1
	shift
	_report fail "$@" "reason=$_reason"
	exit 1
}

# skip REASON [key=value ...]: the scenario could not test what it is for
# (a prerequisite the harness should have provided is missing). Counted as
# skipped, never as passed; make test fails on any skip (tests/vm/README.md).
# Call it at the end, after every check that could run, so those still fail.
skip() {
	_reason=$1
	shift
	_report skip "$@" "reason=$_reason"
	exit 0
}

log() {
	echo "SCENARIO-LOG $SCENARIO_ID: $*"
}

# check DESCRIPTION COMMAND...: fail the scenario unless COMMAND succeeds.
check() {
	_desc=$1
	shift
	"$@" || fail "$_desc (command: $*)"
}

# refuse DESCRIPTION COMMAND...: fail the scenario if COMMAND succeeds.
refuse() {
	_desc=$1
	shift
	if "$@"; then
		fail "$_desc (command unexpectedly succeeded: $*)"
	fi
}

# mod_path_to VAR NAME: VAR set to the .ko of module NAME in the initramfs:
# extra/ (where tests/vm/mkinitramfs.sh puts the test modules) by a shell
# glob, else the first find(1) finds; empty if none. No subshell: a
# process costs ~0.1 s under TCG with KASAN, and this runs before each
# load.
mod_path_to() {
	# PM_TEST_BUILD=1: the test build of the module (delay points), where
	# the initramfs has one (tests/vm/mkinitramfs.sh).
	if [ "${PM_TEST_BUILD:-0}" = 1 ] && [ -f "/fixtures/test-delays/$2.ko" ]; then
		eval "$1=/fixtures/test-delays/\$2.ko"
		return 0
	fi
	for _mp in /lib/modules/*/extra/"$2".ko; do
		if [ -f "$_mp" ]; then
			eval "$1=\$_mp"
			return 0
		fi
	done
	_mp=$(find /lib/modules -name "$2.ko" | head -n 1)
	eval "$1=\$_mp"
}

# mod_path NAME: prints the .ko of module NAME (mod_path_to's).
mod_path() {
	mod_path_to _mpp "$1"
	echo "$_mpp"
}

# pd_exports [generation=GEN ...]: after peerdirect_sim loaded with these
# parameters, the module with the optional exports a real core of that
# generation has (tests/fixtures/pd_exports/pd_exports.h), which tell a client the
# generation; the one of an earlier core goes first. Not in the initramfs
# beside MLNX_OFED's real core, which exports its own.
pd_exports() {
	_g=modern
	for _a in "$@"; do
		case "$_a" in generation=*) _g=${_a#generation=} ;; esac
	done
	case "$_g" in modern2410) _g=modern ;; esac
	for _e in pd_exports_legacy pd_exports_mofed51 pd_exports_modern; do
		if [ -d "/sys/module/$_e" ]; then
			rmmod "$_e" || return 1
		fi
	done
	# Outside /lib/modules (tests/vm/mkinitramfs.sh); absent beside
	# MLNX_OFED's real core.
	_e=/fixtures/pd_exports_$_g.ko
	[ ! -f "$_e" ] || insmod "$_e"
}

# load NAME [PARAM=VALUE ...]: insmod, or fail the scenario.
load() {
	_m=$1
	shift
	mod_path_to _p "$_m"
	[ -n "$_p" ] || fail "module $_m is not in the initramfs"
	insmod "$_p" "$@" || fail "insmod $_m $* failed"
	if [ "$_m" = peerdirect_sim ]; then
		pd_exports "$@" || fail "the exports of peerdirect_sim $* did not load"
	fi
}

# try_load NAME [PARAM=VALUE ...]: insmod, returning its status.
try_load() {
	_m=$1
	shift
	mod_path_to _p "$_m"
	[ -n "$_p" ] || return 127
	insmod "$_p" "$@" || return
	if [ "$_m" = peerdirect_sim ]; then
		pd_exports "$@"
	fi
}

loaded() {
	[ -d "/sys/module/$1" ]
}

# unload NAME...: rmmod each that is loaded, or fail the scenario.
unload() {
	for _m in "$@"; do
		if loaded "$_m"; then
			rmmod "$_m" || fail "rmmod $_m failed"
		fi
	done
}

# The simulated NVIDIA driver generation (r525, r535, r560, r580; empty:
# the provider's default, the newest). r525 is its own build, without the
# persistent calls (see tests/fixtures/nvidia_p2p_sim.c).
PSIM_DRIVER=${PSIM_DRIVER:-}

# PSIM_RM_LOCKDEP=1: the provider's driver (RM API) lock is a mutex lockdep
# tracks (nvidia_p2p_sim rm_lock_lockdep=1), stricter than the real driver,
# whose lock is made of semaphores lockdep does not see (the default, 0).
# Set by the lock-order tests, which must see the orders against it.
PSIM_RM_LOCKDEP=${PSIM_RM_LOCKDEP:-0}

# PSIM_PT_FLAGS=N: the flags word the provider writes into each page table
# of the 40-byte layout (r580 on: nvidia_p2p_sim page_table_flags=N; 1 is
# NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE, as on coherent platforms).
PSIM_PT_FLAGS=${PSIM_PT_FLAGS:-0}

# The provider's cost model (nvidia_p2p_sim's *_ns parameters;
# tests/fixtures/README.md): peermem.provider_cost=<profile> on the kernel
# command line (PEERMEM_PROVIDER_COST on the host; make bench sets it).
# Without it every P2P call costs only the fixture's own code.
#   v100   GDRCopy's published pin/unpin times on a V100-PCIe (measured),
#          with DMA map/unmap costs that are an assumption
#   b200   the published 64 KiB pin/unpin times of a B200 (GDRCopy's
#          README); per-page terms, map and unmap as v100's (assumed)
#   aws    the published 64 KiB pin/unpin times of an AWS node; the rest
#          as b200's
#   off    none
PSIM_COST=$(sed -n 's/.*peermem\.provider_cost=\([a-z0-9]*\).*/\1/p' /proc/cmdline 2>/dev/null)
# psim_cost_params: sets _cost to the parameters of profile $PSIM_COST.
psim_cost_params() {
	case "$PSIM_COST" in
	"" | off)
		_cost=
		return
		;;
	v100) _cost="pin_call_ns=68000 unpin_call_ns=37000" ;;
	# 64 KiB figures less one page's per-page term
	b200) _cost="pin_call_ns=81810 unpin_call_ns=28900" ;;
	aws) _cost="pin_call_ns=44810 unpin_call_ns=28900" ;;
	*) fail "peermem.provider_cost=$PSIM_COST: unknown profile (v100, b200, aws or off)" ;;
	esac
	# the per-page terms, map and unmap: v100's in every profile
	_cost="$_cost pin_page_ns=190 unpin_page_ns=100"
	_cost="$_cost map_call_ns=4000 map_page_ns=30 unmap_call_ns=1000 unmap_page_ns=20"
}

# load_provider: the simulated NVIDIA provider of generation $PSIM_DRIVER.
load_provider() {
	psim_cost_params
	# shellcheck disable=SC2086 # the cost parameters are words
	case "$PSIM_DRIVER" in
	"") load nvidia_p2p_sim rm_lock_lockdep="$PSIM_RM_LOCKDEP" page_table_flags="$PSIM_PT_FLAGS" $_cost ;;
	r525) load nvidia_p2p_sim_r525 rm_lock_lockdep="$PSIM_RM_LOCKDEP" page_table_flags="$PSIM_PT_FLAGS" $_cost ;;
	*) load nvidia_p2p_sim driver="$PSIM_DRIVER" rm_lock_lockdep="$PSIM_RM_LOCKDEP" page_table_flags="$PSIM_PT_FLAGS" $_cost ;;
	esac
}

# PD_MEMORY_PEERS: whether the simulated core publishes
# /sys/kernel/mm/memory_peers (peerdirect_sim memory_peers=1: MLNX_OFED up
# to 23.07, or a kernel that exports mm_kobj) or not (0: DOCA-OFED 23.10+
# on Linux 6.6+, the core's own default, which has no duplicate-name check
# either). The scenarios that read the tree's counters run with it (1);
# those that must hold in both worlds pass memory_peers=0 or 1 themselves.
PD_MEMORY_PEERS=${PD_MEMORY_PEERS:-1}

# load_sim_stack [generation=modern|mofed51|legacy] [memory_peers=0|1]: the
# simulated NVIDIA provider, PeerDirect core and control device.
load_sim_stack() {
	load_provider
	load peerdirect_sim memory_peers="$PD_MEMORY_PEERS" "$@"
	mod_path_to _p peermem_sim
	if [ -n "$_p" ]; then
		load peermem_sim
	fi
	[ -c /dev/peermem_sim ] || fail "/dev/peermem_sim did not appear"
}

unload_sim_stack() {
	unload peermem_sim peerdirect_sim pd_exports_legacy pd_exports_mofed51 pd_exports_modern \
		nvidia_p2p_sim nvidia_p2p_sim_r525
}

# Leak checks. After the last scenario, guest-init's finish waits out
# kmemleak's minimum object age, scans twice and prints every report; the
# verdict fails the whole boot on any "unreferenced object". No leak goes
# unseen without a scan per scenario, and such a scan costs about 25 s under
# TCG, so a scenario scans on its own only to say WHICH scenario leaked:
# when the boot asks for it (peermem.kmemleak=each on the kernel command
# line: a suite's "cmdline peermem.kmemleak=each" line, or
# PEERMEM_KMEMLEAK=each in the host's environment), or when the scenario
# itself must (kmemleak_new force: where leaks are most likely).
KMEMLEAK_POLICY=$(sed -n 's/.*peermem\.kmemleak=\([a-z]*\).*/\1/p' /proc/cmdline 2>/dev/null)

# kmemleak_each: scenarios scan for leaks themselves in this boot.
kmemleak_each() {
	[ "$KMEMLEAK_POLICY" = each ]
}

# kmemleak_new [force]: the number of leak reports new since the last scan
# (their reports go to the console, where the verdict finds them); "suite"
# when the scan is left to the suite's end; "off" without kmemleak (the
# boot's vm:<suite>:leak-scan test is then a skip).
kmemleak_new() {
	_k=/sys/kernel/debug/kmemleak
	if [ ! -w $_k ]; then
		echo off
		return
	fi
	if [ "$1" != force ] && ! kmemleak_each; then
		echo suite
		return
	fi
	# Two scans, 6 s of object age apart (see kmemleak_scan.sh). A refused
	# scan (kmemleak disabled: its file stays writable) found nothing.
	if ! sh /scenarios/kmemleak_scan.sh; then
		echo off
		return
	fi
	_n=$(grep -c "unreferenced object" $_k)
	cat $_k >&2
	echo clear >$_k
	echo "$_n"
}

# no_new_leaks [force]: fails the scenario if kmemleak reports a leak; sets
# LEAKS to the figure to report (a number, "suite" or "off").
no_new_leaks() {
	LEAKS=$(kmemleak_new "$@")
	case "$LEAKS" in
	0 | suite | off) ;;
	*) fail "kmemleak found $LEAKS leaks" leaks="$LEAKS" ;;
	esac
}

# dmesg_has PATTERN: the kernel log contains PATTERN.
dmesg_has() {
	dmesg | grep -q -- "$1"
}

# log_mark: writes a line of its own to the kernel log; dmesg_since_mark_has
# PATTERN then looks only after it. A boot's log holds the lines of every
# scenario before, so a check of what this step printed reads from a mark.
_LOG_MARK_N=0
log_mark() {
	_LOG_MARK_N=$((_LOG_MARK_N + 1))
	_LOG_MARK="scenario-mark $$-$_LOG_MARK_N ${SCENARIO_ID:-}"
	echo "$_LOG_MARK" >/dev/kmsg
}
dmesg_since_mark_has() {
	[ -n "${_LOG_MARK:-}" ] || fail "dmesg_since_mark_has without a log_mark"
	dmesg | awk -v m="$_LOG_MARK" 'seen; index($0, m) { seen = 1 }' | grep -q -- "$1"
}

# One application in one process (simtest session): the driver keeps GPU
# memory and the pins of nvidia_p2p_get_pages per process, so where that
# matters an application's steps must come from one process, not a simtest
# process each (tests/sim-client/src/bin/simtest/session.rs).
#   app_start          starts it (one at a time), commands on fd 3,
#                      answers on fd 4
#   app CMD...         runs CMD in it; its output in $out; fails the
#                      scenario unless CMD succeeded
#   app_try CMD...     the same, its exit code in $app_rc, no failure
#   app_exit           closes its input: it exits (its GPU memory goes
#                      where the provider keeps memory per process)
app_start() {
	rm -f /tmp/app.in /tmp/app.out
	mkfifo /tmp/app.in /tmp/app.out || fail "mkfifo for the application failed"
	command simtest session </tmp/app.in >/tmp/app.out 2>/tmp/app.err &
	APP_PID=$!
	exec 3>/tmp/app.in 4</tmp/app.out
}

app_try() {
	echo "$*" >&3
	out=
	while IFS= read -r _al <&4; do
		case "$_al" in
		"end rc="*)
			app_rc=${_al#end rc=}
			return 0
			;;
		esac
		out="$out$_al "
	done
	fail "the application ended during: $* ($(cat /tmp/app.err))"
}

app() {
	app_try "$@"
	[ "$app_rc" = 0 ] || fail "application: $* failed (rc=$app_rc): $out$(cat /tmp/app.err)"
}

app_exit() {
	exec 3>&-
	wait "$APP_PID"
	_ae=$?
	exec 4<&-
	[ "$_ae" = 0 ] || fail "the application exited with $_ae: $(cat /tmp/app.err)"
}
