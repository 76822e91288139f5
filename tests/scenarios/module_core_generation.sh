#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# The module tells the PeerDirect core's generation from the optional
# symbols the core exports (ib_get_peer_private_data up to MLNX_OFED 5.0,
# ib_umem_stop_invalidation_notifier from 5.4-3.0.3.0) and says it in its
# load line. exports=0: the simulated core without them, a core the module
# does not know (the real core exports its own: the line is skipped there).
. /scenarios/lib.sh
exports=1
for _a in "$@"; do
	case "$_a" in
	exports=0 | exports=1)
		exports=${_a#*=}
		;;
	*) set -- "$@" "$_a" ;;
	esac
	shift
done
. /scenarios/module_lib.sh

case "$generation" in
legacy) want="MLNX_OFED 4.0 .. 5.0 (legacy PeerDirect ABI" ;;
mofed51) want="MLNX_OFED 5.1 .. 5.4-2 (no stop notifier" ;;
modern | modern2410) want="MLNX_OFED 5.4-3 or later (stop notifier" ;;
esac

load_sim_stack generation="$generation"
if [ "$exports" = 0 ]; then
	_had=
	for _e in pd_exports_legacy pd_exports_mofed51 pd_exports_modern; do
		if loaded "$_e"; then
			unload "$_e"
			_had=1
		fi
	done
	[ -n "$_had" ] || skip "this core exports its own symbols (not the simulator)"
	want="unknown (none of MLNX_OFED's optional PeerDirect exports)"
fi

dmesg -c >/dev/null
load_module
line=$(dmesg | grep "nvidia_peermem_rs: version .*: registered")
[ -n "$line" ] || fail "no load line: $(dmesg | tail -n 5)"
case "$line" in
*"; PeerDirect core: $want"*) log "load line: $line" ;;
*) fail "generation $generation (exports=$exports): the load line does not say \"$want\": $line" ;;
esac
finish_clean
pass
