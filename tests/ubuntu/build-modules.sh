#!/usr/bin/env bash
# The module for an Ubuntu-shaped kernel of the matrix, built as a node
# builds it: from the installed layout alone (stage-layout.sh: headers
# without Rust sources, linux-lib-rust; install-modules.sh: the NVIDIA
# driver, the inbox RDMA stack and DOCA-OFED's as module files), by the
# real dkms, from the DKMS tree and from the Debian
# package, with the kernel's rustc found as Ubuntu's rustc-1.NN:
#   build-modules.sh <kernel build tree> <module tree>
# <module tree> holds the sources and the fixtures built against the kernel
# tree (tests/build-all.sh); the modules land where tests/vm/mkinitramfs.sh
# takes them: nvidia_peermem_rs.ko (dkms, DKMS tree), build/dropin/
# nvidia-peermem.ko (dkms, from the -dropin-dkms .deb, where dkms installs
# it as nvidia_peermem.ko) and
# nvidia_peermem_rs_kunit.ko and build/test-delays/nvidia_peermem_rs.ko
# (the DKMS tree's Makefile, PEERMEM_KUNIT=1 and PEERMEM_TEST_DELAYS=1,
# against the same layout). Logs: <module tree>/build/ubuntu-logs/.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
ktree=${1:?usage: build-modules.sh <kernel tree> <module tree>}
tree=$(cd "${2:?usage: build-modules.sh <kernel tree> <module tree>}" && pwd)
# shellcheck source=../kernel/toolchain.sh
. "$repo/tests/kernel/toolchain.sh"
# What dkms runs must see a node's environment, not this build's make.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
name=nvidia-peermem-rs
version=$(cat "$repo/VERSION")
root=$tree/build/ubuntu-root
logs=$tree/build/ubuntu-logs
work=$tree/build/ubuntu-dkms
rm -rf "$logs" "$work"
mkdir -p "$logs" "$work/dkms" "$work/src"
fail() {
	echo "build (Ubuntu layout): $*" >&2
	exit 1
}

# PEERMEM_UBUNTU_LAYOUT=hwe: the HWE headers' dangling rust link.
kver=$("$repo/tests/ubuntu/stage-layout.sh" "$ktree" "$root" "${PEERMEM_UBUNTU_LAYOUT:-}" 2>"$logs/stage.log") ||
	fail "staging the layout failed ($logs/stage.log)"
# The RDMA modules without PeerDirect that the node has beside DOCA-OFED's
# ib_uverbs (tests/fixtures/rdma_standin), out of the module tree the VM
# takes its modules from (nothing loads them). On a kernel only prepared
# for external modules (no vmlinux, an empty Module.symvers) modpost cannot
# check the kernel's own exports they use.
standin=$tree/build/rdma-standin
mkdir -p "$standin"
(cd "$repo/tests/fixtures/rdma_standin" && tar -cf - Kbuild ./*.c ./*.h) | tar -C "$standin" -xf -
modpost_warn=()
[ -s "$ktree/Module.symvers" ] || modpost_warn=(KBUILD_MODPOST_WARN=1)
make -s -C "$ktree" M="$standin" "${PEERMEM_KMAKE_ARGS[@]}" "${modpost_warn[@]}" modules \
	>"$logs/rdma-standin.log" 2>&1 ||
	fail "building the RDMA stand-ins failed ($logs/rdma-standin.log)"
"$repo/tests/ubuntu/install-modules.sh" "$root" "$kver" "$tree/tests/fixtures" "$standin" >"$logs/install.log" 2>&1 ||
	fail "installing the driver and RDMA stand-ins failed ($logs/install.log)"
hdr=$root/usr/src/linux-headers-$kver

# The kernel's rustc by the name Ubuntu gives it (rustc-1.93 there), ahead of
# a plain `rustc` of another version on PATH: the Makefile must pick it
# from the version the kernel records.
rustc_series=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="rustc \([0-9]*\.[0-9]*\)\..*/\1/p' "$hdr/.config")
[ -n "$rustc_series" ] || fail "$hdr/.config records no rustc version"
mkdir -p "$work/bin"
ln -sf /usr/bin/rustc "$work/bin/rustc-$rustc_series"
export PATH="$work/bin:$PATH"

# dkms in scratch trees; no signing, no host build.conf, the layout as the
# system root for every lookup.
dk() {
	env sign_file="$work/no-sign-file" PEERMEM_BUILD_CONF="$work/none" PEERMEM_SYSROOT="$root" \
		dkms "$@" --dkmstree "$work/dkms" --sourcetree "$work/src"
}
# dkms_build <dkms tree> <package name> <module file>: add, build and
# install into the layout; prints the installed module, uncompressed.
dkms_build() {
	local src=$1 pkg=$2 mod=$3 ko
	dk add "$src" >>"$logs/dkms-$pkg.log" 2>&1 || fail "dkms add $src ($logs/dkms-$pkg.log)"
	if ! dk build -m "$pkg" -v "$version" -k "$kver" --kernelsourcedir "$hdr" -j "$(nproc)" \
		>>"$logs/dkms-$pkg.log" 2>&1; then
		cp "$work/dkms/$pkg/$version/build/make.log" "$logs/make-$pkg.log" 2>/dev/null || :
		tail -n 15 "$logs/make-$pkg.log" >&2 2>/dev/null || :
		fail "dkms build of $pkg failed ($logs/make-$pkg.log)"
	fi
	cp "$work/dkms/$pkg/$version/$kver/$(uname -m)/log/make.log" "$logs/make-$pkg.log" 2>/dev/null ||
		cp "$work/dkms/$pkg/$version/build/make.log" "$logs/make-$pkg.log" 2>/dev/null || :
	dk install -m "$pkg" -v "$version" -k "$kver" --no-depmod --installtree "$root/lib/modules" \
		>>"$logs/dkms-$pkg.log" 2>&1 || fail "dkms install of $pkg ($logs/dkms-$pkg.log)"
	# (the drop-in's file may be named nvidia_peermem.ko or nvidia-peermem.ko)
	ko=$(find "$root/lib/modules/$kver/updates/dkms" -name "$(echo "$mod" | tr _- '??').ko*" | head -n 1)
	[ -n "$ko" ] || fail "dkms installed no $mod.ko"
	case $ko in
	*.zst) zstd -q -d -c "$ko" >"$work/$mod.ko" ;;
	*.xz) xz -d -c "$ko" >"$work/$mod.ko" ;;
	*) cp "$ko" "$work/$mod.ko" ;;
	esac
	echo "$work/$mod.ko"
}

