#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# build-deb.sh ROOT OUT.deb NAME VERSION DEB_VERSION MAINTAINER
#
# Turns a staged `make install` tree (ROOT, installed with PREFIX=/usr) into
# the Debian package NAME-dkms of the DKMS source: adds DEBIAN/ (control,
# maintainer scripts, conffiles, md5sums), the copyright and changelog, and
# runs dpkg-deb. Needs only dpkg-deb, gzip and md5sum.
set -eu

root=$1 out=$2 name=$3 version=$4 debversion=$5 maintainer=$6
here=$(cd "$(dirname "$0")" && pwd)
pkg="$name-dkms"
doc="$root/usr/share/doc/$pkg"

[ -d "$root/usr/src/$name-$version" ] || {
	echo "build-deb: $root/usr/src/$name-$version missing (run make install DESTDIR=$root first)" >&2
	exit 1
}

install -d -m 0755 "$root/DEBIAN" "$doc"
install -m 0644 "$here/copyright" "$doc/copyright"
install -d -m 0755 "$root/usr/share/lintian/overrides"
sed -e "s/nvidia-peermem-rs-dkms/$pkg/g" "$here/lintian-overrides" \
	> "$root/usr/share/lintian/overrides/$pkg"
chmod 0644 "$root/usr/share/lintian/overrides/$pkg"
# changelog.Debian: the version and date of this build.
date=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}")
sed -e "s/@NAME@/$pkg/g" -e "s/@VERSION@/$debversion/g" \
	-e "s/@MAINTAINER@/$maintainer/g" -e "s/@DATE@/$date/g" \
	"$here/changelog.in" | gzip -9n > "$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"

for s in postinst prerm postrm; do
	sed -e "s/@NAME@/$name/g" -e "s/@VERSION@/$version/g" -e "s/@PACKAGE@/$pkg/g" \
		"$here/$s.in" > "$root/DEBIAN/$s"
	chmod 0755 "$root/DEBIAN/$s"
done

# A kernel's Rust metadata (linux-lib-rust-<kver> in /usr/src), its NVIDIA
# or DOCA-OFED modules (/lib/modules, /usr/lib/modules on merged-/usr) or
# an OFED tree (/usr/src) often arrive after the kernel, whose autoinstall
# then skipped the module: those packages' installs wake the postinst
# ("triggered"), which runs autoinstall again. noawait: nothing waits on it.
printf '%s\n' "interest-noawait /usr/src" "interest-noawait /lib/modules" \
	"interest-noawait /usr/lib/modules" > "$root/DEBIAN/triggers"
chmod 0644 "$root/DEBIAN/triggers"

# Files in /etc are the administrator's: keep their edits on upgrade.
(cd "$root" && find etc -type f | sort | sed 's|^|/|') > "$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' |
	LC_ALL=C sort | xargs md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)
# The package and the drop-in (nvidia-peermem-rs-dropin: the same module
# built as nvidia-peermem.ko) ship the same /etc and unit paths, and two
# peer-memory clients never serve at once: each conflicts with the other.
case "$name" in
*-dropin)
	other="${name%-dropin}-dkms"
	dropin=" .\n This is the drop-in build: the module is named nvidia_peermem (file\n nvidia-peermem.ko), installed by DKMS under updates/dkms, where\n \"modprobe nvidia-peermem\" picks it over the NVIDIA driver's own copy.\n Removing the package gives the driver's copy back."
	;;
*)
	other="$name-dropin-dkms"
	dropin=" .\n The module is named nvidia_peermem_rs. NCCL and UCX see it only where\n the PeerDirect core publishes /sys/kernel/mm/memory_peers (MLNX_OFED up\n to 23.07, or a kernel that exports mm_kobj); DOCA-OFED 23.10+ on Linux\n 6.6+ does not: install nvidia-peermem-rs-dropin-dkms there."
	;;
esac
sed -e "s/@PACKAGE@/$pkg/g" -e "s/@VERSION@/$debversion/g" \
	-e "s/@MAINTAINER@/$maintainer/g" -e "s/@SIZE@/$size/g" \
	-e "s/@CONFLICTS@/$other/g" \
	"$here/control.in" > "$root/DEBIAN/control"
if [ -n "$dropin" ]; then
	printf '%b\n' "$dropin" >> "$root/DEBIAN/control"
fi
chmod 0644 "$root/DEBIAN/control"

# Directories 0755, files 0644 except the executables, owned by root.
find "$root" -type d -exec chmod 0755 {} +
mkdir -p "$(dirname "$out")"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out"
