# nvidia-peermem-rs: top-level make targets.
#
#   make            build nvidia_peermem_rs.ko against KDIR (default: the running kernel)
#   make demo       set up, build, boot the test VM, load the simulated stack
#                   and the module, validate a GPUDirect transfer end to end
#   make test       set up, then every test (host + VM), ending "N passed, N failed, N skipped"
#   make check      the fast loop while working: host tests, lint, build, one VM boot
#   make deps       install the Debian packages and tools (run by demo/test)
#   make vm-test SUITE=name   build and boot one suite of tests/vm/suites/ (or matrix/)
#                   (PEERMEM_OFED_SRC=<mlnx-ofa_kernel tree>: against MLNX_OFED's
#                   real PeerDirect core, docs/real-core.md)
#   make bench      the in-VM benchmarks on every kernel's production config and the debug kernel
#                   (see tests/bench/README.md)
#   make bench-kernel  build (or find cached) the production-config bench kernel
#   make bench-trace   single-step a 64 KiB cycle of both clients on it: instructions by function
#   make soak       boot each race/stress suite SOAK_N (20) times, fresh seeds
#   make print-build-env  can this node's kernel (KDIR) build the module? if not, why
#
# KERNEL=<id> (vm-test, soak, test-kernel, bench-kernel, bench): a kernel of
# the test bed (tests/kernel/kernels) other than the primary 6.12, e.g.
#   make vm-test SUITE=module KERNEL=7.1-ubuntu   (Ubuntu 26.04's build and layout)
#   make vm-test SUITE=module KERNEL=7.2
# Every boot there runs its suites as that kernel can (tests/vm/cut-for-kernel.sh).

KDIR ?= /lib/modules/$(shell uname -r)/build
ifdef KERNEL
export PEERMEM_KERNEL := $(KERNEL)
endif
RESULTS ?= $(CURDIR)/results

.PHONY: all module modules clean deps test check demo vm-test bench bench-kernel bench-trace soak test-kernel clippy fmt-check print-build-env

all: module

# The kernel tree is checked first, by the DKMS tree's Makefile: a missing
# or Rust-less tree, or a rustc other than the kernel's, stops with the same
# one-line reason and fix as a DKMS build (packaging/README.md).
module modules:
	@$(MAKE) --no-print-directory -f packaging/dkms/Makefile KDIR=$(KDIR) \
		PEERMEM_BUILD_CONF=/dev/null $(if $(RUSTC),RUSTC=$(RUSTC)) check-kernel
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

clean:
	-$(MAKE) -C $(KDIR) M=$(CURDIR) clean
	rm -rf $(RESULTS)

deps:
	scripts/deps.sh

test-kernel: deps
	tests/kernel/build-kernel.sh

bench-kernel: deps
	tests/kernel/build-kernel.sh bench

test: deps
	RESULTS=$(RESULTS) tests/run-tests.sh

check: deps
	RESULTS=$(RESULTS) tests/check.sh

demo: deps
	RESULTS=$(RESULTS) tests/demo.sh

vm-test: deps
	@test -n "$(SUITE)" || { echo "usage: make vm-test SUITE=<NAME of tests/vm/{suites,matrix,check,soak-suites,selftest}/NAME.suite>"; exit 2; }
	@f=$$(ls tests/vm/suites/$(SUITE).suite tests/vm/matrix/$(SUITE).suite tests/vm/check/$(SUITE).suite \
		tests/vm/soak-suites/$(SUITE).suite \
		tests/vm/selftest/$(SUITE).suite 2>/dev/null | head -n 1); \
	test -n "$$f" || { echo "make vm-test: no suite $(SUITE) (tests/vm/{suites,matrix,check,soak-suites,selftest}/)"; exit 2; }; \
	kdir=$$(tests/build-all.sh) && \
	if [ -n "$(PEERMEM_OFED_SRC)" ]; then \
		PEERMEM_OFED_SRC="$(PEERMEM_OFED_SRC)" tests/realcore/vm-test.sh "$$kdir" $(RESULTS) $$f; \
	else rm -rf $(RESULTS)/suites-for-kernel && \
		cut=$$(tests/vm/cut-for-kernel.sh "$$kdir" $(RESULTS)/suites-for-kernel $$f) && \
		PEERMEM_VM_SUITES=$(RESULTS)/suites-for-kernel tests/run-vm-suites.sh "$$kdir" $(RESULTS) $$cut; fi

bench: deps
	RESULTS=$(RESULTS) tests/bench/run-bench.sh

bench-trace: deps
	RESULTS=$(RESULTS) tests/bench/run-trace.sh

soak: deps
	RESULTS=$(RESULTS) tests/soak.sh

print-build-env:
	@KDIR=$(KDIR) scripts/print-build-env.sh

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

fmt-check:
	cargo fmt --all -- --check

-include packaging/packaging.mk