echo "build: kernel $PEERMEM_KERNEL: the module by dkms from the Ubuntu layout (headers + linux-lib-rust, no kernel Rust sources)" >&2
# The named module, from the DKMS tree.
make --no-print-directory -s -f "$repo/packaging/packaging.mk" PKG_OUT="$work/pkg" PEERMEM_DROPIN=0 \
	dkms-source >"$logs/dkms-source.log" 2>&1 || fail "make dkms-source ($logs/dkms-source.log)"
named=$(dkms_build "$work/pkg/dkms/$name-$version" "$name" nvidia_peermem_rs)
# The default install: the drop-in's Debian package, as apt would unpack it.
make --no-print-directory -s -f "$repo/packaging/packaging.mk" PKG_OUT="$work/pkg" \
	PKG_TOOL_BIN="$repo/target/release/peermem-check" deb >"$logs/deb.log" 2>&1 ||
	fail "make deb ($logs/deb.log)"
deb=$(ls "$work"/pkg/"$name"-dropin-dkms_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || fail "make deb made no $name-dropin-dkms package ($logs/deb.log)"
dpkg-deb -x "$deb" "$root"
# dkms installs the drop-in as nvidia_peermem.ko (its dkms.conf's
# DEST_MODULE_NAME), beside a DKMS-built driver's nvidia-peermem.ko.
dropin=$(dkms_build "$root/usr/src/$name-dropin-$version" "$name-dropin" nvidia_peermem)

# The node as modprobe sees it once dkms installed both: depmod, which a
# node's dkms runs itself (here --no-depmod), with the node's depmod.d, the
# drop-in package's line now among it. Then the module
# resolves to DOCA-OFED's ib_uverbs and nvidia-peermem to the drop-in, and
# both builds read their PeerDirect CRCs from that ib_uverbs.
depmod -b "$root" -C "$root/etc/depmod.d" "$kver" 2>"$logs/depmod.log" || fail "depmod of the layout ($logs/depmod.log)"
"$repo/tests/ubuntu/check-layout.sh" "$root" "$kver" "$logs/make-$name.log" "$logs/make-$name-dropin.log" \
	>"$logs/layout.log" 2>&1 || { cat "$logs/layout.log" >&2; fail "the layout does not resolve as a node's would ($logs/layout.log)"; }

# The KUnit module (never packaged): the DKMS tree's Makefile, same layout
# (dkms keeps no build directory: this build's exports are compared below).
make --no-print-directory -C "$tree" -f "$repo/packaging/dkms/Makefile" KDIR="$hdr" KVER="$kver" \
	PEERMEM_SYSROOT="$root" PEERMEM_BUILD_CONF=/dev/null PEERMEM_KUNIT=1 -j"$(nproc)" modules \
	>"$logs/make-kunit.log" 2>&1 || { tail -n 15 "$logs/make-kunit.log" >&2; fail "the KUnit module ($logs/make-kunit.log)"; }
# The test build (delay points in the module's own race windows, loaded
# only by the scenarios that force them; never packaged), the same way.
mkdir -p "$tree/build/test-delays"
(cd "$repo" && tar -cf - VERSION Kbuild kmod ffi) | tar -C "$tree/build/test-delays" -xf -
make --no-print-directory -C "$tree/build/test-delays" -f "$repo/packaging/dkms/Makefile" KDIR="$hdr" \
	KVER="$kver" PEERMEM_SYSROOT="$root" PEERMEM_BUILD_CONF=/dev/null PEERMEM_TEST_DELAYS=1 \
	-j"$(nproc)" modules >"$logs/make-test-delays.log" 2>&1 ||
	{ tail -n 15 "$logs/make-test-delays.log" >&2; fail "the test build ($logs/make-test-delays.log)"; }
# The symbol versions the build recorded for its imports are the ones the
# installed modules carry (modpost's when it built them), and real ones.
for pair in "nvidia-exports nvidia_p2p_sim" "ofed-exports peerdirect_sim"; do
	read -r exports fixture <<<"$pair"
	got=$tree/.$exports/Module.symvers
	[ -f "$got" ] || fail "the build read no exports from the installed .ko ($got missing)"
	diff <(cut -f1,2 "$got" | sort) \
		<(awk -F'\t' -v m="$fixture" '$3 ~ ("(^|/)" m "$") { print $1 "\t" $2 }' "$tree/tests/fixtures/Module.symvers" | sort) \
		>"$logs/crc-$exports.diff" || fail "the CRCs read from the installed $fixture differ from modpost's ($logs/crc-$exports.diff)"
	if grep -q '^CONFIG_MODVERSIONS=y' "$hdr/.config" && grep -q '^0x00000000' "$got"; then
		fail "a CRC of 0 read from the installed $fixture on a MODVERSIONS kernel ($got)"
	fi
done

# What the builds decided, for the record.
grep -hE "^nvidia-peermem-rs: |^nvidia_peermem_rs: kernel crate probes|RUSTC=" "$logs"/make-*.log >&2 || :

# The same module with CRC 0 recorded for those exports (the column a
# build writes that does not read the installed modules' CRCs), for
# module_modversions to see the loader refuse it.
if grep -q '^CONFIG_MODVERSIONS=y' "$hdr/.config"; then
	c0=$work/crc0
	mkdir -p "$c0/nvidia" "$c0/ofed" "$tree/tests/modversions"
	(cd "$repo" && tar -cf - VERSION Kbuild kmod ffi) | tar -C "$c0" -xf -
	for exports in nvidia ofed; do
		awk -F'\t' -v OFS='\t' '{ $1 = "0x00000000"; print }' \
			"$tree/.$exports-exports/Module.symvers" >"$c0/$exports/Module.symvers"
	done
	make --no-print-directory -C "$c0" -f "$repo/packaging/dkms/Makefile" KDIR="$hdr" KVER="$kver" \
		PEERMEM_SYSROOT="$root" PEERMEM_BUILD_CONF=/dev/null NVIDIA_SRC="$c0/nvidia" OFED_DIR="$c0/ofed" \
		-j"$(nproc)" modules >"$logs/make-crc0.log" 2>&1 || fail "the CRC-0 module ($logs/make-crc0.log)"
	cp "$c0/nvidia_peermem_rs.ko" "$tree/tests/modversions/nvidia_peermem_rs_crc0.ko"
fi
cp "$named" "$tree/nvidia_peermem_rs.ko"
mkdir -p "$tree/build/dropin"
cp "$dropin" "$tree/build/dropin/nvidia-peermem.ko"
for ko in "$tree/nvidia_peermem_rs.ko" "$tree/nvidia_peermem_rs_kunit.ko" "$tree/build/dropin/nvidia-peermem.ko" \
	"$tree/build/test-delays/nvidia_peermem_rs.ko"; do
	[ -f "$ko" ] || fail "no $ko"
done
