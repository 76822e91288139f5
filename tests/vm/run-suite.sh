#!/usr/bin/env bash
# Boot one suite in QEMU and judge it.
#   run-suite.sh SUITE_FILE INITRAMFS KDIR RESULTS_DIR
# Writes RESULTS_DIR/<suite>/console.log and verdict.json; exit 0 = green.
set -uo pipefail
suite_file=$1
initramfs=$2
kdir=$3
results=$4
repo="$(cd "$(dirname "$0")/../.." && pwd)"
verdict="$repo/target/release/vm-verdict"
name=$(basename "$suite_file" .suite)
dir="$results/$name"
mkdir -p "$dir"
log="$dir/console.log"

iommu=$("$verdict" suite-field --suite "$suite_file" iommu) || exit 2
timeout_s=$("$verdict" suite-field --suite "$suite_file" timeout) || exit 2
memory=$("$verdict" suite-field --suite "$suite_file" memory) || exit 2
cpus=$("$verdict" suite-field --suite "$suite_file" cpus) || exit 2
extra_cmdline=$(sed -n 's/^cmdline[[:space:]]\+//p' "$suite_file" | tr '\n' ' ')

# The limits that decide a verdict grow with this machine's K (the 6.12
# test kernel's build time, tests/kernel/k.sh): PEERMEM_TIME_SCALE, at
# least 1, is K over the K of the machine they were tuned on. make test
# works it out once; a lone boot (make vm-test) asks k.sh.
scale=${PEERMEM_TIME_SCALE:-$("$repo/tests/kernel/k.sh" scale 2>/dev/null || echo 1)}
[[ $scale =~ ^[0-9]+(\.[0-9]+)?$ ]] || scale=1
scale_pct=$(awk -v s="$scale" 'BEGIN { p = int(s * 100 + 0.5); if (p < 100) p = 100; print p }')
# times_scale N: N seconds grown by the scale.
times_scale() {
	echo $(($1 * scale_pct / 100))
}
timeout_s=$(times_scale "$timeout_s")

cmdline="console=ttyS0,115200 panic=-1 loglevel=7 peermem.suite=$name kasan_multi_shot"
# The scenarios scale their own bounds by it (guest-init.sh).
cmdline="$cmdline peermem.time_scale=$scale_pct"
# The hang detectors at thresholds for an emulated guest, as syzkaller
# sets them for its emulated targets: under TCG with KASAN and lockdep,
# with more vCPU threads than host cores, a task or CPU legitimately goes
# unscheduled for longer than hardware thresholds (hung task 30 s, soft
# lockup 20 s, RCU stall 60 s) allow. The scenarios' own bounded waits
# still tell a hang, and name_hung_tasks (rel_lib.sh) lowers the hung-task
# timeout where a deadlock is expected. A larger log buffer keeps a long
# boot's marks from scrolling out of what the scenarios read.
wd=$(times_scale 30)
[ "$wd" -le 60 ] || wd=60
rcu=$(times_scale 180)
[ "$rcu" -le 300 ] || rcu=300
cmdline="$cmdline sysctl.kernel.hung_task_timeout_secs=$(times_scale 120) watchdog_thresh=$wd"
cmdline="$cmdline rcupdate.rcu_cpu_stall_timeout=$rcu log_buf_len=4M"
# no5lvl: 4-level paging as on most servers; under -cpu max (LA57) an early
# interrupt during identify_cpu was seen to trip KASAN under host load.
cmdline="$cmdline hung_task_panic=0 kmemleak=on no5lvl $extra_cmdline"
# PEERMEM_KMEMLEAK=each: every scenario scans for leaks itself, naming the
# one that leaked (slower; by default the suite's final scan finds them).
if [ -n "${PEERMEM_KMEMLEAK:-}" ]; then
	cmdline="$cmdline peermem.kmemleak=$PEERMEM_KMEMLEAK"
fi
# PEERMEM_PROVIDER_COST=<profile>: the simulated provider's cost model
# (tests/scenarios/lib.sh, psim_cost_params; make bench sets it).
if [ -n "${PEERMEM_PROVIDER_COST:-}" ]; then
	cmdline="$cmdline peermem.provider_cost=$PEERMEM_PROVIDER_COST"
