#!/usr/bin/env bash
# Build (or find in the cache) the Rust-enabled kernel of a flavour:
#   [PEERMEM_KERNEL=<id>] build-kernel.sh [test|bench|prepare]
# <id> is a kernel of tests/kernel/kernels (default 6.12, the primary one);
# each kernel and flavour is cached on its own.
# test  (default) the debug test kernel: config.fragment (KASAN, lockdep,
#       kmemleak, DMA-API debugging, failslab, ...)
# bench the production-config bench kernel: config.fragment with
#       bench.fragment on top (every debug facility off)
# prepare  the test kernel's configuration, only as far as external
#       modules need it (make modules_prepare: the scripts and the Rust
#       crates' metadata, no vmlinux, no Module.symvers): enough to build
#       the module against a kernel that is not booted here
#
# The cache key covers the kernel source version, the config fragment(s) and
# the versions of rustc, bindgen and clang, so a warm run builds nothing.
# Prints the path of the built tree (usable as KDIR) on stdout; everything
# else goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=toolchain.sh
. "$here/toolchain.sh"

# --cached [FLAVOUR]: exit 0 (printing the tree) if that kernel is built
# and cached, 1 if not; builds nothing.
only_cached=0
if [ "${1:-}" = --cached ]; then
	only_cached=1
	shift
fi
flavour=${1:-test}
src_tar=$PEERMEM_KERNEL_SRC_TAR
fragment="$here/config.fragment"
# The overlays on config.fragment, in order: the kernel's own (its config
# drift, its compiler's constraints), then the flavour's.
overlays=()
[ -f "$here/$PEERMEM_KERNEL.fragment" ] && overlays+=("$here/$PEERMEM_KERNEL.fragment")
case $flavour in
test | prepare) ;;
bench) overlays+=("$here/bench.fragment")
	# and the kernel's own for the flavour (7.2: KFENCE off)
	[ -f "$here/$PEERMEM_KERNEL-bench.fragment" ] && overlays+=("$here/$PEERMEM_KERNEL-bench.fragment")
	;;
*)
	echo "error: kernel flavour must be test, bench or prepare, not '$flavour'" >&2
	exit 2
	;;
esac
if [ "$only_cached" = 1 ] && [ ! -f "$src_tar" ]; then
	exit 1
fi
if [ ! -f "$src_tar" ] && [ "$PEERMEM_KERNEL" != "$PEERMEM_PRIMARY_KERNEL" ]; then
	"$here/fetch-kernel-src.sh" "$PEERMEM_KERNEL" >&2
fi
[ -f "$src_tar" ] || { echo "error: $src_tar missing: run 'make deps'" >&2; exit 1; }

key_input="$(
	stat -c '%s %Y' "$src_tar"
	sha256sum "$fragment" | cut -d' ' -f1
	/usr/bin/rustc --version
	"$PEERMEM_BINDGEN" --version
	clang-19 --version | head -1
)"
# (6.12's test kernel's key is what it always was: its cached tree stays
# valid)
if [ "$PEERMEM_KERNEL" != 6.12 ]; then
	key_input="$key_input
$PEERMEM_KERNEL $("$PEERMEM_KERNEL_CC" --version | head -1)"
fi
for o in "${overlays[@]}"; do
	key_input="$key_input
$flavour $(sha256sum "$o" | cut -d' ' -f1)"
done
key="$(printf '%s' "$key_input" | sha256sum | cut -c1-16)"
case $flavour in
test) tree="$PEERMEM_CACHE/kernel-$PEERMEM_KERNEL-$key" ;;
*) tree="$PEERMEM_CACHE/kernel-$PEERMEM_KERNEL-$flavour-$key" ;;
esac

if [ -f "$tree/.peermem-built" ]; then
	[ "$only_cached" = 1 ] || echo "$flavour kernel: cached at $tree" >&2
	echo "$tree"
	exit 0
fi
[ "$only_cached" = 0 ] || exit 1

echo "$flavour kernel $PEERMEM_KERNEL ($PEERMEM_KERNEL_CC): building into $tree (cold build, about 10-40 minutes)" >&2
rm -rf "$tree.tmp"
mkdir -p "$tree.tmp"
build_t0=$(date +%s)
# The fragment the kernel is configured with: config.fragment, each option
# an overlay names replaced by the overlay's line, overlay by overlay.
merged="$tree.tmp/.peermem-fragment"
cp "$fragment" "$merged"
for o in "${overlays[@]}"; do
	awk -F= '
		FNR == NR { if ($0 ~ /^CONFIG_[A-Za-z0-9_]*=/) over[$1] = 1; next }
		!($0 ~ /^CONFIG_[A-Za-z0-9_]*=/ && ($1 in over))
	' "$o" "$merged" > "$merged.new"
	grep '^CONFIG_' "$o" >> "$merged.new"
	mv "$merged.new" "$merged"
done
tar -C "$tree.tmp" --strip-components=1 -xf "$src_tar"
cd "$tree.tmp"
make -s "${PEERMEM_KMAKE_ARGS[@]}" allnoconfig >&2
scripts/kconfig/merge_config.sh -m .config "$merged" >&2
make -s "${PEERMEM_KMAKE_ARGS[@]}" olddefconfig >&2

# Every option the fragment asks for must have survived olddefconfig.
missing=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=n) opt="${line%%=*}"
		if grep -q "^$opt=" .config; then
			echo "config: $opt still set" >&2; missing=1
		fi ;;
	CONFIG_*=*) if ! grep -qxF "$line" .config; then
			echo "config: wanted '$line', got '$(grep "^${line%%=*}=" .config || echo unset)'" >&2
			missing=1
		fi ;;
	esac
done < "$merged"
if [ "$missing" = 1 ] && [ "${PEERMEM_ALLOW_CONFIG_DRIFT:-0}" != 1 ]; then
	echo "error: the config fragment does not apply cleanly (see above)" >&2
	exit 1
fi

make -s "${PEERMEM_KMAKE_ARGS[@]}" rustavailable >&2
if [ "$flavour" = prepare ]; then
	make "${PEERMEM_KMAKE_ARGS[@]}" -j"$(nproc)" modules_prepare >&2
else
	make "${PEERMEM_KMAKE_ARGS[@]}" -j"$(nproc)" bzImage modules >&2
fi
touch .peermem-built
# The primary test kernel's build time is K, the test bed's unit of time
# (k.sh): the first build timed on this machine defines it (a later one
# may have run beside other work and would read slower).
if [ "$flavour" = test ] && [ "$PEERMEM_KERNEL" = "$PEERMEM_PRIMARY_KERNEL" ]; then
	secs=$(($(date +%s) - build_t0))
	echo "K: this machine built the $PEERMEM_KERNEL test kernel in $secs s" >&2
	"$here/k.sh" record-first "$secs" >&2
fi
cd /
rm -rf "$tree"
mv "$tree.tmp" "$tree"
echo "$tree"
