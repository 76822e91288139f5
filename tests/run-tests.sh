#!/usr/bin/env bash
# `make test`: host tests, the build, every VM suite, the harness self-test,
# and one closing `N passed, N failed, N skipped` line (which says what
# SUITES, PEERMEM_SKIP_SELFTEST or PEERMEM_MATRIX_KERNELS left out). Exit 0
# only when all is green: nothing failed, nothing skipped but the lines a
# kernel's cut declared (tests/vm/README.md, "Skips"), and every suite and
# check it started left its verdict.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
results="${RESULTS:-$repo/results}"
rm -rf "$results"
mkdir -p "$results"
start=$(date +%s)

# phase NAME: closes the previous phase's timer, opens NAME's.
phase_t0=$start
phase_name=
phase() {
	[ -z "$phase_name" ] || echo $(( $(date +%s) - phase_t0 )) >"$results/phase-$phase_name.seconds"
	phase_name=$1
	phase_t0=$(date +%s)
}
# Host tests (cargo test: compile and run) go beside the build and the
# packaging checks, whose kernel-module builds, single-crate rustc runs and
# dkms/lintian steps leave a core idle much of the time (~40 s less).
# Their lines are printed with lint's, after the VM suites. Every test
# binary runs (--no-fail-fast); cargo's exit status goes to the summary, which
# also fails a binary that printed no result (crash, abort) and counts the
# skips host tests report in host-skips.txt.
echo "==> host tests (cargo test --release --workspace), beside the build" >&2
(
	t0=$(date +%s)
	PEERMEM_HOST_SKIPS="$results/host-skips.txt" \
		cargo test --release --workspace --no-fail-fast --color never >"$results/cargo-test.log" 2>&1
	echo $? >"$results/cargo-test.rc"
	echo $(($(date +%s) - t0)) >"$results/phase-host-tests.seconds"
) &
host_tests_pid=$!

# Cold or warm: whether every kernel of the run was cached at its start
# (the budget line at the end compares the run with its budget in K).
run_kind=warm
PEERMEM_KERNEL=$(awk '!/^#/ && NF { print $1; exit }' tests/kernel/kernels) \
	tests/kernel/build-kernel.sh --cached >/dev/null 2>&1 || run_kind=cold

# The other kernels of the matrix (those tests/kernel/kernels marks
# "matrix"; "on-demand" ones boot only with make vm-test KERNEL=<id>): each
# boots the matrix suites, in the same pool of QEMUs as the primary
# kernel's suites (below).
# The matrix kernels boot what differs by kernel and what the slowest
# machines can hold within CI's 90 minutes beside the primary suites: the
# module's load, parameters, refusals and races (module), the windows held
# inside its own code under that kernel's preemption (rel-races-module),
# and on an Ubuntu-shaped kernel its layout. module-matrix, driver-matrix
# (the module's own decoding of every core and driver generation, the same
# Rust on every kernel), rel-races (the simulated core's windows) and
# field-teeth boot on the primary kernel; `make vm-test KERNEL=<id>
# SUITE=<name>` boots any of them on another.
matrix_suites=(module rel-races-module)
mapfile -t matrix_kernels < <(awk '!/^#/ && NF && $5 == "matrix" { print $1 }' tests/kernel/kernels)
default_matrix="${matrix_kernels[*]:-}"
if [ -n "${PEERMEM_MATRIX_KERNELS+set}" ]; then
	read -ra matrix_kernels <<<"$PEERMEM_MATRIX_KERNELS"
fi
if [ -n "${SUITES:-}" ]; then
	picked=()
	for s in "${matrix_suites[@]}"; do [[ " $SUITES " != *" $s "* ]] || picked+=("$s"); done
	matrix_suites=("${picked[@]}")
fi
[ "${#matrix_suites[@]}" -gt 0 ] || matrix_kernels=()

# A matrix kernel that is not cached starts building now, beside the
# primary kernel's build: its build and suites are the longest chain of a
# cold run. At nice 10 while the primary build runs (its suites come
# first), at normal priority once the VM suites start. One process group
# each, so that the run's end takes the whole build with it.
declare -A kernel_build_pid=()
for k in "${matrix_kernels[@]}"; do
	mkdir -p "$results/kernel-$k"
	if ! PEERMEM_KERNEL=$k tests/kernel/build-kernel.sh --cached >/dev/null 2>&1; then
		run_kind=cold
		echo "==> kernel $k: not cached, building beside the primary build (results/kernel-$k/kernel-build.log)" >&2
		PEERMEM_KERNEL=$k setsid nice -n 10 tests/kernel/build-kernel.sh \
			>/dev/null 2>"$results/kernel-$k/kernel-build.log" &
		kernel_build_pid[$k]=$!
	fi
