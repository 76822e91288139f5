#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# build-tool-deb.sh BINARY ROOT OUT.deb VERSION DEB_VERSION MAINTAINER README
#
# The Debian package peermem-check: the userspace tool the documentation
# tells users to run (doctor, validate, bench), as /usr/bin/peermem-check.
# It is built apart from the DKMS package, which is Architecture: all: this
# one holds a compiled program. libibverbs and libcuda are loaded at run
# time (dlopen), so the only link-time dependencies are glibc and libgcc_s;
# rdma-core's libibverbs1 is recommended (validate and bench need it).
set -eu

bin=$1 root=$2 out=$3 version=$4 debversion=$5 maintainer=$6 readme=$7
here=$(cd "$(dirname "$0")" && pwd)
pkg=peermem-check
doc="$root/usr/share/doc/$pkg"

[ -x "$bin" ] || {
	echo "build-tool-deb: $bin missing: cargo build --release -p peermem-check first" >&2
	exit 1
}
got=$("$bin" --version)
[ "$got" = "peermem-check $version" ] || {
	echo "build-tool-deb: $bin says '$got', the package is version $version: rebuild it" >&2
	exit 1
}

rm -rf "$root"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$doc"
install -m 0755 "$bin" "$root/usr/bin/$pkg"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/$pkg"
install -m 0644 "$here/copyright" "$doc/copyright"
install -m 0644 "$readme" "$doc/README.md"
date=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}")
sed -e "s/@NAME@/$pkg/g" -e "s/@VERSION@/$debversion/g" \
	-e "s/@MAINTAINER@/$maintainer/g" -e "s/@DATE@/$date/g" \
	"$here/changelog.in" | gzip -9n >"$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' |
	LC_ALL=C sort | xargs md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

# glibc: the newest symbol version the program needs.
glibc=$(objdump -T "$root/usr/bin/$pkg" | sed -n 's/.*GLIBC_\([0-9.]*\).*/\1/p' | sort -V | tail -n 1)
arch=$(dpkg --print-architecture)
size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: libc6 (>= $glibc), libgcc-s1
Recommends: libibverbs1, ibverbs-providers
Suggests: nvidia-peermem-rs-dkms
Section: admin
Priority: optional
Description: checks and proves GPUDirect RDMA on a node
 peermem-check answers "does GPUDirect RDMA work on this node?". doctor
 checks the prerequisites (NVIDIA driver, peer-memory client, PeerDirect
 core, DKMS and systemd state, RDMA devices, IOMMU, PCIe topology, ACS,
 BAR1) and gives a fix for each problem; validate writes and reads GPU
 memory through an RDMA NIC and compares every byte; bench measures
 registration latency and bandwidth.
 .
 libibverbs and the CUDA driver library are loaded at run time: doctor
 runs without them.
EOF
chmod 0644 "$root/DEBIAN/control"
find "$root" -type d -exec chmod 0755 {} +
mkdir -p "$(dirname "$out")"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out"
