#!/usr/bin/env bash
# Install the fixtures where Ubuntu 26.04's packages put the modules they
# stand in for, as module files only (no source or build tree beside them):
#   install-modules.sh <sysroot> <kernel release> <fixtures dir> <RDMA stand-ins dir>
#
# under lib/modules/<v>/:
#   kernel/nvidia-580-open/nvidia.ko      nvidia_p2p_sim.ko: NVIDIA's
#       precompiled driver (linux-modules-nvidia-580-open-generic, whose
#       files are not compressed), exports nvidia_p2p_*
#   kernel/nvidia-580-open/nvidia-peermem.ko
#       the same package's nvidia-peermem.ko, built without an OFED tree
#       (a stub that refuses to load); here the driver-copy stand-in, only
#       for depmod to rank against the drop-in
#   kernel/drivers/infiniband/core/ib_core.ko.zst, ib_uverbs.ko.zst
#       the kernel's own RDMA stack: no PeerDirect (rdma_standin)
#   kernel/doca-ofed-3.4/ib_core.ko.zst   DOCA-OFED's ib_core
#       (linux-modules-doca-ofed-3.4-generic): no PeerDirect since OFED
#       24.07 (rdma_standin)
#   kernel/doca-ofed-3.4/ib_uverbs.ko.zst peerdirect_sim.ko: DOCA-OFED's
#       ib_uverbs, which exports ib_register_peer_memory_client since 24.07
#
# and under etc/depmod.d/ Ubuntu's search order (ubuntu.conf) and a line
# per DOCA-OFED module that makes depmod take its copy: both stacks sit in
# kernel/ at one priority, where depmod keeps whichever copy it reads first,
# and how a node gets DOCA's picked is not known (packaging/README.md tells
# the user to add these lines; the DKMS build refuses the inbox pick). Then
# depmod with that configuration, so that modinfo -k <v> and modprobe find
# what a node's would. The file names are the real modules'; the module
# names inside the fixtures stay theirs, which is what the VM loads:
# peerdirect_sim, whose CRCs the build reads from DOCA's ib_uverbs.ko.zst.
set -euo pipefail
usage="usage: install-modules.sh <sysroot> <kernel release> <fixtures dir> <RDMA stand-ins dir>"
root=${1:?$usage}
kver=${2:?$usage}
fx=${3:?$usage}
standin=${4:?$usage}
mods=$root/lib/modules/$kver
doca=kernel/doca-ofed-3.4
inbox=kernel/drivers/infiniband/core
install_ko() {
	mkdir -p "$(dirname "$2")"
	case $2 in
	*.zst) zstd -q -f -19 "$1" -o "$2" ;;
	*) cp "$1" "$2" ;;
	esac
}
install_ko "$fx/nvidia_p2p_sim.ko" "$mods/kernel/nvidia-580-open/nvidia.ko"
install_ko "$fx/driver-copy/nvidia-peermem.ko" "$mods/kernel/nvidia-580-open/nvidia-peermem.ko"
install_ko "$standin/ib_core.ko" "$mods/$inbox/ib_core.ko.zst"
install_ko "$standin/ib_uverbs.ko" "$mods/$inbox/ib_uverbs.ko.zst"
install_ko "$standin/ib_core.ko" "$mods/$doca/ib_core.ko.zst"
install_ko "$fx/peerdirect_sim.ko" "$mods/$doca/ib_uverbs.ko.zst"
mkdir -p "$root/etc/depmod.d"
echo 'search updates ubuntu built-in' >"$root/etc/depmod.d/ubuntu.conf"
printf 'override %s * %s\n' ib_core "$doca" ib_uverbs "$doca" >"$root/etc/depmod.d/doca-ofed.conf"
depmod -b "$root" -C "$root/etc/depmod.d" "$kver"
for m in nvidia ib_core ib_uverbs; do
	modinfo -b "$root" -k "$kver" -F filename "$m" >/dev/null ||
		{ echo "install-modules: depmod does not find $m" >&2; exit 1; }
done
