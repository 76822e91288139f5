# SPDX-License-Identifier: GPL-2.0
#
# Packaging of nvidia-peermem-rs: DKMS source tree, modprobe.d, systemd unit,
# make install/uninstall, Debian package. Included by the top-level Makefile;
# also usable alone: make -f packaging/packaging.mk <target>.
#
#   make install [DESTDIR=...] [PREFIX=/usr/local]   files below, no build
#   make uninstall [DESTDIR=...] [PREFIX=...]        removes exactly those
#   make dkms-install [KVER=<kernel>]                install + dkms add/build/install
#   make dkms-remove                                 dkms remove --all + uninstall
#   make dkms-source                                 stage the DKMS tree only
#   make deb                                         build/packaging/*.deb: the DKMS package
#                                                    and peermem-check's (deb-tool)
#   make rpm                                         build/packaging/rpm/: the DKMS RPM (rpmbuild)
#   PEERMEM_DROPIN=1 (the default) with dkms-source, install, dkms-install,
#   deb or rpm: the module by NVIDIA's name, nvidia_peermem
#   (nvidia-peermem-rs-dropin[-dkms]: nvidia-peermem.ko); PEERMEM_DROPIN=0:
#   the module by its own name, nvidia_peermem_rs (nvidia-peermem-rs[-dkms])
#   make packaging-test                              all of it, host untouched
#
# Installed (DESTDIR prefixed):
#   $(USRSRCDIR)/nvidia-peermem-rs-<ver>/   dkms.conf Makefile Kbuild kmod/ ffi/
#   $(MODPROBEDIR)/nvidia-peermem-rs.conf
#   $(DEPMODDIR)/nvidia-peermem-rs-dropin.conf  the drop-in only (PEERMEM_DROPIN=1)
#   $(PEERMEM_CONFDIR)/build.conf           build overrides (commented)
#   $(LIBEXECDIR)/nvidia-peermem-rs-guard
#   $(SYSTEMDUNITDIR)/nvidia-peermem-rs.service
#   $(DOCDIR)/README.md

PKG_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
PKG_ROOT := $(abspath $(PKG_DIR)/..)
PKG_SRC := $(abspath $(PKG_DIR))
PKG_NAME := nvidia-peermem-rs
# One version: the repository's VERSION file (module, tool, DKMS, packages).
# dkms.conf repeats it (dkms reads PACKAGE_VERSION from there); dkms-source
# refuses to stage a tree where the two differ.
PKG_VERSION := $(shell cat $(PKG_ROOT)/VERSION 2>/dev/null)
PKG_DKMS_CONF_VERSION := $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' $(PKG_SRC)/dkms/dkms.conf)
PKG_OUT ?= $(PKG_ROOT)/build/packaging

DESTDIR ?=
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
USRSRCDIR ?= /usr/src
MODPROBEDIR ?= $(SYSCONFDIR)/modprobe.d
DEPMODDIR ?= $(SYSCONFDIR)/depmod.d
PEERMEM_CONFDIR ?= $(SYSCONFDIR)/$(PKG_NAME)
LIBEXECDIR ?= $(PREFIX)/libexec/$(PKG_NAME)
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/$(PKG_NAME)
KVER ?= $(shell uname -r)
DKMS ?= dkms
SYSTEMCTL ?= systemctl

# PEERMEM_DROPIN=1: the drop-in's DKMS tree, nvidia-peermem-rs-dropin: the
# same sources built as nvidia-peermem.ko (module nvidia_peermem), which
# depmod prefers (updates/dkms) over the driver's own copy. The default:
# NCCL and UCX decide whether to use GPUDirect RDMA by testing for
# /sys/kernel/mm/memory_peers/nv_mem/version or /sys/module/nvidia_peermem/
# version, and the PeerDirect core of DOCA-OFED 23.10+ on Linux 6.6+ has
# no memory_peers tree, so there only a module named nvidia_peermem is
# seen. PEERMEM_DROPIN=0 installs nvidia_peermem_rs, seen only where the
# core publishes the tree (MLNX_OFED up to 23.07, or a kernel that still
# exports mm_kobj).
PEERMEM_DROPIN ?= 1
ifeq ($(PEERMEM_DROPIN),1)
PKG_DKMS_NAME := $(PKG_NAME)-dropin
else
PKG_DKMS_NAME := $(PKG_NAME)
endif

# The module's name, as modprobe and /sys/module know it.
ifeq ($(PEERMEM_DROPIN),1)
PKG_MODULE := nvidia_peermem
else
PKG_MODULE := nvidia_peermem_rs
endif

