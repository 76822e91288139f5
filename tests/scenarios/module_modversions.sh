#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# On a CONFIG_MODVERSIONS kernel (Ubuntu's) the loader compares the symbol
# version the module recorded for each import with the exporter's. The
# module dkms built from the installed nvidia.ko and DOCA-OFED's ib_uverbs.ko.zst
# recorded theirs and loads; the same module built with CRC 0 for them (the
# column a build that does not read the .ko files' CRCs writes) is refused,
# naming the symbol, and leaves nothing behind.
#   module_modversions
. /scenarios/lib.sh
. /scenarios/module_lib.sh

crc0=$(mod_path nvidia_peermem_rs_crc0)
[ -n "$crc0" ] || fail "nvidia_peermem_rs_crc0.ko is not in the initramfs (tests/ubuntu/build-modules.sh builds it)"

load_sim_stack generation=modern
dmesg -c >/dev/null
refuse "a module with CRC 0 for the P2P and PeerDirect imports loads on a MODVERSIONS kernel" \
	insmod "$crc0"
check "the loader names the symbol whose version disagrees" \
	dmesg_has "disagrees about version of symbol"
check "the refused module left nothing" test ! -d /sys/module/nvidia_peermem_rs
log "refused: $(dmesg | grep -m1 'disagrees about version of symbol')"

load_module
check "the dkms-built module is loaded" loaded nvidia_peermem_rs
check "its GPU memory round trip works" simtest roundtrip 256K --iters 2
unload nvidia_peermem_rs
unload_sim_stack
no_new_leaks
pass ops=2 leaks="$LEAKS"
