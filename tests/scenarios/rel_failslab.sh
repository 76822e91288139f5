#!/bin/sh
# The module's own allocations fail (issue 5): failslab scoped to our module
# by its stack-trace filter (require-start/-end = our module's text, from
# /proc/kallsyms; stacktrace-depth 12, so our code must be a near caller),
# driven per task with /proc/self/fail-nth: for N = 1, 2,
# ... the Nth slab allocation made with our module on the stack fails, until
# a run completes with no allocation left to fail. Allocations the module
# asks of the provider or the core on its behalf fail too.
#   rel_failslab.sh [generation=modern] [peerdirect_support=0] [persistent_api_support=0|1] [max=N]
# Paths: the module's load (init: the filter is then the whole module area
# above the kernel image, since the module's text is not known before it
# loads; only our init runs module code then), a full registration life
# cycle (simtest roundtrip: reg, DMA verify, dereg), the free callback
# (cudaFree of a registered buffer) and the deregistration after it.
# Every injected failure must give a clean error (or be absorbed), leave
# nothing pinned, mapped or registered, splat nothing; kmemleak at the end.
. /scenarios/lib.sh
. /scenarios/rel_lib.sh
max=${rel_arg_max:-60}
FS=/sys/kernel/debug/failslab
[ -d $FS ] || fail "no failslab in debugfs"

fs_set() {
	echo "$2" >"$FS/$1" || fail "cannot set failslab $1=$2"
}

# Probability 0: only fail-nth injects; 'times' counts the injections down.
fs_set probability 0
fs_set interval 1
fs_set space 0
fs_set verbose 1
fs_set ignore-gfp-wait N
fs_set cache-filter N
fs_set task-filter N
# Only the innermost frames count: an allocation fails when our module is
# among its callers' first 12 frames, i.e. our own allocations and those of
# the provider/core calls we make (not, say, the sysfs internals deep below
# the core's registration function).
fs_set stacktrace-depth 12
fs_set times 1000000

injected() {
	read -r _t <$FS/times
	echo $((1000000 - _t))
}

hex() {
	printf '0x%x' $(($1))
}

# range_module: our module's text [start, end) from kallsyms. Reading
# /proc/kallsyms takes seconds under TCG, and the text does not move while
# the module stays loaded (sections 2 and 3), so it is read once.
range_module() {
	if [ -z "${RM_START:-}" ]; then
		_syms=$(grep -E " [tT] .*\[$REL_MOD\]" /proc/kallsyms | cut -d' ' -f1 | sort)
		[ -n "$_syms" ] || fail "no text symbols of $REL_MOD in /proc/kallsyms"
		_lo=0x$(echo "$_syms" | head -n 1)
		_hi=0x$(echo "$_syms" | tail -n 1)
		_text=$(cat /sys/module/$REL_MOD/sections/.text 2>/dev/null || echo "$_lo")
		[ $((_text)) -lt $((_lo)) ] && _lo=$_text
		# The last function ends before the next page boundary plus one
		# page (module text is a page-granular vmalloc area with a guard
		# page).
		RM_START=$(hex "$_lo")
		RM_END=$(hex $(( ((_hi + 4096) & ~4095) + 4096 )))
		log "filter: $REL_MOD text $RM_START..$RM_END"
	fi
	fs_set require-start "$RM_START"
	fs_set require-end "$RM_END"
}

# range_module_area: everything above the kernel image (module area).
range_module_area() {
	if [ -z "${KERNEL_END:-}" ]; then
		KERNEL_END=0x$(grep -E ' [A-Za-z] _end$' /proc/kallsyms | cut -d' ' -f1)
		log "filter: module area $KERNEL_END..0xffffffffff000000"
	fi
	fs_set require-start "$KERNEL_END"
	fs_set require-end 0xffffffffff000000
}

fs_off() {
	fs_set require-start 0
	fs_set require-end 0
}

