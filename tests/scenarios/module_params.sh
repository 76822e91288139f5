#!/bin/sh
# shellcheck disable=SC1091,SC2154 # lib.sh and module_lib.sh, at /scenarios in the VM
# Parameter validation and module metadata: each invalid value fails the
# load with EINVAL and a dmesg line naming the bad value and the valid ones,
# registering nothing; modinfo shows description, author, license, version
# and both parameters with descriptions and types; loaded with no
# parameter, both builds take the documented defaults.
. /scenarios/lib.sh
. /scenarios/module_lib.sh

# The .modinfo strings modinfo shows (read raw: busybox modinfo skips some).
ko=$(mod_path nvidia_peermem_rs)
info=$(tr '\0' '\n' <"$ko" | grep -a -v srcversion= |
	grep -a -o -E '(description|author|license|version|parm|parmtype)=.*')
field() {
	echo "$info" | sed -n "s/^$1=//p"
}
for key in description author license version; do
	[ -n "$(field $key)" ] || fail "modinfo has no $key"
done
[ "$(field license)" = GPL ] || fail "license is '$(field license)', want GPL"
for p in peerdirect_support persistent_api_support coalesce_sg; do
	field parm | grep -q "^$p:..*" || fail "modinfo: no description of $p ($(field parm))"
	field parmtype | grep -qx "$p:int" || fail "modinfo: $p is not typed int ($(field parmtype))"
done

load_sim_stack generation="$generation"
bad=0
for spec in peerdirect_support=2 peerdirect_support=-1 persistent_api_support=2 \
	persistent_api_support=7 coalesce_sg=3; do
	name=${spec%%=*}
	value=${spec#*=}
	dmesg -c >/dev/null
	if try_load nvidia_peermem_rs "$spec" 2>/tmp/insmod.err; then
		fail "loaded with $spec"
	fi
	grep -q "Invalid argument" /tmp/insmod.err || fail "$spec: insmod did not fail with EINVAL: $(cat /tmp/insmod.err)"
	line=$(dmesg | grep "nvidia_peermem_rs: invalid $name=$value: valid values are 0 (.*), 1 (.*)" | head -n 1)
	[ -n "$line" ] || fail "$spec: no dmesg line naming the value and the valid ones"
	# One line per load attempt (busybox insmod may try two syscalls). On
	# a MODVERSIONS kernel the loader also says, once a boot, that the
	# optional import ib_umem_stop_invalidation_notifier has no recorded
	# version: the test bed's core exports it from a module of its own
	# (pd_exports), not from the ib_core.ko the build read, as DOCA-OFED's
	# ib_core does. That line is the loader's, not the module's.
	n=$(dmesg | grep "nvidia_peermem_rs: " | grep -vc "symbol version for ib_umem_stop_invalidation_notifier")
	tries=$(dmesg | grep -c "nvidia_peermem_rs: invalid")
	[ "$n" = "$tries" ] || fail "$spec: other module messages besides the refusal"
	! loaded nvidia_peermem_rs || fail "module loaded with $spec"
	[ ! -e "$PM_PEERS"/nv_mem ] || fail "$spec: nv_mem registered by a refused load"
	bad=$((bad + 1))
done
# A value that is not a number is refused by the kernel's int parser.
try_load nvidia_peermem_rs peerdirect_support=abc 2>/dev/null && fail "loaded with peerdirect_support=abc"

# Every valid combination loads.
good=0
for pd in 0 1; do
	for pa in 0 1; do
		load nvidia_peermem_rs peerdirect_support=$pd persistent_api_support=$pa
		unload nvidia_peermem_rs
		good=$((good + 1))
	done
done
sim counters
[ "$(kv clients_registered "$out")" = 0 ] || fail "clients left registered"

# Loaded with no parameter at all, as `insmod nvidia-peermem.ko` on a node,
# each build takes the defaults the README and modinfo promise
# (peerdirect_support=0 persistent_api_support=1 coalesce_sg=0) and
# registers what they mean: one persistent client, nv_mem.
dropin=/lib/modules/$(uname -r)/updates/dkms/nvidia-peermem.ko
[ -f "$dropin" ] || fail "the drop-in nvidia-peermem.ko is not staged ($dropin)"
for m in nvidia_peermem_rs nvidia_peermem; do
	ko=$(mod_path nvidia_peermem_rs)
	[ "$m" = nvidia_peermem ] && ko=$dropin
	insmod "$ko" || fail "insmod $ko with no parameter failed"
	loaded "$m" || fail "insmod $ko did not load module $m"
	for want in peerdirect_support=0 persistent_api_support=1 coalesce_sg=0; do
		got=$(cat "/sys/module/$m/parameters/${want%=*}" 2>/dev/null)
		[ "${want%=*}=$got" = "$want" ] || fail "$m loaded without parameters: ${want%=*}=$got, want $want"
	done
	sim counters
	[ "$(kv clients_registered "$out")" = 1 ] ||
		fail "$m with the defaults: the core has $(kv clients_registered "$out") clients, want 1 (nv_mem, persistent)"
	if [ -d "$PM_PEERS" ]; then
		[ -r "$PM_PEERS"/nv_mem/version ] || fail "$m with the defaults: nv_mem not published"
		[ ! -e "$PM_PEERS"/nv_mem_nc ] || fail "$m with the defaults: nv_mem_nc published (persistent_api_support=0's client)"
	fi
	rmmod "$m" || fail "rmmod $m failed"
done
finish_clean
pass refused=$bad loaded=$good defaults=both-builds
