#!/usr/bin/env bash
# Install the fixtures where Ubuntu 26.04's packages put the modules they
# stand in for, as .ko.zst files only (no source or build tree beside them):
#   install-modules.sh <sysroot> <kernel release> <fixtures dir>
#
#   nvidia_p2p_sim.ko -> lib/modules/<v>/kernel/nvidia-580/nvidia.ko.zst
#                        (linux-modules-nvidia-580-generic, the precompiled
#                        driver: exports nvidia_p2p_*)
#   peerdirect_sim.ko -> lib/modules/<v>/updates/doca-ofed/ib_core.ko.zst
#                        (linux-modules-doca-ofed-*-generic: DOCA-OFED's
#                        ib_core, exports ib_register_peer_memory_client)
#
# then depmod, so that `modinfo -k <v> nvidia` and `... ib_core` find them
# as on a node. The file names are the real modules'; the module names
# inside stay the fixtures' (what the VM loads).
set -euo pipefail
root=${1:?usage: install-modules.sh <sysroot> <kernel release> <fixtures dir>}
kver=${2:?}
fx=${3:?}
mods=$root/lib/modules/$kver
install_zst() {
	mkdir -p "$(dirname "$2")"
	zstd -q -f -19 "$1" -o "$2"
}
install_zst "$fx/nvidia_p2p_sim.ko" "$mods/kernel/nvidia-580/nvidia.ko.zst"
install_zst "$fx/peerdirect_sim.ko" "$mods/updates/doca-ofed/ib_core.ko.zst"
depmod -b "$root" "$kver"
for m in nvidia ib_core; do
	modinfo -b "$root" -k "$kver" -F filename "$m" >/dev/null ||
		{ echo "install-modules: depmod does not find $m" >&2; exit 1; }
done
