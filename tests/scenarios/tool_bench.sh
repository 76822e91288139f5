#!/bin/sh
# peermem-check bench --backend sim in the VM: registration latency by size,
# per-phase in-kernel times, direct vs bounce; JSON and PNG written. The
# figures are printed, never asserted (benchmarks do not gate on time).
. /scenarios/lib.sh
load_sim_stack generation=modern
load nvidia_peermem_rs persistent_api_support=0
mkdir -p /tmp/tool_bench
# Progress bars would redraw on the serial console.
export PEERMEM_CHECK_NO_PROGRESS=1
check "bench --backend sim" \
	peermem-check bench --backend sim --sizes 64K,256K,1M,4M --iterations 10 --out /tmp/tool_bench
[ -s /tmp/tool_bench/bench.json ] || fail "no bench.json"
[ -s /tmp/tool_bench/bench.png ] || fail "no bench.png"
n=$(grep -c '"size"' /tmp/tool_bench/bench.json)
[ "$n" = 4 ] || fail "bench.json has $n sizes, want 4"
grep -q '"get_pages"' /tmp/tool_bench/bench.json || fail "bench.json lacks the phase times"
echo "BENCH-JSON-BEGIN"
cat /tmp/tool_bench/bench.json
echo "BENCH-JSON-END"
simtest_to lc leak-check || fail "bench left something behind: $lc"
unload nvidia_peermem_rs
unload_sim_stack
pass sizes=4 leaks=0