PKG_SRCTREE := $(USRSRCDIR)/$(PKG_DKMS_NAME)-$(PKG_VERSION)
# The drop-in (module 0.1.0) replaces the driver's nvidia-peermem.ko
# (580.x): dkms's version sanity check would refuse it as "not newer".
# Debian's dkms skips that check for a module listed here as
# NAME_version-override (dkms's force_installation()).
PKG_DKMS_FORCE_DIR := /usr/share/dkms/modules_to_force_install

# The module sources that go into the DKMS tree: VERSION, Kbuild, kmod/ and
# ffi/ as committed to git (like git archive: never build products, never
# stray files), or, outside a git checkout, every file there but build
# products; in both cases without the KUnit module's sources
# (PKG_TEST_ONLY_FILES: test-only, built only with PEERMEM_KUNIT=1).
PKG_TEST_ONLY_FILES := kmod/nvidia_peermem_rs_kunit.rs kmod/kunit.rs kmod/kunit/% \
	ffi/shim_kunit.c
PKG_MODULE_FILES = $(filter-out $(PKG_TEST_ONLY_FILES),$(shell cd $(PKG_ROOT) && \
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files --cached -- VERSION Kbuild kmod ffi; \
	else find VERSION Kbuild kmod ffi -type f ! -name '.*' ! -name '*.o' ! -name '*.ko' \
		! -name '*.mod' ! -name '*.mod.c' ! -name '*.rmeta' ! -name '*_generated.rs' \
		! -name 'compat-*.cfg' ! -path '*/compat-*.cfg.probes/*'; \
	fi | LC_ALL=C sort -u | while read -r f; do test -f "$$f" && echo "$$f"; done))

.PHONY: dkms-source install uninstall dkms-install dkms-remove deb deb-tool rpm packaging-test \
	packaging-print-files

# --- the DKMS source tree ----------------------------------------------------
# Staged into $(PKG_OUT)/dkms/$(PKG_NAME)-$(PKG_VERSION), exactly:
# dkms.conf, Makefile (packaging/dkms/Makefile), VERSION, Kbuild, kmod/, ffi/
# (the KUnit module's sources excluded: see PKG_MODULE_FILES).
PKG_STAGE := $(PKG_OUT)/dkms/$(PKG_DKMS_NAME)-$(PKG_VERSION)
# The drop-in is installed as nvidia_peermem.ko (DEST_MODULE_NAME), the
# same module name as the NVIDIA driver's nvidia-peermem.ko but another
# file: the driver's DKMS package installs its copy into the same
# updates/dkms, and with one path between them each install would
# overwrite the other's and each removal delete it.
# depmod.d/nvidia-peermem-rs-dropin.conf makes depmod prefer the drop-in.

dkms-source:
	@test -f $(PKG_ROOT)/Kbuild && test -d $(PKG_ROOT)/kmod || \
		{ echo "packaging: error: $(PKG_ROOT)/Kbuild or kmod/ missing: no module sources to package" >&2; exit 1; }
	@test -n "$(PKG_VERSION)" || { echo "packaging: error: no version in $(PKG_ROOT)/VERSION" >&2; exit 1; }
	@test "$(PKG_VERSION)" = "$(PKG_DKMS_CONF_VERSION)" || { echo "packaging: error: \
	dkms.conf says PACKAGE_VERSION=\"$(PKG_DKMS_CONF_VERSION)\" but VERSION says $(PKG_VERSION): make them agree" >&2; exit 1; }
	rm -rf $(PKG_STAGE)
	mkdir -p $(PKG_STAGE)
	install -m 0644 $(PKG_SRC)/dkms/dkms.conf $(PKG_STAGE)/dkms.conf
	install -m 0644 $(PKG_SRC)/dkms/Makefile $(PKG_STAGE)/Makefile
	if [ "$(PEERMEM_DROPIN)" = 1 ]; then \
		sed -i -e 's/^PACKAGE_NAME=.*/PACKAGE_NAME="$(PKG_DKMS_NAME)"/' \
			-e 's/^MAKE\[0\]="make /MAKE[0]="make PEERMEM_DROPIN=1 /' \
			-e 's/^BUILT_MODULE_NAME\[0\]=.*/BUILT_MODULE_NAME[0]="nvidia-peermem"\nDEST_MODULE_NAME[0]="nvidia_peermem"/' \
			$(PKG_STAGE)/dkms.conf; fi
	cd $(PKG_ROOT) && for f in $(PKG_MODULE_FILES); do \
		install -D -m 0644 "$$f" "$(PKG_STAGE)/$$f" || exit 1; done
	@echo "packaging: DKMS source tree staged in $(PKG_STAGE)"

