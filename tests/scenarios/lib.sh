# shellcheck shell=sh
# Helpers for scenario scripts run inside the test VM. Source it first:
#   . /scenarios/lib.sh
# A scenario ends with exactly one `pass` or `fail`; exiting without either
# reports a failure. Figures are key=value words: pass ops=100 leaks=0.

SCENARIO_ID=${SCENARIO_ID:-$(basename "$0" .sh)}
_reported=
trap '[ -n "$_reported" ] || echo "SCENARIO-RESULT $SCENARIO_ID fail reason=exited without a result (last command failed?)"' EXIT

# pass [key=value ...]
pass() {
	_reported=1
	echo "SCENARIO-RESULT $SCENARIO_ID pass $*"
	exit 0
}

# fail REASON [key=value ...]: the reason may contain spaces.
fail() {
	_reported=1
	_reason=$1
	shift
	echo "SCENARIO-RESULT $SCENARIO_ID fail $* reason=$_reason"
	exit 1
}

log() {
	echo "SCENARIO-LOG $SCENARIO_ID: $*"
}

# check DESCRIPTION COMMAND...: fail the scenario unless COMMAND succeeds.
check() {
	_desc=$1
	shift
	"$@" || fail "$_desc (command: $*)"
}

# refuse DESCRIPTION COMMAND...: fail the scenario if COMMAND succeeds.
refuse() {
	_desc=$1
	shift
	if "$@"; then
		fail "$_desc (command unexpectedly succeeded: $*)"
	fi
}

# mod_path NAME: the .ko of module NAME in the initramfs.
mod_path() {
	find /lib/modules -name "$1.ko" | head -n 1
}

# load NAME [PARAM=VALUE ...]: insmod, or fail the scenario.
load() {
	_m=$1
	shift
	_p=$(mod_path "$_m")
	[ -n "$_p" ] || fail "module $_m is not in the initramfs"
	insmod "$_p" "$@" || fail "insmod $_m $* failed"
}

# try_load NAME [PARAM=VALUE ...]: insmod, returning its status.
try_load() {
	_m=$1
	shift
	_p=$(mod_path "$_m")
	[ -n "$_p" ] || return 127
	insmod "$_p" "$@"
}

loaded() {
	[ -d "/sys/module/$1" ]
}

# unload NAME...: rmmod each that is loaded, or fail the scenario.
unload() {
	for _m in "$@"; do
		if loaded "$_m"; then
			rmmod "$_m" || fail "rmmod $_m failed"
		fi
	done
}

# The simulated NVIDIA driver generation (r525, r535, r560, r580; empty:
# the provider's default, the newest). r525 is its own build, without the
# persistent calls (see tests/fixtures/nvidia_p2p_sim.c).
PSIM_DRIVER=${PSIM_DRIVER:-}

# load_provider: the simulated NVIDIA provider of generation $PSIM_DRIVER.
load_provider() {
	case "$PSIM_DRIVER" in
	"") load nvidia_p2p_sim ;;
	r525) load nvidia_p2p_sim_r525 ;;
	*) load nvidia_p2p_sim driver="$PSIM_DRIVER" ;;
	esac
}

# load_sim_stack [generation=modern|mofed51|legacy]: the simulated NVIDIA
# provider, PeerDirect core and control device.
load_sim_stack() {
	load_provider
	load peerdirect_sim "$@"
	if [ -n "$(mod_path peermem_sim)" ]; then
		load peermem_sim
	fi
	[ -c /dev/peermem_sim ] || fail "/dev/peermem_sim did not appear"
}

unload_sim_stack() {
	unload peermem_sim peerdirect_sim nvidia_p2p_sim nvidia_p2p_sim_r525
}

# kmemleak_new: scan and print the number of leaks reported since the last
# call (their reports go to the console, where the verdict finds them).
kmemleak_new() {
	_k=/sys/kernel/debug/kmemleak
	if [ ! -w $_k ]; then
		echo 0
		return
	fi
	sleep 6
	echo scan > $_k
	echo scan > $_k
	_n=$(grep -c "unreferenced object" $_k)
	cat $_k >&2
	echo clear > $_k
	echo "$_n"
}

# dmesg_has PATTERN: the kernel log contains PATTERN.
dmesg_has() {
	dmesg | grep -q -- "$1"
}