done
trap 'for p in "${kernel_build_pid[@]}"; do kill -- -"$p" 2>/dev/null; done' EXIT

phase build
echo "==> build" >&2
if ! kdir=$(tests/build-all.sh); then
	wait "$host_tests_pid"
	echo "error: the build failed (see above)" >&2
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi

# K, this machine's unit of time (tests/kernel/k.sh: the primary test
# kernel's build time, measured or by its proxy), and the scale of every
# limit that decides a verdict (tests/vm/run-suite.sh).
read -r k_secs k_how k_when < <(tests/kernel/k.sh) || { k_secs=0; k_how=unknown; k_when=-; }
PEERMEM_TIME_SCALE=$(tests/kernel/k.sh scale 2>/dev/null || echo 1)
export PEERMEM_TIME_SCALE
echo "==> K = ${k_secs}s ($k_how, $k_when): limits scaled x$PEERMEM_TIME_SCALE" >&2
for p in "${kernel_build_pid[@]}"; do renice -n 0 -g "$p" >/dev/null 2>&1 || true; done
# What this run leaves out of a whole make test: the closing line says it
# (vm-verdict summary --shrunk), so a shrunk run never reads as a full one.
# On-demand kernels are never part of it.
shrunk=()
[ -z "${SUITES:-}" ] || shrunk+=(--shrunk "SUITES=$SUITES: only these suites")
[ "${PEERMEM_SKIP_SELFTEST:-0}" != 1 ] || shrunk+=(--shrunk "PEERMEM_SKIP_SELFTEST=1: no harness self-test")
if [ "${matrix_kernels[*]:-}" != "$default_matrix" ]; then
	shrunk+=(--shrunk "kernels of the matrix run: ${matrix_kernels[*]:-none} instead of ${default_matrix:-none}")
fi