# The relative paths `make install` puts under DESTDIR, one per line.
packaging-print-files:
	@{ for f in dkms.conf Makefile $(PKG_MODULE_FILES); do echo "$(PKG_SRCTREE)/$$f"; done; \
	echo "$(MODPROBEDIR)/$(PKG_NAME).conf"; \
	echo "$(PEERMEM_CONFDIR)/build.conf"; \
	echo "$(LIBEXECDIR)/$(PKG_NAME)-guard"; \
	echo "$(LIBEXECDIR)/$(PKG_NAME)-rebuild"; \
	echo "$(SYSTEMDUNITDIR)/$(PKG_NAME).service"; \
	echo "$(DOCDIR)/README.md"; } | sed 's|^/||' | sort

# --- make install / uninstall --------------------------------------------------
# Paths inside the shipped files follow the chosen directories.
PKG_SUBST = sed -e 's|/usr/libexec/$(PKG_NAME)|$(LIBEXECDIR)|g' \
	-e 's|/usr/share/doc/$(PKG_NAME)/|$(DOCDIR)/|g' \
	-e 's|/etc/$(PKG_NAME)/build.conf|$(PEERMEM_CONFDIR)/build.conf|g'
# The drop-in's unit loads the module by NVIDIA's name.
ifeq ($(PEERMEM_DROPIN),1)
PKG_SUBST_UNIT = $(PKG_SUBST) -e 's|modprobe nvidia_peermem_rs|modprobe nvidia_peermem|' \
	-e 's|modprobe -r nvidia_peermem_rs|modprobe -r nvidia_peermem|' \
	-e 's|^Description=.*|Description=GPUDirect RDMA peer-memory client (nvidia-peermem-rs drop-in for nvidia-peermem)|'
else
PKG_SUBST_UNIT = $(PKG_SUBST)
endif

install: dkms-source
	rm -rf $(DESTDIR)$(PKG_SRCTREE)
	mkdir -p $(DESTDIR)$(USRSRCDIR)
	cp -R $(PKG_STAGE) $(DESTDIR)$(PKG_SRCTREE)
	$(PKG_SUBST) $(PKG_SRC)/dkms/Makefile > $(DESTDIR)$(PKG_SRCTREE)/Makefile
	install -d $(DESTDIR)$(MODPROBEDIR) $(DESTDIR)$(PEERMEM_CONFDIR) $(DESTDIR)$(LIBEXECDIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(DOCDIR)
	$(PKG_SUBST) $(PKG_SRC)/modprobe.d/$(PKG_NAME).conf > $(DESTDIR)$(MODPROBEDIR)/$(PKG_NAME).conf
	chmod 0644 $(DESTDIR)$(MODPROBEDIR)/$(PKG_NAME).conf
	install -m 0644 $(PKG_SRC)/build.conf $(DESTDIR)$(PEERMEM_CONFDIR)/build.conf
	install -m 0755 $(PKG_SRC)/libexec/$(PKG_NAME)-guard $(DESTDIR)$(LIBEXECDIR)/$(PKG_NAME)-guard
	install -m 0755 $(PKG_SRC)/libexec/$(PKG_NAME)-rebuild $(DESTDIR)$(LIBEXECDIR)/$(PKG_NAME)-rebuild
	$(PKG_SUBST_UNIT) $(PKG_SRC)/systemd/$(PKG_NAME).service > $(DESTDIR)$(SYSTEMDUNITDIR)/$(PKG_NAME).service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$(PKG_NAME).service
	install -m 0644 $(PKG_SRC)/README.md $(DESTDIR)$(DOCDIR)/README.md
	if [ "$(PEERMEM_DROPIN)" = 1 ]; then \
		install -D -m 0644 $(PKG_SRC)/depmod.d/$(PKG_NAME)-dropin.conf \
			$(DESTDIR)$(DEPMODDIR)/$(PKG_NAME)-dropin.conf && \
		install -d $(DESTDIR)$(PKG_DKMS_FORCE_DIR) && \
		echo "$(PKG_DKMS_NAME)_version-override" > $(DESTDIR)$(PKG_DKMS_FORCE_DIR)/$(PKG_DKMS_NAME) && \
		chmod 0644 $(DESTDIR)$(PKG_DKMS_FORCE_DIR)/$(PKG_DKMS_NAME); fi

uninstall:
	rm -rf $(DESTDIR)$(PKG_SRCTREE)
	rm -f $(DESTDIR)$(MODPROBEDIR)/$(PKG_NAME).conf \
		$(DESTDIR)$(PEERMEM_CONFDIR)/build.conf \
		$(DESTDIR)$(LIBEXECDIR)/$(PKG_NAME)-guard \
		$(DESTDIR)$(LIBEXECDIR)/$(PKG_NAME)-rebuild \
		$(DESTDIR)$(SYSTEMDUNITDIR)/$(PKG_NAME).service \
		$(DESTDIR)$(DOCDIR)/README.md
	if [ "$(PEERMEM_DROPIN)" = 1 ]; then rm -f $(DESTDIR)$(PKG_DKMS_FORCE_DIR)/$(PKG_DKMS_NAME) \
		$(DESTDIR)$(DEPMODDIR)/$(PKG_NAME)-dropin.conf; fi
	-rmdir $(DESTDIR)$(PEERMEM_CONFDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(DOCDIR) 2>/dev/null

# --- DKMS on this machine ------------------------------------------------------
dkms-install:
	@test -z "$(DESTDIR)" || { echo "packaging: error: dkms-install works on this machine, not DESTDIR" >&2; exit 1; }
	$(MAKE) -f $(PKG_SRC)/packaging.mk install DESTDIR=
	if $(DKMS) status -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) | grep -q .; then \
		$(DKMS) remove -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) --all; fi
	$(DKMS) add -m $(PKG_DKMS_NAME) -v $(PKG_VERSION)
	$(DKMS) build -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) -k $(KVER) || { rc=$$?; \
		if [ $$rc = 77 ]; then echo "packaging: kernel $(KVER) has no CONFIG_RUST=y, or lacks what the line \
		above names: $(PKG_NAME) stays registered with DKMS and builds for that kernel once it can" >&2; \
		else echo "packaging: dkms build failed: see /var/lib/dkms/$(PKG_DKMS_NAME)/$(PKG_VERSION)/build/make.log" >&2; fi; \
		exit $$rc; }
	$(DKMS) install -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) -k $(KVER)
	-if [ -d /run/systemd/system ]; then $(SYSTEMCTL) daemon-reload; fi
	@echo "packaging: installed. Load now with 'modprobe $(PKG_MODULE)';" \
		"load at boot with 'systemctl enable --now $(PKG_NAME).service'."

