#!/usr/bin/env bash
# Pack the test VM's initramfs: busybox, /init, every suite and scenario,
# every module built in the repository, and the static test binaries.
#   mkinitramfs.sh OUT.cpio KDIR
# PEERMEM_VM_EXTRA=DIR adds DIR's contents under /extra.
# PEERMEM_VM_MODULES=DIR takes the modules from DIR (a copy of the tree
# built against another kernel: make bench's production kernel) instead of
# the repository's in-tree build.
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
# PEERMEM_VM_SUITES=DIR: its suites replace the same-named ones (a kernel
# of the matrix that lacks a detector some tooth needs, tests/run-tests.sh).
if [ -n "${PEERMEM_VM_SUITES:-}" ]; then
	cp "$PEERMEM_VM_SUITES"/*.suite "$stage/suites/"
fi
cp "$repo"/tests/scenarios/*.sh "$stage/scenarios/"
cp -r "$repo"/tests/scenarios/data "$stage/scenarios/" 2>/dev/null || true
cp -r "$repo"/tests/scenarios/rel_race "$stage/scenarios/"
# The splat signatures of the verdict, for the scenarios' own checks.
mkdir -p "$stage/etc/peermem"
"${PEERMEM_VM_VERDICT:-$repo/target/release/vm-verdict}" splat-regex >"$stage/etc/peermem/splat.re" ||
	{ echo "mkinitramfs: vm-verdict splat-regex failed" >&2; exit 1; }

# Every module the build produced (the product, its KUnit module, fixtures).
# A kernel of the matrix other than the primary one (make ... KERNEL=<id>,
# PEERMEM_KERNEL=<id>): its modules are in build/kernel-<id>
# (tests/build-all.sh).
# shellcheck source=../kernel/toolchain.sh
. "$repo/tests/kernel/toolchain.sh"
# PEERMEM_VM_MODULES given by the caller (not the other kernel's tree):
# only the modules found there.
modules_given=${PEERMEM_VM_MODULES:-}
if [ -z "${PEERMEM_VM_MODULES:-}" ] && [ "$PEERMEM_MODULE_TREE_REL" != . ]; then
	PEERMEM_VM_MODULES=$repo/$PEERMEM_MODULE_TREE_REL
fi
modroot=${PEERMEM_VM_MODULES:-$repo}
n=0
while IFS= read -r ko; do
	cp "$ko" "$stage/lib/modules/$release/extra/"
	n=$((n + 1))
done < <(find "$modroot" -name '*.ko' -not -path "$modroot/target/*" \
	-not -path "$modroot/results/*" -not -path "$modroot/build/*" -not -path "$modroot/.git/*" \
	-not -path "$modroot/tests/fixtures/driver-copy/*")

# PEERMEM_REAL_CORE_KO=FILE: MLNX_OFED's real PeerDirect core, built as
# peerdirect_sim.ko (tests/realcore/), in place of the simulated core.
if [ -n "${PEERMEM_REAL_CORE_KO:-}" ]; then
	cp "$PEERMEM_REAL_CORE_KO" "$stage/lib/modules/$release/extra/peerdirect_sim.ko"
	# It exports its generation's symbols itself: the simulator's stand-ins
	# (tests/fixtures/pd_exports/pd_exports.h) would clash with them.
	rm -f "$stage/lib/modules/$release/extra/"pd_exports_*.ko
fi
# The simulated core's export stand-ins each export the same symbols, one
# module a generation: out of depmod's tree, or modprobe would take them
# all as providers of a client's optional (weak) references and load them
# together. The scenarios insmod the one they want (lib.sh pd_exports).
mkdir -p "$stage/fixtures"
for ko in "$stage/lib/modules/$release/extra/"pd_exports_*.ko; do
	if [ -f "$ko" ]; then
		mv "$ko" "$stage/fixtures/"
	fi
done

# NVIDIA's own nvidia-peermem of each fetched release, built against the
# fixtures (tests/nvidia/build-nvidia-peermem.sh: nvidia_peermem_<major>.ko,
# client=nv<major>); make bench builds them under its module tree.
if [ -z "${PEERMEM_VM_MODULES:-}" ]; then
	for ko in "$repo"/build/nvidia-peermem/*/nvidia_peermem_*.ko; do
		[ -f "$ko" ] || continue
		cp "$ko" "$stage/lib/modules/$release/extra/"
		n=$((n + 1))
	done
fi

# The test build (delay points in the module's own race windows), out of
# depmod's tree: the scenarios that hold such a window open insmod it from
# there (lib.sh mod_path with PM_TEST_BUILD=1).
if [ -z "$modules_given" ] && [ -f "$modroot/build/test-delays/nvidia_peermem_rs.ko" ]; then
	mkdir -p "$stage/fixtures/test-delays"
	cp "$modroot/build/test-delays/nvidia_peermem_rs.ko" "$stage/fixtures/test-delays/"
fi

# The drop-in (nvidia-peermem.ko) where DKMS installs it, and the stand-in
# for the driver's own copy where NVIDIA's installer puts it, so the
# guest's depmod/modprobe choose between them by NVIDIA's module name
# (tests/build-all.sh builds both for each kernel of the matrix).
if [ -z "$modules_given" ] && [ -f "$modroot/build/dropin/nvidia-peermem.ko" ]; then
	mkdir -p "$stage/lib/modules/$release/updates/dkms"
	cp "$modroot/build/dropin/nvidia-peermem.ko" "$stage/lib/modules/$release/updates/dkms/"
