#!/bin/sh
# packaging: the nvidia_peermem_rs.ko that DKMS built and installed on the
# host (make packaging-test: dkms add/build/install into scratch trees against
# the test kernel) loads and serves registrations, and the modprobe.d guard
# refuses a second peer-memory client. make packaging-test packs
#   /extra/dkms/lib/modules/<release>/...   the DKMS install tree
#   /extra/packaging/                       guard script, modprobe.d file
# with PEERMEM_VM_EXTRA (docs/lab-notes/vm-packaging.md).
# shellcheck source=/dev/null
. /scenarios/lib.sh

release=$(uname -r)
ko=/extra/dkms/lib/modules/$release/updates/dkms/nvidia_peermem_rs.ko
guard=/extra/packaging/nvidia-peermem-rs-guard

[ -f "$ko" ] || fail "no DKMS-installed module at $ko: run 'make packaging-test' (it packs the DKMS install tree via PEERMEM_VM_EXTRA)"
[ -f "$guard" ] || fail "no guard script at $guard"

# Built for this very kernel.
vermagic=$(tr '\0' '\n' <"$ko" | sed -n 's/^vermagic=//p' | head -n 1)
log "DKMS module $ko vermagic '$vermagic'"
case "$vermagic" in
"$release "*) ;;
*) fail "vermagic '$vermagic' does not match the running kernel $release" ;;
esac

load_sim_stack generation=modern
check "guard lets nvidia_peermem_rs load when no other client is loaded" \
	sh "$guard" nvidia_peermem_rs
insmod "$ko" || fail "insmod of the DKMS-installed module failed"
check "nvidia_peermem_rs is loaded" loaded nvidia_peermem_rs
check "nv_mem is published" test -r /sys/kernel/mm/memory_peers/nv_mem/version

# The guard sees the real /sys/module and refuses a second client, loudly.
refuse "guard lets nvidia_peermem load beside nvidia_peermem_rs" \
	sh "$guard" nvidia_peermem
refuse "guard lets nv_peer_mem load beside nvidia_peermem_rs" \
	sh "$guard" nv-peer-mem
check "the guard's refusal is in the kernel log" \
	dmesg_has "refusing to load nvidia_peermem: nvidia_peermem_rs is loaded"

# A registration served by the DKMS-built module, end to end.
ops=0
if command -v simtest >/dev/null; then
	check "GPU memory round trip through the DKMS-built module" \
		simtest roundtrip 256K --iters 2
	ops=2
fi

unload nvidia_peermem_rs
unload_sim_stack
no_new_leaks
# Without simtest (tests/vm/mkinitramfs.sh packs the build's) no
# registration went through the DKMS-built module: not a pass.
[ "$ops" -gt 0 ] || skip "simtest not in the initramfs: no registration round trip through the DKMS-built module" \
	ops=0 leaks="$LEAKS"
pass ops=$ops leaks="$LEAKS"
