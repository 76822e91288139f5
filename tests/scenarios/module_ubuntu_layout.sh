#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# The Ubuntu node's module tree (tests/ubuntu/install-modules.sh, at
# /ubuntu-layout): both RDMA stacks at one depmod priority, the inbox one
# in kernel/drivers/infiniband/core/ and DOCA-OFED's in
# kernel/doca-ofed-<ver>/ with PeerDirect in its ib_uverbs (OFED 24.07 on),
# NVIDIA's precompiled driver and its nvidia-peermem stub in
# kernel/nvidia-580-open/, and what dkms installed. The guest's own kmod
# indexes it with the node's depmod.d; then the module's dependency must
# resolve to DOCA-OFED's ib_uverbs (check-layout.sh), nvidia-peermem to the
# drop-in, and modprobe must load the module through that tree: DOCA's
# ib_uverbs.ko.zst (the simulated core, built as peerdirect_sim) and
# nvidia.ko (the simulated provider) first, then the module, whose symbol
# versions were read from those files. A GPU memory round trip through it
# passes, and it all unloads leaving nothing.
#   module_ubuntu_layout
. /scenarios/lib.sh
. /scenarios/module_lib.sh

lay=/ubuntu-layout
rel=$(uname -r)
[ -d "$lay/lib/modules/$rel" ] ||
	fail "no Ubuntu layout for $rel in the VM (tests/ubuntu/build-modules.sh stages it, mkinitramfs.sh copies it)"
[ -x /opt/kmod/modprobe ] || fail "kmod's modprobe is not in the VM (/opt/kmod)"

check "the guest's depmod indexes the layout with the node's depmod.d" \
	/opt/kmod/depmod -b "$lay" -C "$lay/etc/depmod.d" "$rel"
check "the module resolves to DOCA-OFED's ib_uverbs, nvidia-peermem to the drop-in" \
	env MODPROBE=/opt/kmod/modprobe MODINFO=/opt/kmod/modinfo sh "$lay/check-layout.sh" "$lay" "$rel"

dmesg -c >/dev/null
# DOCA-OFED's ib_uverbs also exports the invalidation notifiers that tell a
# client its generation; the simulated core keeps them in a module of
# their own (lib.sh pd_exports), loaded first for the module to find.
pd_exports generation=modern || fail "the modern core's optional exports did not load"
check "modprobe loads the module and its dependencies from the layout" \
	/opt/kmod/modprobe -d "$lay" nvidia_peermem_rs peerdirect_support="$peerdirect_support" \
	persistent_api_support="$persistent_api_support" coalesce_sg="$coalesce_sg"
check "DOCA-OFED's ib_uverbs.ko.zst was loaded (the simulated core)" loaded peerdirect_sim
check "kernel/nvidia-580-open/nvidia.ko was loaded (the simulated provider)" loaded nvidia_p2p_sim
check "the module is loaded" loaded nvidia_peermem_rs
check "no symbol version disagreed" sh -c '! dmesg | grep -q "disagrees about version"'
load peermem_sim
check "its GPU memory round trip works" simtest roundtrip 256K --iters 2
unload nvidia_peermem_rs
unload_sim_stack
no_new_leaks
pass ops=1 leaks="$LEAKS"