fi
if [ -z "$modules_given" ] && [ -f "$modroot/tests/fixtures/driver-copy/nvidia-peermem.ko" ]; then
	mkdir -p "$stage/lib/modules/$release/kernel/drivers/video"
	cp "$modroot/tests/fixtures/driver-copy/nvidia-peermem.ko" \
		"$stage/lib/modules/$release/kernel/drivers/video/"
fi
# The legacy nv_peer_mem's stand-in, outside /lib/modules: no depmod or
# doctor of another scenario should find it, only module_name_taken.
if [ -z "$modules_given" ] && [ -f "$modroot/tests/fixtures/driver-copy/nv_peer_mem.ko" ]; then
	mkdir -p "$stage/extra/standins"
	cp "$modroot/tests/fixtures/driver-copy/nv_peer_mem.ko" "$stage/extra/standins/"
fi

# An Ubuntu-shaped kernel's module tree as a node has it
# (tests/ubuntu/build-modules.sh: both RDMA stacks, NVIDIA's precompiled
# driver and stub, what dkms installed, the node's depmod.d), without the
# headers, at /ubuntu-layout: module_ubuntu_layout resolves and loads the
# module through it with kmod's tools.
ulayout=$modroot/build/ubuntu-root
if [ -z "$modules_given" ] && [ -d "$ulayout/lib/modules/$release" ]; then
	mkdir -p "$stage/ubuntu-layout"
	tar -C "$ulayout" --exclude="lib/modules/$release/build" -cf - "lib/modules/$release" etc |
		tar -C "$stage/ubuntu-layout" -xf -
	cp "$repo/tests/ubuntu/check-layout.sh" "$stage/ubuntu-layout/"
fi

# kmod's depmod and modprobe as a node has them (busybox's depmod has no
# search order: which of two same-named modules wins is chance there). At
# /opt/kmod, so every other scenario keeps busybox's; module_dropin uses
# them, and module_other_process kmod's rmmod, whose refusal of a module in
# use is the one a node's user reads. The binary is dynamic: its libraries
# and loader come along.
if [ -x /usr/bin/kmod ]; then
	mkdir -p "$stage/opt/kmod"
	cp /usr/bin/kmod "$stage/opt/kmod/kmod"
	ln -sf kmod "$stage/opt/kmod/depmod"
	ln -sf kmod "$stage/opt/kmod/modprobe"
	ln -sf kmod "$stage/opt/kmod/rmmod"
	ln -sf kmod "$stage/opt/kmod/modinfo"
	ldd /usr/bin/kmod | grep -o '/[^ ]*' | while read -r lib; do
		mkdir -p "$stage$(dirname "$lib")"
		cp -L "$lib" "$stage$lib"
	done
	# what kmod's depmod reads besides the modules (it warns without them)
	for f in modules.builtin modules.builtin.modinfo modules.order; do
		if [ -f "$kdir/$f" ]; then cp "$kdir/$f" "$stage/lib/modules/$release/"; fi
	done
fi

copy_libs() {
	ldd "$1" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
		[ -e "$stage$lib" ] && continue
		mkdir -p "$stage$(dirname "$lib")"
		cp -L "$lib" "$stage$lib"
	done
}
if [ -x "$repo/target/x86_64-unknown-linux-gnu/release/simtest" ]; then
	cp "$repo/target/x86_64-unknown-linux-gnu/release/simtest" "$stage/bin/simtest"
fi
# peermem-check as users build it (dynamically linked; libibverbs and
# libcuda are opened at run time, so it starts without them) with the
# libraries it links: doctor and --backend sim everywhere, the real verbs
# backend in suite verbs.
if [ -x "$repo/target/release/peermem-check" ]; then
	cp "$repo/target/release/peermem-check" "$stage/bin/peermem-check"
	copy_libs "$repo/target/release/peermem-check"
fi
# rdma-core's userspace for suite verbs (issue 14), from Debian's packages
# (scripts/deps.sh installs them): iproute2's ip and rdma, libibverbs' tools,
# perftest's ib_write_bw/ib_read_bw and the rxe provider, at /opt/rdma/bin
# with every library they load (peermem-check there too: a link to /bin's).
rxe_provider=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -n 1)
if [ -n "$rxe_provider" ] && [ -x /usr/bin/ib_write_bw ]; then
	mkdir -p "$stage/opt/rdma/bin" "$stage/etc/libibverbs.d" "$stage$(dirname "$rxe_provider")"
	for bin in /usr/bin/ip /usr/bin/rdma /usr/bin/ibv_devices /usr/bin/ibv_devinfo \
		/usr/bin/ib_write_bw /usr/bin/ib_read_bw; do
		[ -x "$bin" ] || continue
		cp "$bin" "$stage/opt/rdma/bin/"
		copy_libs "$bin"
	done
	[ -x "$stage/bin/peermem-check" ] && ln -s /bin/peermem-check "$stage/opt/rdma/bin/peermem-check"
	cp -L "$rxe_provider" "$stage$rxe_provider"
	copy_libs "$rxe_provider"
	cp /etc/libibverbs.d/rxe.driver "$stage/etc/libibverbs.d/"
fi

if [ -n "${PEERMEM_VM_EXTRA:-}" ] && [ -d "$PEERMEM_VM_EXTRA" ]; then
	cp -r "$PEERMEM_VM_EXTRA"/. "$stage/extra/"
fi

# Uncompressed: the guest unpacked the gzip -1 archive in ~2.3 s of every
# boot under TCG, the plain one (22 MB) in ~0.9 s.
(cd "$stage" && find . | cpio -o -H newc --quiet) > "$out"
echo "initramfs: $out ($n modules, kernel $release)" >&2