# nth_loop NAME CMD...: runs `CMD` with fail-nth = 1, 2, ... until a run
# has nothing left to fail; after each run, `after_run` checks the state.
# CMD "load" is `simtest load-module --fail-nth N` of our module (armed
# right before finit_module); any other CMD runs with the shell's fail-nth
# armed before exec (only allocations with our module on the stack count),
# so a simtest CMD runs in its own process (--own-process): fail-nth is the
# task's, and a simtest call otherwise runs in the simtest server.
nth_loop() {
	_name=$1
	shift
	_n=1
	while :; do
		[ $_n -le "$max" ] || fail "$_name: still failing allocations at N=$max" $(figures)
		before_run
		_i0=$(injected)
		mark
		if [ "$1" = load ]; then
			# shellcheck disable=SC2046
			_out=$(command simtest load-module --fail-nth $_n "$(mod_path $REL_MOD)" $(client_params) 2>&1)
		else
			_out=$(sh -c "echo $_n > /proc/self/fail-nth && exec \"\$@\"" sh "$@" 2>&1)
		fi
		_rc=$?
		_hit=$(( $(injected) - _i0 ))
		REL_OPS=$((REL_OPS + 1))
		after_run "$_rc" "$_out" "$_hit"
		if [ "$_hit" = 0 ]; then
			[ "$_rc" = 0 ] || fail "$_name: failed with no allocation failed (N=$_n): $_out" $(figures)
			# A step in which no allocation ever failed tested nothing
			# (failslab off, or a filter that matches none of ours).
			# Except a step declared allocation-free (NTH_NONE_OK=1):
			# there, none at N=1 is the property checked.
			[ $_n -gt 1 ] || [ "${NTH_NONE_OK:-0}" = 1 ] ||
				fail "$_name: no allocation failure was injected (failslab injected nothing at N=1)" $(figures)
			log "$_name: $((_n - 1)) allocation(s) failed one by one, all clean"
			break
		fi
		REL_FAULTS=$((REL_FAULTS + _hit))
		_n=$((_n + 1))
	done
}

# ---- 1. the module's load (persistent_api_support=0 only: it registers
# both clients, a superset of persistent_api_support=1's load) -------------
stack_up_fixtures
if [ "$pers" = 1 ]; then
	# shellcheck disable=SC2046
	load $REL_MOD $(client_params)
fi
before_run() { :; }
after_run() {
	if [ "$1" = 0 ]; then
		[ "$3" = 0 ] || log "load absorbed an allocation failure"
		REL_IDLE_REF=$(refcnt)
		# it loaded: it must work; then unload for the next N
		fs_off
		st roundtrip 128K >/dev/null || fail "loaded despite a failed allocation, but does not work" $(figures)
		[ "$3" = 0 ] || rmmod $REL_MOD || fail "rmmod after load" $(figures)
		range_module_area
	else
		loaded $REL_MOD && fail "insmod failed but the module stayed" $(figures)
		simtest_to _cr counters clients_registered
		[ "$_cr" = 0 ] || fail "a failed load left a client registered" $(figures)
		since_mark | grep -q -E "$REL_MOD" ||
			fail "load failed silently at allocation #$_n (insmod: $2)" $(figures)
	fi
}
if [ "$pers" = 0 ]; then
	range_module_area
	max_run=$max
	max=$((max * 3))
	nth_loop "load" load
	max=$max_run
fi
fs_off
loaded $REL_MOD || fail "the module did not end up loaded" $(figures)
REL_IDLE_REF=$(refcnt)

# ---- 2. a registration life cycle ------------------------------------------
range_module
before_run() { :; }
after_run() {
	fs_off
	if [ "$1" != 0 ]; then
		case "$2" in
		*errno=* | *mismatch=*) ;;
		*) fail "roundtrip failed without an errno: $2" $(figures) ;;
		esac
		case "$2" in *mismatch=*) fail "data mismatch after an allocation failure: $2" $(figures) ;; esac
	fi
	simtest_to _lc leak-check || fail "allocation failure #$_n left $_lc" $(figures)
	[ "$(refcnt)" = "$REL_IDLE_REF" ] || fail "refcount $(refcnt) after allocation failure #$_n" $(figures)
	range_module
}
nth_loop "register/DMA/deregister" simtest --own-process roundtrip 256K --offset 4097 --len 150000

# ---- 3. the free callback, then the deregistration ------------------------
if [ "$pers" = 0 ]; then
	# simtest gpu-free of a VA known only once before_run registered it.
	printf '#!/bin/sh\nexec simtest --own-process gpu-free "$(cat /tmp/rel_va)"\n' >/tmp/rel_free.sh
	chmod +x /tmp/rel_free.sh
	before_run() {
		fs_off
		simtest_to _o gpu-alloc 192K || fail "gpu-alloc" $(figures)
		kv_set va va "$_o"
		simtest_to _o mr-reg "$va" 192K || fail "mr-reg: $_o" $(figures)
		kv_set mr mr "$_o"
		echo "$va" >/tmp/rel_va
		range_module
	}
	after_run() {
		fs_off
		[ "$1" = 0 ] || fail "cudaFree failed after allocation failure #$_n: $2" $(figures)
		simtest_to _o mr-dereg "$mr" || fail "dereg after the free callback: $_o" $(figures)
		simtest_to _lc leak-check || fail "free callback allocation failure #$_n left $_lc" $(figures)
	}
	# The free callback runs under the driver's lock and allocates
	# nothing with our module on the stack (N=1 injects nothing: that is
	# the property this step checks; an allocation added there would be
	# failed one by one like the steps above).
	NTH_NONE_OK=1 nth_loop "free callback" /tmp/rel_free.sh
fi
fs_off
settle_idle
stack_down
# Leaks: the boot's final scan, which names the scenario that allocated
# each object; a scan here where the boot asks (peermem.kmemleak=each).
kmemleak_check light
rel_pass
