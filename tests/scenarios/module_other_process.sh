#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# A registration torn down from a process other than the one that pinned it,
# with the provider keeping memory and pins per process as NVIDIA's driver
# does (nvidia_p2p_sim process_owners=1): an application (one process,
# simtest session) allocates GPU memory and registers it; another process
# deregisters the MR, as the uverbs teardown of a device going away, or the
# last close of a uverbs file another process shares, does. The driver's
# put from there finds no pin of that process and returns 0 without
# unpinning, the free callback still armed. The pages must stay pinned and
# the registration alive (holding the module: rmmod refused) until the
# owner frees the memory or exits; the free callback then ends it, with no
# use of freed memory (KASAN) and nothing left.
#   end=free   the owner frees the memory (cudaFree)
#   end=exit   the owner exits without freeing: the driver frees its memory
#   end=rmmod  as free, with an rmmod tried before (must be refused)
# persistent_api_support=1 on a driver before 535 (PSIM_DRIVER=r525): the
# persistent pin goes through nvidia_p2p_get_pages too, without a callback.
# The driver puts such a pin by its own object, from any process, and the
# owner's exit does not end it: the other process's dereg must unpin it,
# or it stays pinned until the driver is unloaded.
. /scenarios/lib.sh
end=free
_args=
for _a in "$@"; do
	case "$_a" in
	end=free | end=exit | end=rmmod) end=${_a#*=} ;;
	driver=r525) PSIM_DRIVER=r525 ;;
	*) _args="$_args $_a" ;;
	esac
done
# shellcheck disable=SC2086 # the remaining KEY=VALUE words, one each
set -- $_args
. /scenarios/module_lib.sh

load_sim_stack generation="$generation"
for _k in /sys/module/nvidia_p2p_sim*/parameters/process_owners; do
	echo 1 >"$_k" || fail "the provider has no process_owners knob"
done
load_module
app_start
app gpu-alloc 256K
kv_set va va "$out"
app mr-reg "$va" 256K
kv_set mr mr "$out"
app hca-write "$mr" 0 64K seed:5
app gpu-check "$va" 64K seed:5

# Another process may not free the application's memory.
simtest --own-process --expect-errno EPERM gpu-free "$va" >/dev/null ||
	fail "a process other than the owner freed its GPU memory"
# Another process deregisters the MR. The module's line about it must be
# this run's: the boot's log has the earlier runs' too.
log_mark
sim --own-process mr-dereg "$mr"
simtest_to _lc leak-check 2>/dev/null
kv_set pinned pages_pinned "$_lc"
refcnt=$(cat /sys/module/nvidia_peermem_rs/refcnt)
left=$(pm_stat left_to_owner)
log "after the other process's dereg: provider pages_pinned=$pinned module refcnt=$refcnt left_to_owner=$left"

if [ "$persistent_api_support" = 1 ]; then
	# No callback: the other process's put unpins, nothing stays.
	[ "$refcnt" = 0 ] || fail "refcnt $refcnt after the dereg of a persistent pin"
	[ "$(pm_stat unpins_from_other_process)" = 1 ] ||
		fail "unpins_from_other_process $(pm_stat unpins_from_other_process), want 1"
	[ "$(pm_stat left_to_owner)" = 0 ] || fail "left_to_owner $(pm_stat left_to_owner) for a pin without a callback"
	[ "$(pm_stat pinned_bytes)" = 0 ] || fail "the module still counts $(pm_stat pinned_bytes) bytes pinned"
	app_exit
	# The owner's exit does not end a persistent pin: only the put did.
	no_leaks "after the owner exited"
	[ "$pinned" = 0 ] || fail "provider pages_pinned=$pinned after the other process's dereg, want 0 (the driver puts a persistent pin from any process)"
	finish_clean
	pass persistent_unpinned_from_other_process=1
fi

[ "$end" = rmmod ] && {
	# kmod's rmmod, as a node has it: it must say the module is in use
	# (the README's word), not fail for some other reason.
	[ -x /opt/kmod/rmmod ] || fail "kmod's rmmod is not in the initramfs (/opt/kmod/rmmod)"
	/opt/kmod/rmmod nvidia_peermem_rs 2>/tmp/rmmod.err &&
		fail "rmmod succeeded while the application's pin was left to it"
	loaded nvidia_peermem_rs || fail "module gone"
	grep -q "Module nvidia_peermem_rs is in use" /tmp/rmmod.err ||
		fail "rmmod refused without saying the module is in use: $(cat /tmp/rmmod.err)"
	log "rmmod refused: $(cat /tmp/rmmod.err)"
}
case "$end" in
free | rmmod) app gpu-free "$va" ;;
exit) app_exit ;;
esac
# Only now are the checks of the window made: on a module that freed the
# registration at the dereg, the free above is what shows it (KASAN).
[ "$pinned" = 4 ] || fail "provider pages_pinned=$pinned after the other process's dereg, want 4 (the driver cannot unpin from there)"
[ "$refcnt" = 1 ] || fail "module refcnt $refcnt after the other process's dereg, want 1 (the pin's registration holds the module)"
[ "$left" = 1 ] || fail "debugfs left_to_owner $left, want 1"
[ "$(pm_stat left_to_owner)" = 0 ] || fail "left_to_owner $(pm_stat left_to_owner) after the owner's $end"
[ "$(pm_stat unpins_from_other_process)" = 1 ] ||
	fail "unpins_from_other_process $(pm_stat unpins_from_other_process), want 1"
dmesg_since_mark_has "deregistered from process" || fail "no log line of this run says the pin was left to its owner"
[ "$end" = exit ] || app_exit
no_leaks "after the owner's $end"
finish_clean
pass end="$end"
