# SPDX-License-Identifier: GPL-2.0
#
# The kernel-compatibility probes (the conftest idea, for the kernel crate):
# each names one difference between the kernels we build on and finds out
# which side of it this kernel is on by reading the kernel's own Rust
# sources. Each gives a `--cfg pm_<name>` to every crate of the module,
# and kmod/compat.rs is where the code for both sides lives. Adding a
# kernel: a probe here for each new difference, its two sides in compat.rs.
#
# Tested kernels (tests/kernel/kernels): 6.12 (no probe true), 7.2 (all
# true).

pm_rust_src := $(srctree)/rust

# pm_probe,<file under rust/>,<extended regexp>: y if the file matches.
pm_probe = $(shell grep -qsE '$(2)' $(pm_rust_src)/$(1) && echo y)

ifeq ($(wildcard $(pm_rust_src)/kernel/lib.rs),)
$(error nvidia_peermem_rs: $(pm_rust_src)/kernel/lib.rs missing: this kernel tree has no Rust sources (a headers package without rust/? see 'make print-build-env'))
endif

# module!'s author key became `authors: [...]`.
pm_compat_module_authors := $(call pm_probe,macros/module.rs,\bauthors\b)
# CStr's `as_char_ptr` comes from the trait `CStrExt` (CStr is core's).
pm_compat_cstr_ext := $(call pm_probe,kernel/str.rs,trait CStrExt)
# The kernel's bindgen options derive pin_init's `MaybeZeroable`.
pm_compat_bindgen_zeroable := $(call pm_probe,bindgen_parameters,=MaybeZeroable)

# kunit_assert! takes the file name as a C string literal.
pm_compat_kunit_cstr_file := $(call pm_probe,kernel/kunit.rs,static FILE: .*CStr = .file;)

# impl_list_item! names the ListLinks field (`using ListLinks { self.f }`)
# instead of taking it from impl_has_list_links!.
pm_compat_list_item_field := $(call pm_probe,kernel/list/impl_list_item_mod.rs,using ListLinks \{ self)

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

pm_compat_cfgs := $(foreach c,module_authors cstr_ext \
	bindgen_zeroable kunit_cstr_file list_item_field,\
	$(if $(pm_compat_$(c)),--cfg pm_$(c)))
rustflags-y += $(pm_compat_cfgs)