fi
qemu=(qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp "$cpus" -m "$memory"
	-display none -monitor none -no-reboot -serial "file:$log"
	-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initramfs")
if [ "$iommu" = on ]; then
	qemu+=(-device intel-iommu)
	cmdline="$cmdline intel_iommu=on iommu.passthrough=0 iommu.strict=1"
else
	cmdline="$cmdline intel_iommu=off"
fi
# PEERMEM_QEMU_EXTRA="words": extra QEMU arguments (make bench: -icount ...)
if [ -n "${PEERMEM_QEMU_EXTRA:-}" ]; then
	read -ra extra_qemu <<<"$PEERMEM_QEMU_EXTRA"
	qemu+=("${extra_qemu[@]}")
fi
qemu+=(-device "edu,dma_mask=0xffffffffffffffff" -append "$cmdline")

# The suite's timeout is a budget of host CPU, not of wall time: a suite
# needs the same CPU however many QEMUs share the cores, while its wall time
# grows with the load (rel-races, ~470 s quiet, outran a 1,200 s wall
# timeout beside a soak: 7 QEMUs on 2 cores). watch_qemu kills QEMU, and
# the boot counts as timed out, when
#   - QEMU has used timeout_s seconds of host CPU (a guest busy forever), or
#   - the console has been silent for stall_s seconds while QEMU used less
#     than a quarter of a core (a guest asleep forever: a deadlock, a hang;
#     an idle TCG guest of 2 vCPUs used ~15% of a core, measured), or
#   - 4 x timeout_s seconds of wall time have passed, whatever the load.
stall_s=$((timeout_s < 300 ? timeout_s : 300))
qemu_cpu_s() {
	# utime + stime (clock ticks), fields 14 and 15 of /proc/PID/stat;
	# split after the ")" that ends the command name.
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	st=${st##*) }
	awk -v hz="$(getconf CLK_TCK)" '{ printf "%d\n", ($12 + $13) / hz }' <<<"$st"
}
qemu_pid=
trap '[ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null' EXIT
trap 'exit 143' TERM INT
watch_qemu() {
	"${qemu[@]}" </dev/null &
	qemu_pid=$!
	local pid=$qemu_pid t0 now cpu size last_size=-1 quiet_since cpu_then why=
	t0=$(date +%s)
	quiet_since=$t0
	cpu_then=0
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		now=$(date +%s)
		cpu=$(qemu_cpu_s "$pid")
		size=$(stat -c %s "$log" 2>/dev/null || echo 0)
		if [ "$size" != "$last_size" ]; then
			last_size=$size
			quiet_since=$now
			cpu_then=$cpu
		fi
		if [ "$cpu" -ge "$timeout_s" ]; then
			why="QEMU used ${cpu}s of host CPU (the suite's timeout is ${timeout_s}s)"
		elif [ $((now - t0)) -ge $((4 * timeout_s)) ]; then
			why="$((now - t0))s of wall time (4 x the suite's timeout)"
		elif [ $((now - quiet_since)) -ge "$stall_s" ] &&
			[ $(((cpu - cpu_then) * 4)) -lt $((now - quiet_since)) ]; then
			why="the console silent for $((now - quiet_since))s with QEMU idle ($((cpu - cpu_then))s of CPU)"
		fi
		if [ -n "$why" ]; then
			echo "suite $name: TIMEOUT: $why" >&2
			kill -TERM "$pid" 2>/dev/null
			for _ in 1 2 3 4 5; do kill -0 "$pid" 2>/dev/null && sleep 2; done
			kill -KILL "$pid" 2>/dev/null
			wait "$pid"
			qemu_pid=
			return 124
		fi
	done
	wait "$pid"
	local rc=$?
	qemu_pid=
	return $rc
}

# A boot that dies or splats before /init runs (before PEERMEM-SUITE-START:
# none of our modules is loaded yet) is an emulator/boot problem, not a test
# result: keep its log and boot again, at most twice. The third attempt is
# judged as it is. Everything after /init starts always counts.
attempt=1
suite_start=$(date +%s)
while :; do
	echo "suite $name: booting (iommu $iommu, timeout ${timeout_s}s of host CPU, attempt $attempt)" >&2
	start=$(date +%s)
	watch_qemu
	rc=$?
	elapsed=$(( $(date +%s) - start ))
	pre_init=$(sed -n '/PEERMEM-SUITE-START/q;p' "$log")
	if grep -a -q "PEERMEM-SUITE-START" "$log" &&
		! grep -a -q -E "BUG:|WARNING:|Oops|KASAN:|Kernel panic" <<<"$pre_init"; then
		break
	fi
	if [ $attempt -ge 3 ]; then
		break
	fi
	mv "$log" "$dir/console.boot-failure-$attempt.log"
	echo "suite $name: the VM died or splatted before /init ran (kept as console.boot-failure-$attempt.log); booting again" >&2
	attempt=$((attempt + 1))
done
timed_out=()
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	timed_out=(--timed-out)
	echo "suite $name: TIMEOUT after ${elapsed}s (timeout ${timeout_s}s of host CPU)" >&2
fi
echo "suite $name: VM ran ${elapsed}s (qemu exit $rc)" >&2
# Wall time of the suite, every boot attempt included (timings.json), and
# the host CPU seconds its QEMUs used (user+sys): a suite whose CPU time is
# far below its wall time spends it in guest sleeps and timers.
echo $(( $(date +%s) - suite_start )) >"$dir/seconds"
times >"$dir/times.txt"
awk 'NR == 2 {
	n = 0
	for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); n += p[1] * 60 + p[2] }
	printf "%d\n", n + 0.5 }' "$dir/times.txt" >"$dir/cpu-seconds"
"$verdict" check --suite "$suite_file" --log "$log" --json "$dir/verdict.json" "${timed_out[@]}"
