#!/usr/bin/env bash
# Lay a built kernel tree out as Ubuntu's packages install a kernel, in a
# sysroot of its own:
#   stage-layout.sh <kernel build tree> <sysroot> [hwe]
#
#   usr/src/linux-headers-<v>/       linux-headers-<v>: what an external
#                                    module build needs (the kernel's own
#                                    scripts/package/install-extmod-build)
#                                    and .config; no Rust source of the
#                                    kernel (no rust/*.rs, no
#                                    rust/bindgen_parameters)
#   usr/src/linux-headers-<v>/rust   -> ../linux-lib-rust-<v>/rust
#   usr/src/linux-lib-rust-<v>/rust/ linux-lib-rust-<v>: the build outputs
#                                    Ubuntu's rules move there (*.rmeta,
#                                    libmacros.so, ...), no *.rs
#   lib/modules/<v>/                 the kernel's modules as modules_install
#                                    puts them (signed, .ko.zst), and
#   lib/modules/<v>/build            -> the headers
#
# hwe: the headers' rust link names ../linux-hwe-X.Y-lib-rust-<v>/rust, as
# Ubuntu's HWE headers packages do, a directory no package installs.
#
# Prints the kernel release. The fixtures standing in for the NVIDIA driver
# and DOCA-OFED are installed by install-modules.sh.
set -euo pipefail
ktree=$(cd "${1:?usage: stage-layout.sh <kernel tree> <sysroot> [hwe]}" && pwd)
root=${2:?usage: stage-layout.sh <kernel tree> <sysroot> [hwe]}
variant=${3:-}
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../kernel/toolchain.sh
. "$here/../kernel/toolchain.sh"

kver=$(cat "$ktree/include/config/kernel.release")
series=$(sed -n 's/^VERSION = //p' "$ktree/Makefile").$(sed -n 's/^PATCHLEVEL = //p' "$ktree/Makefile")
rm -rf "$root"
mkdir -p "$root/usr/src" "$root/lib/modules"
root=$(cd "$root" && pwd)
hdr=$root/usr/src/linux-headers-$kver
librust=$root/usr/src/linux-lib-rust-$kver/rust

# The headers, by the kernel's own list of what external modules need.
[ -f "$ktree/Module.symvers" ] || : >"$ktree/Module.symvers"
(cd "$ktree" && srctree=. SRCARCH=x86 MAKE=make CC="$PEERMEM_KERNEL_CC" HOSTCC="$PEERMEM_KERNEL_CC" \
	sh scripts/package/install-extmod-build "$hdr") >&2
cp "$ktree/.config" "$hdr/.config"

# linux-lib-rust: rust/'s build outputs, never its sources.
mkdir -p "$librust"
(cd "$ktree/rust" && find . -type f \( -name '*.rmeta' -o -name '*.so' -o -name '*.rlib' \
	-o -name '*.json' \) -print | tar -cf - -T -) | tar -xf - -C "$librust"
if [ "$variant" = hwe ]; then
	ln -s "../linux-hwe-$series-lib-rust-$kver/rust" "$hdr/rust"
else
	ln -s "../linux-lib-rust-$kver/rust" "$hdr/rust"
fi
# (scripts/ keeps its host tools' own .rs files, as Ubuntu's headers do.)
if find "$librust" "$hdr/" \( -path "$librust/*" -name '*.rs' \) -o -name bindgen_parameters |
	grep -q .; then
	echo "stage-layout: Rust sources left in the layout" >&2
	exit 1
fi

# The kernel's own modules, signed and compressed as Ubuntu installs them
# (none where the kernel was only prepared for external modules).
if [ -f "$ktree/modules.order" ]; then
	make -s -C "$ktree" "${PEERMEM_KMAKE_ARGS[@]}" INSTALL_MOD_PATH="$root" modules_install >&2
else
	mkdir -p "$root/lib/modules/$kver"
fi
rm -f "$root/lib/modules/$kver/build"
ln -s "../../../usr/src/linux-headers-$kver" "$root/lib/modules/$kver/build"
echo "$kver"
