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
extra_cmdline=$(sed -n 's/^cmdline[[:space:]]\+//p' "$suite_file" | tr '\n' ' ')

cmdline="console=ttyS0,115200 panic=-1 loglevel=7 peermem.suite=$name kasan_multi_shot"
# no5lvl: 4-level paging as on most servers; under -cpu max (LA57) an early
# interrupt during identify_cpu was seen to trip KASAN under host load.
cmdline="$cmdline hung_task_panic=0 kmemleak=on no5lvl $extra_cmdline"
# PEERMEM_KMEMLEAK=each: every scenario scans for leaks itself, naming the
# one that leaked (slower; by default the suite's final scan finds them).
if [ -n "${PEERMEM_KMEMLEAK:-}" ]; then
	cmdline="$cmdline peermem.kmemleak=$PEERMEM_KMEMLEAK"
fi
qemu=(qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 2 -m "$memory"
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

# A boot that dies or splats before /init runs (before PEERMEM-SUITE-START:
# none of our modules is loaded yet) is an emulator/boot problem, not a test
# result: keep its log and boot again, at most twice. The third attempt is
# judged as it is. Everything after /init starts always counts.
attempt=1
suite_start=$(date +%s)
while :; do
	echo "suite $name: booting (iommu $iommu, timeout ${timeout_s}s, attempt $attempt)" >&2
	start=$(date +%s)
	timeout -k 10 "$timeout_s" "${qemu[@]}" </dev/null
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
	echo "suite $name: TIMEOUT after ${timeout_s}s" >&2
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
