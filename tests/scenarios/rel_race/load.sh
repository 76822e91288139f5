# shellcheck shell=sh disable=SC2034,SC2154 # variables shared with rel_race.sh
# rel_race windows: a load failing while a registration of the client is
# still alive.
# Sourced by rel_race.sh (after rel_race/common.sh) for window=W:
#   load_fails_live    a load failing after nv_mem registered
#       (the core refuses nv_mem_nc) while a registration of nv_mem is still
#       alive though the core released it: its deregistration could not
#       unpin (put_pages fails at put_pages and at release's retry), so the
#       driver still holds its free callback. init must not return before
#       that registration is gone (the module text would go under the
#       callback); the cudaFree that ends it runs while init waits, an
#       idle sleep the hung-task detector does not report. Our module with
#       persistent_api_support=0 only.
#       variant=invalidating: the load fails while a free callback is on
#       its way into the core's invalidate ("core_invalidate_entry", before
#       the core looks at the client's handle) and the MR is deregistered
#       meanwhile: init must not unregister the client (the core frees its
#       handle then) before that callback has returned from the core.
#       variant=declining: an acquire that found the load not failing is
#       held before it takes its module reference (the test build's
#       acquire_module_ref) while the load fails: the failed init must count
#       the registration that acquire goes on to make, and wait for it. The
#       registration is then left pinned (both unpins fail) and the cudaFree
#       that ends it runs in our module: loaded, or freed under it. Test
#       build only (rel_race.sh loads it).

# start_failing_load [PARAM ...]: reloads the module (with PARAMs besides
# the client's) in the background ($pid_load) so that its load fails after
# nv_mem registered: the core refuses its second registration call
# (nv_mem_nc's), which is held before it until the caller releases
# register_client. Both holds are armed before the load starts (arming the
# second while the load runs was outrun on a loaded host); the first goes
# on at once. Returns once nv_mem is listed and nv_mem_nc's call is held.
# Sets $va, 128 KiB of GPU memory.
start_failing_load() {
	rmmod $REL_MOD || fail "rmmod of an idle module failed" $(figures)
	simtest_to _o gpu-alloc 128K || fail "gpu-alloc: $_o" $(figures)
	kv_set va va "$_o"
	mark
	st fault register_client 2 ENOMEM >/dev/null
	simtest_to d0 counters delays_taken
	st delay register_client $GATE_MS 2 >/dev/null
	# shellcheck disable=SC2046
	bg_run load modload $REL_MOD $(client_params) "$@"
	release_when register_client delays_taken_reached $((d0 + 1)) ||
		fail "the load never reached nv_mem's registration" $(figures)
	await_delay "$d0" 2 || fail "the load never reached nv_mem_nc's registration" $(figures)
}

# load_failing_with_mr: start_failing_load. Meanwhile registers an MR of
# $va, which nv_mem takes ($mr).
load_failing_with_mr() {
	start_failing_load
	simtest_to _o mr-reg "$va" 128K || fail "mr-reg while the load runs: $_o" $(figures)
	kv_set mr mr "$_o"
	[ "$(sval client "$_o")" = nv_mem ] ||
		fail "the MR went to $(sval client "$_o"), not nv_mem" $(figures)
}

# dereg_left_pinned TRIES: deregisters $mr with both unpins failing (the
# core releases it, the pin stays with the driver), lets the load go on to
# fail, then waits up to TRIES x 50 ms for the failing init to say it
# waits for registrations.
dereg_left_pinned() {
	st fault put_pages 1 EIO 2 >/dev/null
	st mr-dereg "$mr" >/dev/null || fail "dereg failed" $(figures)
	st release register_client >/dev/null
	n=0
	while kill -0 "$pid_load" 2>/dev/null &&
		! since_mark_has "the load failed \(.*\): waiting for" && [ $n -lt "$1" ]; do
		nap 0.05
		n=$((n + 1))
	done
}

# waiting_load_not_hung: the failed init waits for the registration left
# pinned as long as the process keeps that memory (hours, on a node): an
# idle sleep, which the hung-task detector must not report (on a node with
# hung_task_panic=1 the report is a panic). The detector's timeout cut to
# 2 s while the wait lasts 8 s more: a wait in D state is named within
# that (name_hung_tasks's 5 s cut names one in under 30 s).
waiting_load_not_hung() {
	kill -0 "$pid_load" 2>/dev/null || fail "the failed load did not wait for the registration left pinned" $(figures)
	# cat, not read: a sysctl file answers only a read at offset 0, and
	# the shell's read takes a byte at a time
	_ht=$(cat /proc/sys/kernel/hung_task_timeout_secs)
	echo 2 >/proc/sys/kernel/hung_task_timeout_secs
	nap 8
	echo "$_ht" >/proc/sys/kernel/hung_task_timeout_secs ||
		fail "cannot set the hung-task timeout back to $_ht" $(figures)
	kill -0 "$pid_load" 2>/dev/null || fail "the failed load stopped waiting before the cudaFree" $(figures)
	! since_mark_has "blocked for more than" ||
		fail "the hung-task detector reported the failed load's wait: $(since_mark | grep -m 1 "blocked for more than")" $(figures)
}

