# shellcheck shell=bash
# The toolchain each kernel of the test matrix and every module built
# against it use. Sourced by the build scripts and the top-level Makefile's
# helpers. PEERMEM_KERNEL (make ... KERNEL=<id>) picks the kernel; the
# table is tests/kernel/kernels:
#   6.12  Linux 6.12 LTS, clang-built (LLVM=-19): the primary test kernel
#   7.2   the newest stable Linux Debian ships as source, GCC-built as
#         distribution kernels are
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
PEERMEM_BINDGEN="${PEERMEM_BINDGEN:-$(command -v bindgen || echo "$HOME/.cargo/bin/bindgen")}"
PEERMEM_RUST_LIB_SRC=/usr/src/rustc-1.96.0/library
PEERMEM_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/nvidia-peermem-rs"
PEERMEM_KERNELS_TABLE="$(dirname "${BASH_SOURCE[0]}")/kernels"
# The primary kernel: the table's first.
PEERMEM_PRIMARY_KERNEL="$(awk '!/^#/ && NF { print $1; exit }' "$PEERMEM_KERNELS_TABLE")"
PEERMEM_KERNEL="${PEERMEM_KERNEL:-$PEERMEM_PRIMARY_KERNEL}"

# peermem_kernel_field <id> <column>: a column of the kernel table
# (2 compiler, 3 source tarball, 4 Debian package of the source).
peermem_kernel_field() {
	awk -v k="$1" -v c="$2" '!/^#/ && $1 == k { print $c; found = 1 }
		END { exit !found }' "$PEERMEM_KERNELS_TABLE"
}
if ! PEERMEM_KERNEL_CC="$(peermem_kernel_field "$PEERMEM_KERNEL" 2)"; then
	echo "error: no kernel '$PEERMEM_KERNEL' in $PEERMEM_KERNELS_TABLE (known:" \
		"$(awk '!/^#/ && NF { printf "%s ", $1 }' "$PEERMEM_KERNELS_TABLE"))" >&2
	return 2
fi
PEERMEM_KERNEL_SRC_TAR="$(peermem_kernel_field "$PEERMEM_KERNEL" 3)"
PEERMEM_KERNEL_SRC_TAR="${PEERMEM_KERNEL_SRC_TAR/#\$PEERMEM_CACHE/$PEERMEM_CACHE}"
case $PEERMEM_KERNEL_CC in
clang-*) PEERMEM_KMAKE_ARGS=("LLVM=-${PEERMEM_KERNEL_CC#clang-}") ;;
gcc-*) PEERMEM_KMAKE_ARGS=("CC=$PEERMEM_KERNEL_CC" "HOSTCC=$PEERMEM_KERNEL_CC") ;;
*)
	echo "error: kernel $PEERMEM_KERNEL: unknown compiler '$PEERMEM_KERNEL_CC'" >&2
	return 2
	;;
esac
PEERMEM_KMAKE_ARGS+=(RUSTC=/usr/bin/rustc "BINDGEN=$PEERMEM_BINDGEN"
	"RUST_LIB_SRC=$PEERMEM_RUST_LIB_SRC")
# Where the modules built against this kernel are: the repository itself
# for the primary kernel, a copy of the module and fixture sources under
# build/ for any other (so each kernel's objects stay apart and a warm
# build of either rebuilds nothing).
PEERMEM_MODULE_TREE_REL=.
[ "$PEERMEM_KERNEL" = "$PEERMEM_PRIMARY_KERNEL" ] || PEERMEM_MODULE_TREE_REL="build/kernel-$PEERMEM_KERNEL"
export PEERMEM_BINDGEN PEERMEM_RUST_LIB_SRC PEERMEM_CACHE PEERMEM_KERNEL PEERMEM_PRIMARY_KERNEL
export PEERMEM_MODULE_TREE_REL
