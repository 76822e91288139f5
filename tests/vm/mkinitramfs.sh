#!/usr/bin/env bash
# Pack the test VM's initramfs: busybox, /init, every suite and scenario,
# every module built in the repository, and the static test binaries.
#   mkinitramfs.sh OUT.cpio.gz KDIR
# PEERMEM_VM_EXTRA=DIR adds DIR's contents under /extra.
set -euo pipefail
out=$1
kdir=$2
repo="$(cd "$(dirname "$0")/../.." && pwd)"
release=$(cat "$kdir/include/config/kernel.release")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc,suites,scenarios,extra}
mkdir -p "$stage/lib/modules/$release/extra"
cp /bin/busybox "$stage/bin/busybox"
ln -s busybox "$stage/bin/sh"
cp "$repo/tests/vm/guest-init.sh" "$stage/init"
chmod 755 "$stage/init"
cp "$repo"/tests/vm/suites/*.suite "$stage/suites/" 2>/dev/null || true
cp "$repo"/tests/vm/selftest/*.suite "$stage/suites/" 2>/dev/null || true
cp "$repo"/tests/vm/soak-suites/*.suite "$stage/suites/" 2>/dev/null || true
cp "$repo"/tests/vm/check/*.suite "$stage/suites/" 2>/dev/null || true
cp "$repo"/tests/bench/*.suite "$stage/suites/" 2>/dev/null || true
cp "$repo"/tests/scenarios/*.sh "$stage/scenarios/"
cp -r "$repo"/tests/scenarios/data "$stage/scenarios/" 2>/dev/null || true

# Every module the build produced (the product, its KUnit module, fixtures).
n=0
while IFS= read -r ko; do
	cp "$ko" "$stage/lib/modules/$release/extra/"
	n=$((n + 1))
done < <(find "$repo" -name '*.ko' -not -path "$repo/target/*" \
	-not -path "$repo/results/*" -not -path "$repo/build/*" -not -path "$repo/.git/*")

# The drop-in (nvidia-peermem.ko) where DKMS installs it, so the guest's
# depmod/modprobe find it by NVIDIA's module name.
if [ -f "$repo/build/dropin/nvidia-peermem.ko" ]; then
	mkdir -p "$stage/lib/modules/$release/updates/dkms"
	cp "$repo/build/dropin/nvidia-peermem.ko" "$stage/lib/modules/$release/updates/dkms/"
fi

for bin in simtest peermem-check; do
	p="$repo/target/x86_64-unknown-linux-gnu/release/$bin"
	if [ -x "$p" ]; then
		cp "$p" "$stage/bin/$bin"
	fi
done
if [ -n "${PEERMEM_VM_EXTRA:-}" ] && [ -d "$PEERMEM_VM_EXTRA" ]; then
	cp -r "$PEERMEM_VM_EXTRA"/. "$stage/extra/"
fi

(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
echo "initramfs: $out ($n modules, kernel $release)" >&2
