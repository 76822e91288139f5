#!/bin/busybox sh
# /init of the nvidia-peermem-rs test VM: runs the suite named on the kernel
# command line (peermem.suite=NAME), then powers off. Everything it prints
# goes to the serial console, which the host keeps as the suite's log.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
mkdir -p /var/run

suite=$(sed -n 's/.*peermem\.suite=\([^ ]*\).*/\1/p' /proc/cmdline)
file=/suites/$suite.suite
# The host's scale of every limit that decides a verdict (K of this
# machine over the reference's, in percent; tests/vm/run-suite.sh): the
# scenarios' time limits grow with it, and so do their own bounds
# (PEERMEM_TIME_SCALE_PCT, rel_lib.sh).
PEERMEM_TIME_SCALE_PCT=$(sed -n 's/.*peermem\.time_scale=\([0-9]*\).*/\1/p' /proc/cmdline)
[ -n "$PEERMEM_TIME_SCALE_PCT" ] || PEERMEM_TIME_SCALE_PCT=100
export PEERMEM_TIME_SCALE_PCT
scenario_timeout=600
depmod 2>/dev/null

# clock: the uptime and the jiffies at one moment. Two of them (at /init
# and before the final leak scan) let the verdict map the allocation
# jiffies of a leak the final scan reports to the scenario that was running
# (the markers carry uptime).
clock() {
	read -r _t _ </proc/uptime
	echo "PEERMEM-CLOCK uptime=$_t jiffies=$(sed -n 's/^jiffies: //p' /proc/timer_list 2>/dev/null | head -n 1)"
}

finish() {
	read -r t _ </proc/uptime
	echo "PEERMEM-TIMING tests-done uptime=$t"
	clock
	# Every object allocated by a test and never freed shows up here as
	# "unreferenced object", which the host's verdict counts as a splat:
	# two scans, the second at least kmemleak's minimum object age (5 s)
	# after the first (kmemleak_scan.sh says why that is enough).
	# PEERMEM-KMEMLEAK says whether it happened: without kmemleak the
	# verdict counts the boot's leak scan as skipped, not passed.
	if sh /scenarios/kmemleak_scan.sh; then
		cat /sys/kernel/debug/kmemleak
		echo "PEERMEM-KMEMLEAK scanned"
	else
		echo "PEERMEM-KMEMLEAK unavailable"
	fi
	read -r t _ </proc/uptime
	echo "PEERMEM-TIMING leak-check-done uptime=$t"
	echo "PEERMEM-SUITE-DONE $suite"
	sync
	reboot -f
}

run_kunit() {
	ko=$1
	name=$2
	path=$(find /lib/modules -name "$ko" | head -n 1)
	if [ -z "$path" ] || ! insmod "$path"; then
		echo "PEERMEM-KUNIT-MISSING $name"
		echo "PEERMEM-NOTE kunit module $ko could not be loaded"
		return
	fi
	results=/sys/kernel/debug/kunit/$name/results
	if [ -r "$results" ]; then
		echo "PEERMEM-KUNIT-BEGIN $name"
		cat "$results"
		echo "PEERMEM-KUNIT-END $name"
	else
		echo "PEERMEM-KUNIT-MISSING $name"
	fi
	rmmod "${ko%.ko}"
}

# The scenarios' results as a KTAP document, the format of KUnit and the
# kernel's selftests: a plan of one test per scenario line, then for each
# scenario, as soon as it ended, its reports as diagnostics ("# report:
# pass ops=3", one per pass, fail or skip of lib.sh, which writes them to
# $SCENARIO_REPORT) and its result line, "ok N ID", "ok N ID # SKIP" (one
# skip report) or "not ok N ID" (a fail, none, or more than one). A scenario
# that must fail (a `caught` line follows it: a planted defect, or a known
# red of NVIDIA's module) is marked "# TODO", KTAP's expected failure.
#
# Every line of the document starts with "PEERMEM-KTAP ": the kernel's own
# KTAP (KUnit's, printed when a test module loads) shares this console, as
# printk lines; the prefix tells ours apart as the printk timestamp tells
# the kernel's, and KTAP readers strip a prefix they find before the
# version line (kunit.py parse does).
export SCENARIO_REPORT=/tmp/scenario-report
ktap_n=0
nl='
'

ktap() {
	echo "PEERMEM-KTAP $*"
}

# ktap_result ID: prints scenario ID's reports and KTAP line.
ktap_result() {
	ktap_n=$((ktap_n + 1))
	_reports=$(cat "$SCENARIO_REPORT" 2>/dev/null)
	if [ -n "$_reports" ]; then
		printf '%s\n' "$_reports" | while IFS= read -r r; do
			ktap "# report: $r"
		done
	fi
	_todo=
	case "$ktap_must_fail" in
	*" $ktap_n "*) _todo=" # TODO must fail: a caught line follows" ;;
	esac
	case "$_reports" in
	*"$nl"*) ktap "not ok $ktap_n $1$_todo" ;;
	pass | "pass "*) ktap "ok $ktap_n $1$_todo" ;;
	skip | "skip "*) ktap "ok $ktap_n $1 # SKIP" ;;
	*) ktap "not ok $ktap_n $1$_todo" ;;
	esac
}