# failed_load_waited NOT_WAITED WHAT: the background load failed without a
# splat, left no module behind and had waited for the one registration alive (else fails
# with NOT_WAITED); then the module loads again and nothing of WHAT is
# left behind.
failed_load_waited() {
	wait "$pid_load"
	[ "$(splats_so_far)" = 0 ] || fail "a splat: the free callback ran after the failed load returned" $(figures)
	[ "$(bg_rc load)" != 0 ] ||
		fail "the load succeeded with nv_mem_nc refused by the core" $(figures)
	loaded $REL_MOD && fail "the module stayed loaded after a failed init" $(figures)
	since_mark_has "the load failed \(.*\): waiting for 1 registrations" || fail "$1" $(figures)
	st fault-clear >/dev/null
	st delay "" 0 >/dev/null
	# shellcheck disable=SC2046
	load $REL_MOD $(client_params)
	simtest_to _lc leak-check || fail "$2 left something behind: $_lc" $(figures)
	REL_RACES=$((REL_RACES + 1))
	REL_OPS=$((REL_OPS + 6))
}

# load_fails_invalidating: load_fails_live's variant=invalidating.
load_fails_invalidating() {
	load_failing_with_mr
	# the cudaFree's callback is held on its way into the core's
	# invalidate; the MR goes meanwhile; then the load fails, and the
	# callback goes on once init waits
	simtest_to d0 counters delays_taken
	st delay core_invalidate_entry $GATE_MS 1 >/dev/null
	bg_run free st gpu-free "$va"
	wait_delay "$d0"
	# the MR's release waits for that callback: the load fails then
	rw0=$(release_waited)
	bg_run dereg st mr-dereg "$mr"
	release_when register_client release_waited_or_dereg_done "$rw0" || :
	release_when core_invalidate_entry load_unwinding_waits || :
	wait "$pid_dereg"
	[ "$(bg_rc dereg)" = 0 ] || fail "dereg failed: $(cat /tmp/bg.dereg)" $(figures)
	wait "$pid_free"
	[ "$(bg_rc free)" = 0 ] || fail "cudaFree failed: $(cat /tmp/bg.free)" $(figures)
	! since_mark_has "invalidate: unknown registration handle" ||
		fail "the free callback called the core's invalidate with a client handle unregistered under it" $(figures)
	failed_load_waited "init did not wait for the registration whose callback was in the core" \
		load_fails_invalidating
}

# load_fails_declining: load_fails_live's variant=declining.
load_fails_declining() {
	# nv_mem is registered, nv_mem_nc's registration held; the acquire
	# below is held (before its module reference) while the load fails,
	# and goes on once the core has refused nv_mem_nc
	start_failing_load test_delay=acquire_module_ref \
		test_delay_ms=$((12000 * ${PEERMEM_TIME_SCALE_PCT:-100} / 100))
	bg_run reg st mr-reg "$va" 128K
	await_test_delay acquire_module_ref
	st release register_client >/dev/null
	release_when test_delay since_mark_has 'refused client "nv_mem_nc"' || :
	wait "$pid_reg"
	[ "$(bg_rc reg)" = 0 ] || fail "mr-reg while the load fails: $(cat /tmp/bg.reg)" $(figures)
	kv_set mr mr "$(cat /tmp/bg.reg)"
	[ "$(sval client "$(cat /tmp/bg.reg)")" = nv_mem ] ||
		fail "the MR went to $(sval client "$(cat /tmp/bg.reg)"), not nv_mem" $(figures)
	test_delay_held acquire_module_ref
	_lines=$(since_mark | grep -n -E "refused client \"nv_mem_nc\"|test delay acquire_module_ref: done")
	echo "$_lines" | head -n 1 | grep -q "nv_mem_nc" ||
		fail "the load did not fail while the acquire was held: $_lines" $(figures)
	# both unpins fail: the core releases, the pin stays with the driver
	dereg_left_pinned 100
	# the callback runs in our module: loaded, or freed under it
	st gpu-free "$va" >/dev/null || fail "cudaFree failed" $(figures)
	failed_load_waited "init returned without waiting for the registration its held acquire made" \
		load_fails_declining
}

# load_fails_live: see the header.
load_fails_live() {
	[ "$pers" = 0 ] && [ "$client" = rs ] || fail "load_fails_live needs persistent_api_support=0 and our module"
	case "$variant" in
	invalidating)
		load_fails_invalidating
		return
		;;
	declining)
		load_fails_declining
		return
		;;
	esac
	i=0
	while [ $i -lt "$rounds" ]; do
		load_failing_with_mr
		# both unpins fail: the core releases, the pin stays; init fails
		# now and must wait for the registration left pinned
		dereg_left_pinned 300
		waiting_load_not_hung
		# the callback runs in our module: loaded, or freed under it
		st gpu-free "$va" >/dev/null || fail "cudaFree failed" $(figures)
		failed_load_waited "round $i: init returned while a registration was alive" "round $i"
		i=$((i + 1))
	done
}