dkms-remove:
	@test -z "$(DESTDIR)" || { echo "packaging: error: dkms-remove works on this machine, not DESTDIR" >&2; exit 1; }
	if $(DKMS) status -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) | grep -q .; then \
		$(DKMS) remove -m $(PKG_DKMS_NAME) -v $(PKG_VERSION) --all; fi
	$(MAKE) -f $(PKG_SRC)/packaging.mk uninstall DESTDIR=
	-if [ -d /run/systemd/system ]; then $(SYSTEMCTL) daemon-reload; fi

# --- Debian package of the DKMS source -------------------------------------
PKG_DEB_NAME := $(PKG_DKMS_NAME)-dkms
PKG_DEB_VERSION := $(PKG_VERSION)-1
PKG_DEB_MAINTAINER ?= nvidia-peermem-rs maintainers <maintainers@nvidia-peermem-rs.example>
PKG_DEB := $(PKG_OUT)/$(PKG_DEB_NAME)_$(PKG_DEB_VERSION)_all.deb

PKG_DEB_ROOT := $(PKG_OUT)/deb-root

deb: deb-tool
	rm -rf $(PKG_DEB_ROOT)
	$(MAKE) -f $(PKG_SRC)/packaging.mk install DESTDIR=$(PKG_DEB_ROOT) PREFIX=/usr \
		SYSCONFDIR=/etc USRSRCDIR=/usr/src LIBEXECDIR=/usr/libexec/$(PKG_NAME) \
		SYSTEMDUNITDIR=/lib/systemd/system DOCDIR=/usr/share/doc/$(PKG_DEB_NAME)
	$(PKG_SRC)/deb/build-deb.sh $(PKG_DEB_ROOT) $(PKG_DEB) $(PKG_DKMS_NAME) $(PKG_VERSION) \
		$(PKG_DEB_VERSION) "$(PKG_DEB_MAINTAINER)"

# --- Debian package of the tool: peermem-check_<ver>-1_<arch>.deb ---------------
# The documentation tells users to run peermem-check; `make deb` builds its
# package beside the DKMS one (which stays Architecture: all). The program is
# built here unless PKG_TOOL_BIN names one already built.
CARGO ?= cargo
PKG_TOOL_BIN ?=
PKG_TOOL_DEB = $(PKG_OUT)/peermem-check_$(PKG_DEB_VERSION)_$(shell dpkg --print-architecture).deb

