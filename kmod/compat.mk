# SPDX-License-Identifier: GPL-2.0
#
# The kernel-compatibility probes (the conftest idea, for the kernel crate):
# each names one difference between the kernel crates we build against and
# finds out which side of it this kernel is on by compiling a few lines
# (kmod/compat/<name>.rs) against the kernel's Rust metadata, with the
# very command line the module's own objects get. Only build outputs are
# read (rust/*.rmeta, libmacros.so): a distribution's headers and its
# linux-lib-rust package have no Rust sources, and need none. Each probe
# that compiles gives a `--cfg pm_<name>` to every crate of the module,
# and kmod/compat.rs is where the code for both sides lives. Adding a
# kernel: a probe here for each new difference, its two sides in
# compat.rs.
#
# Tested kernels (tests/kernel/kernels): 6.12 (no probe true), 7.1 and
# 7.2 (all true).

# module!'s author key became `authors: [...]`.
# CStr's `as_char_ptr` comes from the trait `CStrExt` (CStr is core's).
# kunit_assert! takes the file name as a C string literal.
# impl_list_item! names the ListLinks field (`using ListLinks { self.f }`)
# instead of taking it from impl_has_list_links!.
pm_compat_probes := module_authors cstr_ext kunit_cstr_file list_item_field

# Where the kernel's Rust metadata is: $(objtree)/rust, or PM_RUST_LIB
# when the build tree's rust/ is elsewhere (an Ubuntu HWE headers package
# links it to a directory its linux-lib-rust package does not install).
ifneq ($(PM_RUST_LIB),)
rustflags-y += -L $(PM_RUST_LIB)
pm_kernel_rmeta := $(PM_RUST_LIB)/libkernel.rmeta
else
pm_kernel_rmeta := $(objtree)/rust/libkernel.rmeta
endif
ifeq ($(wildcard $(pm_kernel_rmeta)),)
$(error nvidia_peermem_rs: $(pm_kernel_rmeta) missing: this kernel's Rust metadata is not installed (Ubuntu: the linux-lib-rust package; see 'make print-build-env'))
endif

# The verdicts, read by rustc as arguments (`@file`), one file per kernel
# release: a tree copied or built against another kernel never reuses
# another kernel's verdicts.
pm_compat_cfg := kmod/compat-$(KERNELRELEASE).cfg
rustflags-y += @$(obj)/$(pm_compat_cfg)

# A probe is false only when rustc rejects it (exit 1); rustc ending
# otherwise (killed by the OOM killer in a parallel autoinstall, an
# internal error) stops the build with nothing cached, so the next build
# probes again. Each probe's log stays in <verdicts>.probes/.
# A probe is compiled as the module's objects are (the kernel's own
# rust_common_cmd), less the verdicts it is making, with lints capped: a
# warning must not decide a probe. The baseline has to compile on every
# kernel; when it does not, the kernel's metadata cannot be used at all and
# the build stops with rustc's reason.
# (6.12's command names the crate after the target, not a valid crate
# name here: each probe names its own.)
pm_probe_rustc = $(filter-out @%/$(pm_compat_cfg) --crate-name $(basename $(notdir $@)),$(rust_common_cmd)) \
	--cap-lints allow

quiet_cmd_pm_compat = PROBE   $@
      cmd_pm_compat = \
	set -e; d=$@.probes; rm -rf $$d; mkdir -p $$d; \
	probe() { $(pm_probe_rustc) --crate-name pm_probe_$$1 --emit=metadata=$$d/$$1.rmeta \
		$(src)/kmod/compat/$$1.rs >$$d/$$1.log 2>&1; }; \
	if ! probe baseline; then \
		echo "nvidia_peermem_rs: cannot compile against this kernel's Rust metadata ($(pm_kernel_rmeta)):" >&2; \
		grep -m 5 -E '^error' $$d/baseline.log >&2 || tail -n 5 $$d/baseline.log >&2; \
		exit 1; \
	fi; \
	: >$@.tmp; yes=; no=; \
	for p in $(pm_compat_probes); do \
		if probe $$p; then printf -- '--cfg\npm_%s\n' $$p >>$@.tmp; yes="$$yes $$p"; \
		else rc=$$?; \
			if [ $$rc -ne 1 ]; then \
				echo "nvidia_peermem_rs: the kernel crate probe $$p did not finish: rustc exited $$rc, not with a compile error (killed, out of memory?); nothing is cached: build again ($$d/$$p.log)" >&2; \
				tail -n 3 $$d/$$p.log >&2; rm -f $@.tmp; exit 1; \
			fi; \
			no="$$no $$p"; \
		fi; \
	done; \
	echo "nvidia_peermem_rs: kernel crate probes true:$${yes:- none}; false:$${no:- none}$${no:+ (why: $$d/<probe>.log)}"; \
	mv $@.tmp $@; rm -f $(depfile)

# Compiled as part of the module: the flags the kernel gives module objects
# only (--cfg MODULE, a sanitizer's ABI) are the probes' too.
$(obj)/$(pm_compat_cfg): private part-of-module := y
$(obj)/$(pm_compat_cfg): $(src)/kmod/compat.mk $(pm_kernel_rmeta) \
		$(addprefix $(src)/kmod/compat/,baseline.rs $(addsuffix .rs,$(pm_compat_probes)))
	$(call cmd,pm_compat)

$(obj)/kmod/nvidia_peermem_rs.o $(obj)/kmod/nvidia_peermem_rs_kunit.o: $(obj)/$(pm_compat_cfg)

clean-files += $(pm_compat_cfg) $(pm_compat_cfg).probes

# Not probed: what 7.x's kernel crate offers and 6.12's lacks, kept as
# one implementation for both kernels (kmod/params.rs and kmod/debugfs.rs
# give the reasons in full):
# - module parameters in `module!` (macros/module.rs `params`,
#   kernel/module_param.rs): no sysfs file (perm 0), `parmtype` i32 not
#   int (kmod/params.rs);
# - kernel/debugfs.rs: its files do not hold the module while open
#   (kmod/debugfs.rs);
# - `global_lock!` (kernel/sync/lock/global.rs): a static SpinLock or
#   Mutex that one unsafe `init()` at load makes usable. It would carry
#   the registry's global lock on 7.x (a plain spin_lock, its list
#   const-constructible), but 6.12 has no static kernel-crate lock, so the
#   registry keeps one lock that both kernels build.
