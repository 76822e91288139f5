#!/usr/bin/env bash
# `make bench-trace`: where a 64 KiB register + deregister cycle's
# instructions go, function by function, in the Rust client, the C
# reference client and NVIDIA's nvidia-peermem (invalidating mode only: it
# has no persistent one), on the production-config bench kernel (issues
# 15, 35). TRACE_CLIENTS="rs ref" leaves NVIDIA's out.
#
# Boots the bench kernel once per client (-smp 1, nokaslr, QEMU's gdbstub on
# 127.0.0.1), runs one untraced-then-traced 64 KiB round trip
# (tests/scenarios/bench_trace.sh), and single-steps with gdb every call
# the core makes into the client (tests/bench/trace/gdb_trace.py). Prints
# the instructions per call and, by function, where the two clients differ
# (tests/bench/trace/attribute.py); writes RESULTS/bench/trace/.
# Counts are instructions of the emulated CPU, repeatable within a few; the
# per-call totals match `make bench`'s icount figures less its own timing
# code (45-57 instructions a call, measured).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
results=${RESULTS:-$repo/results}
out="$results/bench/trace"
mkdir -p "$out"
command -v gdb >/dev/null || { echo "run-trace: gdb is missing (make deps installs it)" >&2; exit 1; }

kdir=$(BENCH_KERNELS=production BENCH_BUILD_ONLY=1 tests/bench/run-bench.sh)
PEERMEM_VM_MODULES=$repo/build/bench-production tests/vm/mkinitramfs.sh "$out/trace.cpio" "$kdir"
nm "$kdir/vmlinux" >"$out/vmlinux.nm"

qemu_pid=
trap '[ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true' EXIT
clients=${TRACE_CLIENTS:-rs ref nvidia}
# the attribution compares the Rust client with the reference (and NVIDIA's
# when traced): both are needed
# (each word on its own: one pattern for both would need the space between
# them twice, and refused the default)
case " $clients " in *" rs "*) has_rs=1 ;; *) has_rs=0 ;; esac
case " $clients " in *" ref "*) has_ref=1 ;; *) has_ref=0 ;; esac
if [ "$has_rs$has_ref" != 11 ]; then
	echo "run-trace: TRACE_CLIENTS must name rs and ref (nvidia optional), not '$clients'" >&2
	exit 2
fi
for client in $clients; do
	log=$out/console-$client.log
	rm -f "$log" "$out/trace-$client.json"
	port=$((20000 + RANDOM % 20000))
	echo "bench-trace: tracing the $client client (kernel $kdir)" >&2
	qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 1 -m 1024 \
		-display none -monitor none -no-reboot -serial "file:$log" \
		-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$out/trace.cpio" \
		-gdb "tcp:127.0.0.1:$port" -device "edu,dma_mask=0xffffffffffffffff" \
		-append "console=ttyS0,115200 panic=-1 loglevel=7 peermem.suite=trace-$client intel_iommu=off no5lvl kmemleak=off nokaslr" \
		</dev/null &
	qemu_pid=$!
	if ! TRACE_LOG=$log TRACE_OUT=$out/trace-$client.json TRACE_CLIENT=$client \
		TRACE_PORT=$port timeout 400 gdb -q -batch -nx \
		-x tests/bench/trace/gdb_trace.py >"$out/gdb-$client.log" 2>&1 ||
		[ ! -s "$out/trace-$client.json" ]; then
		echo "run-trace: gdb did not trace the $client client (see $out/gdb-$client.log)" >&2
		exit 1
	fi
	wait "$qemu_pid" || true
	qemu_pid=
	# Judged like every VM run: the scenario passed, no kernel splat.
	target/release/vm-verdict check --suite "tests/bench/trace-$client.suite" --log "$log" \
		--json "$out/verdict-$client.json" >&2 ||
		{ echo "run-trace: the $client boot is not green (see $log)" >&2; exit 1; }
done
nvidia_trace=
case " $clients " in *" nvidia "*) nvidia_trace=$out/trace-nvidia.json ;; esac
python3 tests/bench/trace/attribute.py "$out/vmlinux.nm" "$out/trace-rs.json" \
	"$out/trace-ref.json" "$out/attribution.json" $nvidia_trace | tee "$out/attribution.txt"
