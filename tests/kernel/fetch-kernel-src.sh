#!/usr/bin/env bash
# The source of a kernel of tests/kernel/kernels that Debian 12 does not
# carry: Debian's linux-source-<x.y> package of the version the table names,
# from the suite of Debian's archive that has it (sid, experimental),
# downloaded only (nothing installed), its tarball kept in
# $PEERMEM_CACHE/src:
#   fetch-kernel-src.sh <id>
# A warm run downloads nothing. A failed download is an error with its
# reason. PEERMEM_DEBIAN_MIRROR=<uri> overrides the mirror.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PEERMEM_KERNEL=${1:?usage: fetch-kernel-src.sh <kernel id of tests/kernel/kernels>}
# shellcheck source=toolchain.sh
. "$here/toolchain.sh"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
die() {
	echo "fetch-kernel-src: error: $*" >&2
	exit 1
}
tar_out=$PEERMEM_KERNEL_SRC_TAR
if [ -f "$tar_out" ]; then
	echo "kernel $PEERMEM_KERNEL source: cached ($tar_out)" >&2
	exit 0
fi
spec=$(peermem_kernel_field "$PEERMEM_KERNEL" 4)
pkg=${spec%%=*}
want=${spec#*=}
[ "$pkg" != "$spec" ] || die "kernel $PEERMEM_KERNEL: no pinned Debian package version in $PEERMEM_KERNELS_TABLE"
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	die "needs apt-get and dpkg-deb (Debian)"
fi
[ -f "$keyring" ] || die "$keyring missing (apt-get install debian-archive-keyring)"
mirror=${PEERMEM_DEBIAN_MIRROR:-http://deb.debian.org/debian/}

apt=$PEERMEM_CACHE/apt-kernels
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$(dirname "$tar_out")"
printf "deb [signed-by=%s] %s %s main\n" "$keyring" "$mirror" sid "$keyring" "$mirror" experimental \
	>"$apt/sources.list"
aptopts=(-q -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
echo "kernel $PEERMEM_KERNEL source: fetching $pkg=$want (sid/experimental of $mirror, download only)" >&2
if ! apt-get "${aptopts[@]}" update >"$apt/update.log" 2>&1 ||
	grep -qE '^(W|E): (Failed|Some index files failed)' "$apt/update.log"; then
	grep -E '^(W|E):' "$apt/update.log" | sed 's/^/  /' >&2
	die "apt-get update of $apt/sources.list failed (offline?)"
fi
tmp=$(mktemp -d "$apt/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get "${aptopts[@]}" download "$pkg=$want" >"$tmp/download.log" 2>&1) || {
	sed 's/^/  /' "$tmp/download.log" >&2
	die "apt-get download $pkg=$want failed (there: $(apt-cache "${aptopts[@]}" madison "$pkg" |
		awk -F' *[|] *' '{ printf "%s ", $2 }')); update $PEERMEM_KERNELS_TABLE"
}
deb=$(ls "$tmp"/"${pkg}"_*.deb)
dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$pkg.tar.xz" >"$tmp/src.tar.xz" ||
	die "$deb has no /usr/src/$pkg.tar.xz"
mv "$tmp/src.tar.xz" "$tar_out"
echo "kernel $PEERMEM_KERNEL source: $pkg $want ($(sha256sum "$deb" | cut -c1-16)...) -> $tar_out" >&2
