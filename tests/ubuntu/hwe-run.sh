#!/usr/bin/env bash
# The module against Ubuntu 24.04's HWE kernel series (6.17), laid out as
# its packages install it, the headers' rust link dangling: a documented
# run (docs/compatibility.md), not part of make test.
#   tests/ubuntu/hwe-run.sh
# The kernel is built only as far as external modules need (build-kernel.sh
# prepare): no vmlinux, so no Module.symvers of the kernel's own exports,
# and modpost is told to let those go (KBUILD_MODPOST_WARN=1); every other
# step is the one make test runs on 7.1-ubuntu (tests/ubuntu/build-modules.sh):
# the compat probes against the .rmeta, the exports and CRCs of the
# installed nvidia.ko and DOCA-OFED's ib_uverbs.ko.zst, dkms from the DKMS tree and
# from the Debian package, the kernel's rustc as rustc-<major.minor>.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
export PEERMEM_KERNEL=6.17-ubuntu-hwe
# shellcheck source=../kernel/toolchain.sh
. tests/kernel/toolchain.sh
kdir=$(tests/kernel/build-kernel.sh prepare)
tree=$repo/$PEERMEM_MODULE_TREE_REL
mkdir -p "$tree"
tar -cf - --exclude='*.o' --exclude='.*.cmd' --exclude='*.mod*' --exclude='*.ko' \
	--exclude='*_generated.rs' --exclude='compat*.cfg' --exclude=Module.symvers --exclude=modules.order \
	VERSION Kbuild kmod ffi tests/fixtures | tar -C "$tree" -xf -
for d in tests/fixtures tests/fixtures/pd_exports tests/fixtures/driver-copy; do
	make -s -C "$kdir" M="$tree/$d" "${PEERMEM_KMAKE_ARGS[@]}" KBUILD_MODPOST_WARN=1 -j"$(nproc)" modules
done
[ -x target/release/peermem-check ] || cargo build -q --release -p peermem-check
PEERMEM_UBUNTU_LAYOUT=hwe PEERMEM_KMAKE_ARGS=KBUILD_MODPOST_WARN=1 \
	tests/ubuntu/build-modules.sh "$kdir" "$tree"
root=$tree/build/ubuntu-root
kver=$(cat "$kdir/include/config/kernel.release")
echo "--- the layout"
ls -l "$root/usr/src/linux-headers-$kver/rust"
echo "--- what the builds decided"
grep -hE "^RUST_LIB=|^nvidia_peermem_rs: kernel crate probes|^nvidia-peermem-rs: " \
	"$tree"/build/ubuntu-logs/make-*.log | sort -u
for ko in "$tree/nvidia_peermem_rs.ko" "$tree/build/dropin/nvidia-peermem.ko"; do
	echo "$ko: vermagic '$(modinfo -F vermagic "$ko")', depends '$(modinfo -F depends "$ko")'"
done