mapfile -t suites < <(ls tests/vm/suites/*.suite 2>/dev/null)
if [ -n "${SUITES:-}" ]; then
	suites=()
	for s in $SUITES; do suites+=("tests/vm/suites/$s.suite"); done
fi
# packaging.suite boots from the packaging job below (it needs the files the
# packaging checks make), the others from run-vm-suites.sh.
packaging_suite=
if [ -f packaging/packaging.mk ]; then
	packaging_suite=tests/vm/suites/packaging.suite
	if [ -n "${SUITES:-}" ] && [[ " $SUITES " != *" packaging "* ]]; then
		packaging_suite=
	fi
	rest=()
	for f in "${suites[@]}"; do [ "$f" = tests/vm/suites/packaging.suite ] || rest+=("$f"); done
	suites=("${rest[@]}")
fi

phase vm-suites
# The harness self-test's four boots are light (a planted WARN, KUnit
# failure, leak, and a hang that only waits for its 40 s timeout): they run
# one at a time beside the suites instead of after them (~1 min less).
# The initramfs is packed first (the packaging job adds to it).
tests/vm/mkinitramfs.sh "$results/initramfs.cpio" "$kdir" || exit 2
# Lint (rustfmt, clippy, checkpatch; ~20-35 s of CPU) runs beside the VM
# suites; its lines are printed when the suites are done.
# Then the ABI oracle (issue 33): NVIDIA's own headers of each fetched
# release against ffi/include, and the module built against them.
echo "==> lint (rustfmt, clippy, checkpatch), then the NVIDIA ABI oracle, beside the VM suites" >&2
(
	tests/lint.sh "$kdir" "$results/lint.json" >"$results/lint.out" 2>&1
	t0=$(date +%s)
	tests/nvidia/abi-oracle.sh "$results/nvidia-abi.json" "$kdir" >>"$results/lint.out" 2>&1
	echo $(($(date +%s) - t0)) >"$results/phase-nvidia-abi.seconds"
) &
lint_pid=$!
# One pool of QEMUs for every boot of the run: the primary kernel's
# suites, the other kernels' matrix suites (tests/run-vm-suites.sh), the
# harness self-test and the packaging boot (tests/vm/pool-slot.sh), one
# more at a time than the host has cores: the matrix suites fill the cores
# the primary run's last, long suites leave idle, and no boot runs beside
# more QEMUs than the pool allows.
vm_slots="$results/.vm-slots"
mkdir -p "$vm_slots"
vm_jobs=${PEERMEM_VM_JOBS:-}
[ -n "$vm_jobs" ] || { vm_jobs=1; [ "$(nproc)" -ge 2 ] && vm_jobs=$(($(nproc) + 1)); }
echo "$vm_jobs" >"$vm_slots/jobs"
export PEERMEM_VM_SLOTS=$vm_slots
# Packaging (DKMS, modprobe.d, systemd, install, deb; ~35 s, mostly one
# core: dkms, lintian) runs beside the suites too, and then boots
# packaging.suite itself with the files those checks made (vm-extra) added
# to the initramfs.
packaging_pid=
if [ -n "$packaging_suite" ]; then
	echo "==> packaging (DKMS, modprobe.d, systemd, install, deb), beside the suites" >&2
	(
		t0=$(date +%s)
		PACKAGING_VM=0 PACKAGING_KDIR="$kdir" make -s packaging-test \
			>"$results/packaging-test.log" 2>&1
		packaging_rc=$?
		echo $(($(date +%s) - t0)) >"$results/phase-packaging.seconds"
		python3 - "$results/packaging-test.log" "$packaging_rc" >"$results/packaging.json" <<'EOP'
import json, re, sys
log = open(sys.argv[1], errors="replace").read()
m = re.findall(r"^packaging: (\d+) passed, (\d+) failed", log, re.M)
passed, failed = (int(m[-1][0]), int(m[-1][1])) if m else (0, 1)
ok = sys.argv[2] == "0" and failed == 0 and passed > 0
print(json.dumps({"suite": "packaging-host", "tests": [{
    "name": "packaging:host-checks", "passed": ok,
    "reason": "" if ok else "packaging-test failed (see packaging-test.log)",
    "figures": {"checks_passed": str(passed), "checks_failed": str(failed)},
    "evidence": []}]}))
EOP
		# Without the checks' files the boot fails on its own (its
		# scenarios name what is missing).
		extra="$repo/build/packaging/vm-extra"
		mkdir -p "$extra"
		tests/vm/initramfs-extra.sh "$results/initramfs.cpio" "$extra" \
			"$results/packaging-initramfs.cpio" &&
			tests/vm/pool-slot.sh 100 primary/packaging \
				tests/vm/run-suite.sh "$packaging_suite" "$results/packaging-initramfs.cpio" \
				"$kdir" "$results" >"$results/packaging.run.out" 2>&1
	) &
	packaging_pid=$!
fi
selftest_pid=
selftest_boots=0
if [ "${PEERMEM_SKIP_SELFTEST:-0}" != 1 ]; then
	echo "==> harness self-test (each planted failure must be caught), in the pool" >&2
	PEERMEM_VM_JOBS=1 tests/vm/selftest.sh "$kdir" "$results" 2>"$results/selftest.out" &
	selftest_pid=$!
	selftest_boots=$(ls tests/vm/selftest/*.suite | wc -l)
fi
# The matrix, beside the primary suites: each other kernel's modules are
# built (cached kernels: the fixtures, the module and its KUnit module,
# ~1 min), then its suites join the pool, into results/kernel-<id>/
# (tests/vm/run-kernel-matrix.sh).
# kernel_suites ID: the matrix suites, and on an Ubuntu-shaped kernel
# (tests/ubuntu/) what its build and layout add.
kernel_suites() {
	echo "${matrix_suites[@]}"
	case $1 in *-ubuntu) [ -n "${SUITES:-}" ] && [[ " $SUITES " != *" ubuntu-layout "* ]] || echo ubuntu-layout ;; esac
}
matrix_verdicts=()
for k in "${matrix_kernels[@]}"; do
	for s in $(kernel_suites "$k"); do matrix_verdicts+=("$results/kernel-$k/$s/verdict.json"); done
done
matrix_pid=
if [ "${#matrix_kernels[@]}" -gt 0 ]; then
	echo "==> the kernel matrix (${matrix_kernels[*]}: ${matrix_suites[*]}), in the same pool" >&2
	(
		t0=$(date +%s)
		for k in "${matrix_kernels[@]}"; do
			# The kernel build started at the run's start (not this
			# subshell's child): wait for it to end, then for its tree.
			if [ -n "${kernel_build_pid[$k]:-}" ]; then
				while kill -0 "${kernel_build_pid[$k]}" 2>/dev/null; do sleep 5; done
				if ! PEERMEM_KERNEL=$k tests/kernel/build-kernel.sh --cached >/dev/null 2>&1; then
					tail -n 20 "$results/kernel-$k/kernel-build.log"
					echo "error: kernel $k: the kernel build failed (its suites are counted failed)"
					continue
				fi
			fi
			if ! kd=$(PEERMEM_KERNEL=$k tests/build-all.sh 2>"$results/kernel-$k/build.log"); then
				tail -n 20 "$results/kernel-$k/build.log"
				echo "error: kernel $k: the build failed (its suites are counted failed)"
				continue
			fi
			# shellcheck disable=SC2046 # suite names: one word each
			PEERMEM_VM_SLOTS=$vm_slots tests/vm/run-kernel-matrix.sh "$k" "$kd" "$results/kernel-$k" $(kernel_suites "$k") 2>&1
		done
		echo $(($(date +%s) - t0)) >"$results/phase-vm-matrix.seconds"
	) 2>&1 | tee "$results/vm-matrix.out" |
		grep --line-buffered -E "^\[kernel .*(suite .*(passed|TIMEOUT|again)|FAIL|skipped \()|^error" >&2 &
	matrix_pid=$!
fi
echo "==> VM suites: ${#suites[@]} (PEERMEM_VM_JOBS=${PEERMEM_VM_JOBS:-auto} at a time)" >&2
PEERMEM_VM_SLOTS=$vm_slots PEERMEM_INITRAMFS_READY=1 tests/run-vm-suites.sh "$kdir" "$results" "${suites[@]}" 2>&1 |
	tee "$results/vm-suites.out" | grep --line-buffered -E "^suite .*(passed|TIMEOUT|again)|FAIL" >&2

# What the matrix still runs once the primary suites are done.
phase vm-matrix-tail
[ -z "$matrix_pid" ] || wait "$matrix_pid"
# The pool held its limit, and every suite of every kernel ran in it.
[ -z "$selftest_pid" ] || wait "$selftest_pid"
[ -z "$packaging_pid" ] || wait "$packaging_pid"
python3 tests/vm/pool-check.py "$vm_slots" \
	$((${#suites[@]} + ${#matrix_verdicts[@]} + selftest_boots + (${packaging_suite:+1}+0))) \
	"$results/vm-pool.json" >&2

phase selftest
wait "$host_tests_pid"
echo "==> host tests (cargo test --release --workspace; $(cat "$results/phase-host-tests.seconds" 2>/dev/null)s)" >&2
grep -E "^test result:|FAILED|panicked|^error" "$results/cargo-test.log" >&2
[ ! -s "$results/host-skips.txt" ] || sed 's/^/SKIP: /' "$results/host-skips.txt" >&2
if [ -n "$packaging_pid" ]; then
	wait "$packaging_pid" 2>/dev/null
	tail -n 1 "$results/packaging-test.log" >&2
	grep -E "^suite .*(passed|TIMEOUT|again)|FAIL" "$results/packaging.run.out" >&2
fi
wait "$lint_pid"
cat "$results/lint.out" >&2
if [ -n "$selftest_pid" ]; then
	wait "$selftest_pid" 2>/dev/null
	cat "$results/selftest.out" >&2
fi

phase done
rel_verdicts=()
# Every boot's verdict: the table takes the rel_* scenarios wherever they
# ran (the iommu suite has some).
for v in "$results"/*/verdict.json; do
	[ -f "$v" ] && rel_verdicts+=("$v")
done
if [ "${#rel_verdicts[@]}" -gt 0 ]; then
	echo "==> reliability table (issue 5; caught: the field bug planted in the C client, issue 18)" >&2
	# Its failures are already counted by the summary below.
	target/release/vm-verdict reliability --json "$results/reliability.json" \
		"${rel_verdicts[@]}" | tee "$results/reliability.txt" >&2 || true
fi

if [ -f "$results/nvidia-vs-ours.txt" ]; then
	echo "==> NVIDIA's nvidia-peermem vs ours (issue 33; results/nvidia-vs-ours.json, docs/nvidia-vs-ours.md)" >&2
	cat "$results/nvidia-vs-ours.txt" >&2
fi

echo "==> suite durations (results/timings.json; wall seconds, every boot attempt)" >&2
python3 - "$results" "$(( $(date +%s) - start ))" >&2 <<'EOP'
import json, os, sys
results, total = sys.argv[1], int(sys.argv[2])
path = os.path.join(results, "timings.json")
try:
    t = json.load(open(path))
except (OSError, ValueError):
    t = {}
for phase in ("host-tests", "build", "packaging", "vm-suites", "vm-matrix", "vm-matrix-tail", "selftest", "nvidia-abi"):
    f = os.path.join(results, f"phase-{phase}.seconds")
    if os.path.exists(f):
        t["phase:" + phase] = int(open(f).read())
for d in sorted(os.listdir(results)):
    f = os.path.join(results, d, "seconds")
    if d not in t and os.path.isfile(f):
        try:
            t[d] = int(open(f).read())
        except ValueError:
            pass
t["total"] = total
json.dump(t, open(path, "w"), indent=1, sort_keys=True)
for k, v in sorted(t.items(), key=lambda kv: -kv[1]):
    print(f"  {k:<40} {v // 60:3d}m{v % 60:02d}s")
EOP
python3 tests/vm/scenario-timings.py "$results" >&2 || true
echo "==> summary (results in $results, $(( $(date +%s) - start ))s)" >&2
# The verdict of every suite and check this run started, whether or not it
# is there: the summary fails each that is missing (a runner that died
# before judging, a suite file the verdict rejects), instead of the total
# quietly shrinking.
verdicts=()
for f in "${suites[@]}"; do verdicts+=("$results/$(basename "$f" .suite)/verdict.json"); done
if [ -n "$packaging_suite" ]; then
	verdicts+=("$results/packaging/verdict.json" "$results/packaging.json")
fi
[ -z "$selftest_pid" ] || verdicts+=("$results/harness-selftest.json")
verdicts+=("${matrix_verdicts[@]}")
verdicts+=("$results/lint.json" "$results/nvidia-abi.json" "$results/vm-pool.json")
# The run against its budget in K (docs/test-bed.md): warm <= 2 K, cold
# <= 5 K, no boot over 0.5 K. Printed, never judged: a verdict does not
# depend on the machine's speed.
budget=()
total_s=$(( $(date +%s) - start ))
if [ "$k_secs" -gt 0 ] 2>/dev/null; then
	limit=2
	[ "$run_kind" = warm ] || limit=5
	mapfile -t budget < <(python3 - "$results" "$total_s" "$k_secs" "$k_how" "$k_when" "$run_kind" "$limit" <<'EOP'
import json, os, sys
results, total, k, how, when, kind, limit = sys.argv[1:]
total, k, limit = int(total), int(k), int(limit)
def mmss(s):
    return f"{s // 60}m{s % 60:02d}s"
print(f"K = {mmss(k)} ({k} s: this machine's 6.12 test kernel build, {how} {when})")
ratio = total / k
print(f"make test ({kind}): {mmss(total)} = {ratio:.2f} K; budget {limit} K: "
      + ("within" if ratio <= limit else "OVER"))
try:
    t = json.load(open(os.path.join(results, "timings.json")))
except (OSError, ValueError):
    t = {}
boots = {n: s for n, s in t.items() if not n.startswith("phase:") and n != "total"}
for d in sorted(os.listdir(results)):
    if d.startswith("kernel-"):
        try:
            kt = json.load(open(os.path.join(results, d, "timings.json")))
        except (OSError, ValueError):
            continue
        boots.update({f"{n} ({d[len('kernel-'):]})": v for n, v in kt.items()
                      if isinstance(v, int) and not n.startswith("phase:")})
if boots:
    n, s = max(boots.items(), key=lambda kv: kv[1])
    print(f"longest boot: {n}, {mmss(s)} in the pool = {s / k:.2f} K (budget 0.5 K alone)")
EOP
	)
fi
budget_args=()
for b in "${budget[@]}"; do budget_args+=(--budget "$b"); done
echo "$total_s $k_secs $run_kind" >"$results/budget.txt"
target/release/vm-verdict summary --cargo-log "$results/cargo-test.log" \
	--cargo-status "$results/cargo-test.rc" --host-skips "$results/host-skips.txt" \
	"${shrunk[@]}" "${budget_args[@]}" "${verdicts[@]}" | tee "$results/summary.txt"
exit "${PIPESTATUS[0]}"
