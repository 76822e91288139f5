#!/usr/bin/env bash
# The source of a kernel of tests/kernel/kernels that Debian 12 does not
# carry, downloaded from the suites of Debian's archive that have it (sid,
# experimental, trixie-backports; nothing installed), its tarball kept in
# $PEERMEM_CACHE/src:
#   fetch-kernel-src.sh <id>
# The table's fourth column says where Debian has it:
#   linux-source-7.2  the binary package: the tarball it carries
#   linux@7.1         the source package linux: the orig tarball of a 7.1.x
# Either way the newest version the archive lists is tried first, then the
# next: an index can list versions whose files are already gone, so the
# choice is made by what actually downloads. A warm run downloads nothing.
# A failed download is an error with its reason.
# PEERMEM_DEBIAN_MIRROR=<uri> overrides the mirror.
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
case $spec in
*@*) kind=orig pkg=${spec%@*} series=${spec#*@} ;;
*=*) die "kernel $PEERMEM_KERNEL: '$spec' pins a revision; name the package (linux-source-X.Y) or the series (linux@X.Y) in $PEERMEM_KERNELS_TABLE" ;;
*) kind=binary pkg=$spec series= ;;
esac
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	die "needs apt-get and dpkg-deb (Debian)"
fi
[ -f "$keyring" ] || die "$keyring missing (apt-get install debian-archive-keyring)"
mirror=${PEERMEM_DEBIAN_MIRROR:-http://deb.debian.org/debian/}

apt=$PEERMEM_CACHE/apt-kernels
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$(dirname "$tar_out")"
for suite in sid experimental trixie-backports; do
	printf "deb [signed-by=%s] %s %s main\n" "$keyring" "$mirror" "$suite"
	printf "deb-src [signed-by=%s] %s %s main\n" "$keyring" "$mirror" "$suite"
done >"$apt/sources.list"
aptopts=(-q -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
echo "kernel $PEERMEM_KERNEL source: $spec from $mirror (download only)" >&2
if ! apt-get "${aptopts[@]}" update >"$apt/update.log" 2>&1 ||
	grep -qE '^(W|E): (Failed|Some index files failed)' "$apt/update.log"; then
	grep -E '^(W|E):' "$apt/update.log" | sed 's/^/  /' >&2
	die "apt-get update of $apt/sources.list failed (offline?)"
fi
# Every version the index lists, newest first (a source package: those of
# the series only).
if [ "$kind" = binary ]; then
	mapfile -t versions < <(apt-cache "${aptopts[@]}" madison "$pkg" |
		awk -F' *[|] *' '$3 ~ /Packages/ { print $2 }' | sort -urV)
else
	mapfile -t versions < <(apt-cache "${aptopts[@]}" showsrc "$pkg" |
		awk -v s="$series" '$1 == "Version:" && index($2, s ".") == 1 { print $2 }' | sort -urV)
fi
[ "${#versions[@]}" -gt 0 ] || die "the archive lists no $spec"
tmp=$(mktemp -d "$apt/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tried=()
for v in "${versions[@]}"; do
	rm -rf "${tmp:?}"/*
	if [ "$kind" = binary ]; then
		if (cd "$tmp" && apt-get "${aptopts[@]}" download "$pkg=$v" >"$tmp/download.log" 2>&1); then
			deb=$(ls "$tmp"/"${pkg}"_*.deb)
			dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$pkg.tar.xz" >"$tmp/src.tar.xz" ||
				die "$deb has no /usr/src/$pkg.tar.xz"
			mv "$tmp/src.tar.xz" "$tar_out"
			echo "kernel $PEERMEM_KERNEL source: $pkg $v ($(sha256sum "$deb" | cut -c1-16)...) -> $tar_out" >&2
			exit 0
		fi
	else
		# The orig tarball only (apt checks it against the .dsc's sums).
		if (cd "$tmp" && apt-get "${aptopts[@]}" --download-only --tar-only source "$pkg=$v" \
			>"$tmp/download.log" 2>&1); then
			orig=$(ls "$tmp"/"${pkg}"_*.orig.tar.xz 2>/dev/null | head -n 1)
			if [ -n "$orig" ]; then
				mv "$orig" "$tar_out"
				echo "kernel $PEERMEM_KERNEL source: $(basename "$orig") (linux $v) -> $tar_out" >&2
				exit 0
			fi
		fi
	fi
	tried+=("$v: $(grep -m1 -E '^(E|Err):' "$tmp/download.log" | cut -c1-120)")
	echo "kernel $PEERMEM_KERNEL source: $pkg $v did not download, trying an older one" >&2
done
printf '  %s\n' "${tried[@]}" >&2
die "no version of $spec downloads (tried ${#versions[@]})"