# forks: the kernel's count of processes created since boot (/proc/stat),
# read without creating one. Under TCG with KASAN, lockdep and kmemleak a
# fork and exec costs ~0.1-0.3 s of guest time, most of a scenario's cost:
# the markers carry it so that a suite's costly steps can be found.
forks() {
	while read -r _k _v; do
		[ "$_k" = processes ] && break
	done </proc/stat
	echo "${_v:-0}"
}

run_scenario() {
	name=$1
	shift
	id=$name
	if [ $# -gt 0 ]; then
		id="$name[$(echo "$*" | tr ' ' ',')]"
	fi
	export SCENARIO_ID="$id"
	read -r t0 _ </proc/uptime
	f0=$(forks)
	echo "PEERMEM-SCENARIO-BEGIN $id uptime=$t0"
	: >"$SCENARIO_REPORT"
	if [ ! -f "/scenarios/$name.sh" ]; then
		echo "fail reason=no-such-scenario-script" >"$SCENARIO_REPORT"
		ktap_result "$id"
		return
	fi
	timeout $((scenario_timeout * PEERMEM_TIME_SCALE_PCT / 100)) sh "/scenarios/$name.sh" "$@" </dev/null
	rc=$?
	read -r t1 _ </proc/uptime
	f1=$(forks)
	# secs=: the scenario's guest seconds (results/scenario-timings.json);
	# forks=: processes it created
	echo "PEERMEM-SCENARIO-END $id rc=$rc secs=$(( ${t1%.*} - ${t0%.*} )) uptime=$t1 forks=$((f1 - f0))"
	ktap_result "$id"
}

echo "PEERMEM-SUITE-START $suite"
read -r t _ </proc/uptime
echo "PEERMEM-TIMING init uptime=$t"
clock
if [ ! -r "$file" ]; then
	echo "PEERMEM-NOTE no suite file $file"
	finish
fi

# Every simtest call of the suite is made by one process, as one
# application's steps would be: NVIDIA's driver keeps the pins of
# nvidia_p2p_get_pages per process, and a client never unpins a pin another
# process made (tests/sim-client/src/bin/simtest/serve.rs). A scenario
# about another process says so (simtest --own-process, simtest session).
export SIMTEST_SERVER=/run/simtest.sock
mkdir -p /run
simtest serve "$SIMTEST_SERVER" </dev/null &
n=0
while [ ! -S "$SIMTEST_SERVER" ] && [ $n -lt 100 ]; do
	usleep 50000
	n=$((n + 1))
done
# Without the socket every simtest call through it fails, and says so
# (its scenarios fail): there is no fallback to a process a call.
[ -S "$SIMTEST_SERVER" ] || echo "PEERMEM-NOTE simtest serve made no socket: every simtest call of this boot will fail"

# No kmemleak scan here: kmemleak reports an object only when two scans in
# a row find it unreferenced and unchanged, so a first scan reports nothing
# and a "clear" after it hides nothing; it cost ~8 s a boot. Scenarios scan
# only when peermem.kmemleak=each (see lib.sh); finish always does.

# The lock classes of the lockdep cycle the suite expects (its
# expect_splat lockdep line): a scenario that excuses the report checks
# the cycle's classes by the verdict's rule, the same set exactly.
PEERMEM_EXPECT_LOCKDEP_CLASSES=$(sed -n 's/^expect_splat[[:space:]]\{1,\}lockdep[[:space:]].*classes=\([^[:space:]]*\).*/\1/p' "$file" | head -n 1)
export PEERMEM_EXPECT_LOCKDEP_CLASSES
ktap_plan=$(sed -e 's/#.*//' "$file" | grep -c '^[[:space:]]*scenario[[:space:]]')
# The numbers of the scenarios that must fail, between spaces.
ktap_must_fail=" $(sed -e 's/#.*//' "$file" | awk '$1 == "scenario" { n++ } $1 == "caught" { printf "%d ", n }')"
if [ "$ktap_plan" -gt 0 ]; then
	ktap "KTAP version 1"
	ktap "1..$ktap_plan"
fi
# A settle barrier before a planted run (a scenario a `caught` line
# follows) that comes after one of ours: the verdict excuses inside a
# planted run only the splats that are its own, and a late report of our
# run before it (an RCU-deferred free, a work item, a timer) must land in
# no scenario's window, where nothing excuses it. Its lines carry no
# scenario marker, so the verdict counts whatever they show.
settle_s=5
settle() {
	echo "PEERMEM-SETTLE before a planted run: ${settle_s}s"
	sync
	sleep "$settle_s"
	echo "PEERMEM-SETTLE done"
}
scenario_n=0
last_planted=1
while read -r directive rest; do
	case "$directive" in
	kunit)
		# shellcheck disable=SC2086
		run_kunit $rest </dev/null ;;
	scenario)
		scenario_n=$((scenario_n + 1))
		case "$ktap_must_fail" in
		*" $scenario_n "*)
			[ "$last_planted" = 1 ] || settle
			last_planted=1 ;;
		*) last_planted=0 ;;
		esac
		# shellcheck disable=SC2086
		run_scenario $rest ;;
	scenario_timeout)
		scenario_timeout=${rest%%#*} ;;
	esac
done <<EOS
$(sed -e 's/#.*//' "$file")
EOS

finish
