#!/usr/bin/env bash
# NVIDIA's own nvidia-peermem sources and headers, from Debian's package of
# NVIDIA's open kernel modules (nvidia-open-kernel-dkms, component contrib),
# for each version in tests/nvidia/versions. Nothing is installed: apt reads
# a sources list of our own (written here, naming the contrib component of
# the Debian mirror this host's apt uses) into lists of our own, downloads
# the .deb, and the files we need are extracted into the cache:
#   $PEERMEM_CACHE/nvidia-src/<upstream version>/
#       nvidia/nv-p2p.h  nvidia-peermem/{nvidia-peermem.c,nv-p2p.h,peer_mem.h,
#       nvidia-peermem.Kbuild}  common/inc/conftest.h  conftest.sh  Kbuild  Makefile
# laid out as the package's /usr/src/nvidia-current-open-<version>/, so
# NVIDIA_SRC=<that directory> builds the module as against the package.
#
#   fetch-nvidia-src.sh          fetch what is not cached yet (a warm run
#                                downloads nothing); print nothing on stdout
#   fetch-nvidia-src.sh --list   the cached trees, "<version> <dir>" a line;
#                                fails (naming what is missing) if any is
#
# A failed download is an error with its reason, never a silent skip: the
# ABI oracle of `make test` needs these trees. PEERMEM_DEBIAN_MIRROR=<uri>
# overrides the mirror taken from apt's configuration.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../kernel/toolchain.sh
. "$here/../kernel/toolchain.sh"
root=${PEERMEM_NVIDIA_SRC_ROOT:-$PEERMEM_CACHE/nvidia-src}
pkg=nvidia-open-kernel-dkms
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

die() {
	echo "fetch-nvidia-src: error: $*" >&2
	exit 1
}

# "<upstream> <suite>" of each version, comments dropped.
versions() {
	sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/versions"
}

if [ "${1:-}" = --list ]; then
	missing=()
	while read -r up _; do
		if [ -f "$root/$up/.peermem-fetched" ]; then
			echo "$up $root/$up"
		else
			missing+=("$up")
		fi
	done < <(versions)
	[ ${#missing[@]} = 0 ] ||
		die "NVIDIA sources not fetched: ${missing[*]} (run tests/nvidia/fetch-nvidia-src.sh or make deps)"
	exit 0
fi

todo=()
while read -r up suite; do
	[ -f "$root/$up/.peermem-fetched" ] || todo+=("$up:$suite")
done < <(versions)
if [ ${#todo[@]} = 0 ]; then
	echo "nvidia-src: cached ($(versions | cut -f1 | tr '\n' ' ')in $root)" >&2
	exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	die "needs apt-get and dpkg-deb (Debian) to fetch $pkg"
fi
[ -f "$keyring" ] || die "$keyring missing (apt-get install debian-archive-keyring)"

# The Debian mirror: the one apt uses for this host's release.
mirror=${PEERMEM_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# shellcheck disable=SC2016 # apt's format fields, not shell
	mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
		awk -v c="$codename" '$2 == c && $1 !~ /security/ { print $1; exit }')
fi
[ -n "$mirror" ] ||
	die "no Debian mirror in apt's configuration; set PEERMEM_DEBIAN_MIRROR=<URI of the Debian archive>"

apt=$root/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
: >"$apt/sources.list"
for s in $(versions | awk '{ print $2 }' | sort -u); do
	echo "deb [signed-by=$keyring] $mirror $s contrib" >>"$apt/sources.list"
done
aptopts=(-q -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)

echo "nvidia-src: fetching $pkg ${todo[*]} (contrib of $mirror, download only)" >&2
if ! apt-get "${aptopts[@]}" update >"$apt/update.log" 2>&1 ||
	grep -qE '^(W|E): (Failed|Some index files failed)' "$apt/update.log"; then
	grep -E '^(W|E):' "$apt/update.log" | sed 's/^/  /' >&2
	die "apt-get update of $apt/sources.list failed (offline? the sources are fetched once, then cached in $root)"
fi

tmp=$(mktemp -d "$root/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for item in "${todo[@]}"; do
	up=${item%%:*}
	suite=${item#*:}
	# Whatever Debian revision of this upstream version the suite carries.
	deb=$(apt-cache "${aptopts[@]}" madison "$pkg" |
		awk -F' *[|] *' -v u="$up" 'index($2, u "-") == 1 { print $2 }' | sort -V | tail -n 1)
	if [ -z "$deb" ]; then
		die "$pkg $up is not in $suite/contrib of $mirror (there: $(apt-cache "${aptopts[@]}" \
			madison "$pkg" | awk -F' *[|] *' '{ printf "%s ", $2 }')); update tests/nvidia/versions"
	fi
	(cd "$tmp" && apt-get "${aptopts[@]}" download "$pkg=$deb" >"$tmp/download.log" 2>&1) || {
		sed 's/^/  /' "$tmp/download.log" >&2
		die "apt-get download $pkg=$deb failed: see above"
	}
	file=$(ls "$tmp"/"${pkg}_"*.deb)
	sum=$(sha256sum "$file" | cut -d' ' -f1)
	mkdir -p "$tmp/x"
	dpkg-deb --fsys-tarfile "$file" | tar -C "$tmp/x" -x --wildcards \
		'./usr/src/*/nvidia/nv-p2p.h' './usr/src/*/nvidia-peermem/*' \
		'./usr/src/*/common/inc/conftest.h' './usr/src/*/conftest.sh' \
		'./usr/src/*/Kbuild' './usr/src/*/Makefile' ||
		die "$file: cannot extract NVIDIA's sources"
	src=$(ls -d "$tmp"/x/usr/src/*/)
	for f in nvidia/nv-p2p.h nvidia-peermem/nvidia-peermem.c nvidia-peermem/peer_mem.h; do
		[ -f "$src/$f" ] || die "$pkg $deb has no $f"
	done
	printf 'package %s %s\nsuite %s\nsha256 %s\ntree %s\n' "$pkg" "$deb" "$suite" "$sum" \
		"/usr/src/$(basename "$src")" >"$src/.peermem-fetched"
	rm -rf "${root:?}/$up"
	mv "$src" "$root/$up"
	rm -rf "$tmp/x" "$file"
	echo "nvidia-src: $pkg $deb -> $root/$up" >&2
done
