#!/bin/sh
# The VM itself is what the suites assume: debug facilities present, the edu
# device (our simulated HCA) on the PCI bus, and the IOMMU in the mode asked.
#   vm_smoke.sh iommu=on|off
. /scenarios/lib.sh
want_iommu=off
for a in "$@"; do
	case "$a" in iommu=*) want_iommu=${a#iommu=} ;; esac
done
check "kmemleak is available" test -w /sys/kernel/debug/kmemleak
check "KUnit debugfs is available" test -d /sys/kernel/debug/kunit
check "failslab is available" test -d /sys/kernel/debug/failslab
check "lockdep is on" test -r /proc/lockdep
edu=
for d in /sys/bus/pci/devices/*; do
	if [ "$(cat "$d/vendor")" = 0x1234 ] && [ "$(cat "$d/device")" = 0x11e8 ]; then
		edu=$d
	fi
done
[ -n "$edu" ] || fail "no QEMU edu device (1234:11e8) on the PCI bus"
if [ "$want_iommu" = on ]; then
	check "an IOMMU is registered" sh -c 'ls /sys/class/iommu/ | grep -q .'
	check "the edu device is in an IOMMU group" test -e "$edu/iommu_group"
	check "the group translates (DMA domain)" grep -q DMA "$edu/iommu_group/type"
else
	refuse "no IOMMU group without iommu" test -e "$edu/iommu_group"
fi
pass edu="$(basename "$edu")" iommu="$want_iommu"
