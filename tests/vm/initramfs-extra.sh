#!/usr/bin/env bash
# initramfs-extra.sh BASE DIR OUT: OUT = the initramfs BASE with DIR's
# contents added under /extra, as a second cpio archive after BASE's (the
# kernel unpacks concatenated archives in order). make test packs the
# initramfs before the packaging checks have made their files, and boots
# packaging.suite with this one once they have.
set -euo pipefail
base=$1
dir=$2
out=$3
[ -f "$base" ] || { echo "initramfs-extra: no initramfs $base" >&2; exit 2; }
[ -d "$dir" ] || { echo "initramfs-extra: no folder $dir" >&2; exit 2; }
stage=$(mktemp -d /tmp/peermem-extra.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/extra"
cp -r "$dir"/. "$stage/extra/"
{
	cat "$base"
	(cd "$stage" && find . | cpio -o -H newc --quiet)
} >"$out.tmp"
mv "$out.tmp" "$out"
