#!/bin/sh
# What a node laid out by install-modules.sh resolves, after dkms installed
# the module and the drop-in into it and depmod indexed it with the node's
# depmod.d: modprobe of the module must load DOCA-OFED's ib_uverbs (the
# PeerDirect exporter since OFED 24.07, in kernel/doca-ofed-<ver>/), never
# the inbox one beside it; modprobe nvidia-peermem must load the drop-in,
# not the stub NVIDIA's precompiled package ships; and each build must have
# read its PeerDirect CRCs from that same DOCA file, or the module would
# not load against the ib_uverbs a node runs.
#   check-layout.sh <sysroot> <kernel release> [make.log ...]
# (POSIX sh and kmod's modprobe/modinfo: MODPROBE, MODINFO to use others.)
set -eu
root=${1:?usage: check-layout.sh <sysroot> <kernel release> [make.log ...]}
kver=${2:?usage: check-layout.sh <sysroot> <kernel release> [make.log ...]}
shift 2
: "${MODPROBE:=modprobe}" "${MODINFO:=modinfo}"
mods=$root/lib/modules/$kver
want=$mods/kernel/doca-ofed-3.4/ib_uverbs.ko.zst
status=0
bad() {
	echo "check-layout: $*" >&2
	status=1
}

got=$($MODINFO -b "$root" -k "$kver" -n ib_uverbs 2>&1) || :
[ "$got" = "$want" ] || bad "modinfo ib_uverbs names '$got', not DOCA-OFED's $want"
deps=$($MODPROBE -d "$root" -S "$kver" -C "$root/etc/modprobe.d" --ignore-install --show-depends \
	nvidia_peermem_rs 2>&1) || :
echo "modprobe --show-depends nvidia_peermem_rs:"
echo "$deps" | sed 's/^/  /'
echo "$deps" | grep -qx "insmod $want *" ||
	bad "modprobe nvidia_peermem_rs would not load DOCA-OFED's $want"
echo "$deps" | grep -q "/kernel/drivers/infiniband/" &&
	bad "modprobe nvidia_peermem_rs would load the inbox RDMA stack"
echo "$deps" | grep -qx "insmod $mods/kernel/nvidia-580-open/nvidia.ko *" ||
	bad "modprobe nvidia_peermem_rs would not load kernel/nvidia-580-open/nvidia.ko"
got=$($MODINFO -b "$root" -k "$kver" -n nvidia-peermem 2>&1) || :
echo "modprobe nvidia-peermem -> $got"
case $got in
"$mods/updates/dkms/nvidia_peermem.ko"*) ;;
*) bad "modprobe nvidia-peermem would load '$got', not the drop-in (updates/dkms/nvidia_peermem.ko)" ;;
esac
for log in "$@"; do
	rec=$(grep -h "^nvidia-peermem-rs: built against: " "$log" | grep -v " nvidia " || :)
	echo "$(basename "$log"): ${rec:-no PeerDirect exporter recorded}"
	case $rec in
	"nvidia-peermem-rs: built against: ib_uverbs $want "*) ;;
	*) bad "the build in $log did not read its PeerDirect CRCs from DOCA-OFED's $want" ;;
	esac
done
exit "$status"
