#!/usr/bin/env bash
# `make check`: the fast loop to run while working (a few minutes warm):
# host tests, lint, the build, and one VM boot with the core scenarios
# (tests/vm/check/check.suite). Ends "N passed, N failed, N skipped" and
# fails on skips as make test does. `make test` is the full verdict and
# what CI runs.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
results="${RESULTS:-$repo/results}/check"
rm -rf "$results"
mkdir -p "$results"
start=$(date +%s)
echo "==> host tests (cargo test --release --workspace)" >&2
# As in run-tests.sh: every binary runs, cargo's status and the host tests'
# skips go to the summary.
PEERMEM_HOST_SKIPS="$results/host-skips.txt" \
	cargo test --release --workspace --no-fail-fast --color never >"$results/cargo-test.log" 2>&1
echo $? >"$results/cargo-test.rc"
grep -E "^test result:|FAILED|panicked|^error" "$results/cargo-test.log" >&2
[ ! -s "$results/host-skips.txt" ] || sed 's/^/SKIP: /' "$results/host-skips.txt" >&2
echo "==> build" >&2
if ! kdir=$(tests/build-all.sh); then
	echo "error: the build failed (see above)" >&2
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi
echo "==> lint (rustfmt, clippy, checkpatch)" >&2
tests/lint.sh "$kdir" "$results/lint.json"
echo "==> NVIDIA ABI oracle (headers only; make test also builds the module against them)" >&2
tests/nvidia/abi-oracle.sh "$results/nvidia-abi.json"
echo "==> VM: check.suite" >&2
tests/run-vm-suites.sh "$kdir" "$results" tests/vm/check/check.suite >&2
echo "==> check done in $(( $(date +%s) - start ))s (results in $results)" >&2
target/release/vm-verdict summary --cargo-log "$results/cargo-test.log" \
	--cargo-status "$results/cargo-test.rc" --host-skips "$results/host-skips.txt" \
	"$results"/check/verdict.json "$results"/lint.json "$results"/nvidia-abi.json