deb-tool:
	@if [ -z "$(PKG_TOOL_BIN)" ]; then \
		echo "packaging: cargo build --release -p peermem-check"; \
		cd $(PKG_ROOT) && $(CARGO) build --release --locked -p peermem-check || exit 1; fi
	$(PKG_SRC)/deb/build-tool-deb.sh $(if $(PKG_TOOL_BIN),$(PKG_TOOL_BIN),$(PKG_ROOT)/target/release/peermem-check) \
		$(PKG_OUT)/deb-tool-root $(PKG_TOOL_DEB) $(PKG_VERSION) $(PKG_DEB_VERSION) \
		"$(PKG_DEB_MAINTAINER)" $(PKG_ROOT)/tools/peermem-check/README.md

# --- RPM of the DKMS source (RHEL / Rocky with EPEL's dkms, Fedora) -----------
# Source0 holds the same files as the Debian package's DKMS tree plus what
# `make install` needs (this file and packaging/'s data files); the spec's
# %install runs `make install` with RPM's directories. rpmbuild works in
# $(PKG_RPM_TOP), outside any git checkout's way (GIT_DIR in the spec).
PKG_RPM_TOP := $(PKG_OUT)/rpm
PKG_RPM_DIST := $(PKG_NAME)-$(PKG_VERSION)
PKG_RPM_DATA := packaging/packaging.mk packaging/build.conf packaging/README.md \
	packaging/dkms/dkms.conf packaging/dkms/Makefile \
	packaging/modprobe.d/$(PKG_NAME).conf packaging/depmod.d/$(PKG_NAME)-dropin.conf \
	packaging/libexec/$(PKG_NAME)-guard packaging/libexec/$(PKG_NAME)-rebuild \
	packaging/systemd/$(PKG_NAME).service LICENSE CHANGELOG.md
PKG_RPM := $(PKG_RPM_TOP)/RPMS/noarch/$(PKG_RPM_DIST)-1.noarch.rpm
# On a host whose packages are not in an RPM database (Debian), rpmbuild
# cannot see BuildRequires (make) installed: skip that check there.
PKG_RPMBUILD_FLAGS ?= $(if $(wildcard /etc/debian_version),--nodeps)

rpm: dkms-source
	@command -v rpmbuild >/dev/null || { echo "packaging: error: rpmbuild missing (Debian: apt install rpm)" >&2; exit 1; }
	rm -rf $(PKG_RPM_TOP)
	mkdir -p $(PKG_RPM_TOP)/SOURCES $(PKG_RPM_TOP)/SPECS $(PKG_RPM_TOP)/dist/$(PKG_RPM_DIST)
	cp -R $(PKG_STAGE)/VERSION $(PKG_STAGE)/Kbuild $(PKG_STAGE)/kmod $(PKG_STAGE)/ffi \
		$(PKG_RPM_TOP)/dist/$(PKG_RPM_DIST)/
	cd $(PKG_ROOT) && for f in $(PKG_RPM_DATA); do \
		install -D -m $$(if [ -x "$$f" ]; then echo 0755; else echo 0644; fi) \
			"$$f" "$(PKG_RPM_TOP)/dist/$(PKG_RPM_DIST)/$$f" || exit 1; done
	tar -C $(PKG_RPM_TOP)/dist --owner=0 --group=0 --sort=name -czf \
		$(PKG_RPM_TOP)/SOURCES/$(PKG_RPM_DIST).tar.gz $(PKG_RPM_DIST)
	sed -e 's/@VERSION@/$(PKG_VERSION)/g' -e 's/@DKMS_NAME@/$(PKG_DKMS_NAME)/g' \
		-e 's/@DROPIN@/$(PEERMEM_DROPIN)/g' -e 's/@MODULE@/$(PKG_MODULE)/g' \
		-e "s/@DATE@/$$(LC_ALL=C date -u -d "@$${SOURCE_DATE_EPOCH:-$$(date +%s)}" '+%a %b %d %Y')/g" \
		$(PKG_SRC)/rpm/$(PKG_NAME).spec.in > $(PKG_RPM_TOP)/SPECS/$(PKG_NAME).spec
	rpmbuild --define "_topdir $(PKG_RPM_TOP)" $(PKG_RPMBUILD_FLAGS) -bb $(PKG_RPM_TOP)/SPECS/$(PKG_NAME).spec
	@test -f $(PKG_RPM) && echo "packaging: $(PKG_RPM)"

# --- tests (nothing outside build/packaging and a temp dir is touched) --------
packaging-test:
	PKG_OUT=$(PKG_OUT) $(PKG_SRC)/tests/run.sh
