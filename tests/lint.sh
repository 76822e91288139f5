#!/usr/bin/env bash
# Style gates, counted as tests by `make test`: rustfmt and clippy for the
# userspace workspace and for the kernel crate, checkpatch for the C code.
#   lint.sh KDIR OUT.json
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
kdir=$1
out=$2
cd "$repo"
# shellcheck source=kernel/toolchain.sh
. tests/kernel/toolchain.sh
logdir="$(dirname "$out")/lint"
mkdir -p "$logdir"
tests=()

gate() {
	local name=$1
	shift
	if "$@" >"$logdir/$name.log" 2>&1; then
		tests+=("{\"name\":\"lint:$name\",\"passed\":true,\"reason\":\"\",\"figures\":{},\"evidence\":[]}")
		echo "lint: $name ok" >&2
	else
		local ev
		ev=$(tail -n 8 "$logdir/$name.log" | python3 -c 'import json,sys; print(json.dumps([l.rstrip() for l in sys.stdin]))')
		tests+=("{\"name\":\"lint:$name\",\"passed\":false,\"reason\":\"see $logdir/$name.log\",\"figures\":{},\"evidence\":$ev}")
		echo "lint: $name FAILED (see $logdir/$name.log)" >&2
	fi
}

kclippy() {
	local syms=() lintdir=$repo/build/lint-kmod
	[ -f tests/fixtures/Module.symvers ] &&
		syms=("KBUILD_EXTRA_SYMBOLS=$repo/tests/fixtures/Module.symvers")
	# Under clippy in a copy of the sources (build/lint-kmod, as the
	# drop-in's build): the tree's own objects and .ko stay as the build
	# made them, so nothing is compiled twice. The touch makes clippy see
	# the crate again even when its sources did not change.
	mkdir -p "$lintdir"
	tar -cf - --exclude='*.o' --exclude='.*.cmd' --exclude='*.mod*' \
		--exclude='*_generated.rs' --exclude='compat*.cfg' --exclude='*.o.d' --exclude='*.rmeta' \
		VERSION Kbuild kmod ffi | tar -C "$lintdir" -xf -
	touch "$lintdir/kmod/nvidia_peermem_rs.rs"
	make -s -C "$kdir" M="$lintdir" "${PEERMEM_KMAKE_ARGS[@]}" "${syms[@]}" \
		PEERMEM_KUNIT=1 CLIPPY=1 CLIPPY_DRIVER=/usr/bin/clippy-driver modules 2>&1 | tee /dev/stderr |
		{ ! grep -E "^(warning|error)"; }
}

kfmt() {
	rustfmt --check --edition 2021 --config-path "$kdir/.rustfmt.toml" kmod/*.rs
}

checkpatch() {
	local files
	files=$(git ls-files 'tests/fixtures/*.c' 'tests/fixtures/*.h' 'ffi/*.c' 'ffi/*.h' 'ffi/include/*/*.h')
	# shellcheck disable=SC2086
	perl "$kdir/scripts/checkpatch.pl" --no-tree --terse --show-types -f $files |
		tee /dev/stderr | { ! grep -E "ERROR|WARNING"; }
}

gate rustfmt-workspace cargo fmt --all -- --check
gate clippy-workspace cargo clippy -q --workspace --all-targets -- -D warnings
gate rustfmt-kmod kfmt
gate clippy-kmod kclippy
gate checkpatch-c checkpatch
(IFS=,; echo "{\"suite\":\"lint\",\"tests\":[${tests[*]}]}") >"$out"
