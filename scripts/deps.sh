#!/usr/bin/env bash
# `make deps`: install everything the build, the VM test bed and the tools
# need on a Debian 12 host, then check the kernel toolchain. Idempotent: a
# second run installs nothing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

apt_packages=(
	linux-source-6.12 rustc-web rust-web-src cargo-web rust-web-clippy
	clang-19 lld-19 llvm-19 libclang-19-dev
	qemu-system-x86 busybox-static
	flex bison bc libelf-dev libssl-dev cpio kmod make gcc libc6-dev
	# the Ubuntu-shaped kernel (tests/ubuntu/): symbol versions from DWARF
	# (gendwarfksyms needs libdw), modules installed as .ko.zst
	libdw-dev zstd
	libibverbs-dev rdma-core pkg-config python3 xz-utils fonts-dejavu-core
	# peermem-check's verbs types (rdma-sys, its build script's bindgen
	# runs on the libclang above: third_party/rdma-sys/README.md) need librdmacm
	librdmacm-dev
	# suite verbs (soft-RoCE in the VM): perftest, libibverbs tools, rxe provider, ip/rdma
	perftest ibverbs-utils ibverbs-providers iproute2
	# make bench-trace: single-steps the bench VM through QEMU's gdbstub
	gdb
)
if [ -f "$repo/packaging/deps.txt" ]; then
	while IFS= read -r p; do
		case "$p" in '' | '#'*) ;; *) apt_packages+=("$p") ;; esac
	done < "$repo/packaging/deps.txt"
fi
bindgen_version=0.73.2

if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
	cat >&2 <<EOM
error: this host has no apt/dpkg. nvidia-peermem-rs's test bed is set up for
Debian 12 (bookworm). On another distribution install the equivalents of:
  ${apt_packages[*]}
and bindgen-cli $bindgen_version (cargo install bindgen-cli --version $bindgen_version),
then run 'make test' again.
EOM
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "error: 'make deps' installs Debian packages and must run as root" >&2
	exit 1
fi

missing=()
for p in "${apt_packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
else
	echo "deps: all Debian packages present" >&2
fi

# A cargo for the userspace workspace: rustup's if present, else Debian's.
if ! command -v cargo >/dev/null; then
	if [ -x /usr/bin/cargo-web ]; then
		ln -sf /usr/bin/cargo-web /usr/local/bin/cargo
	else
		echo "error: no cargo found (install rustup or Debian's cargo-web)" >&2
		exit 1
	fi
fi

bindgen="$(command -v bindgen || echo "$HOME/.cargo/bin/bindgen")"
if [ ! -x "$bindgen" ] || ! "$bindgen" --version 2>/dev/null | grep -q "bindgen $bindgen_version"; then
	echo "deps: installing bindgen-cli $bindgen_version" >&2
	cargo install -q bindgen-cli --version "$bindgen_version" --locked
fi

# The kernel's own check that rustc, bindgen and the Rust sources fit.
# shellcheck source=../tests/kernel/toolchain.sh
. "$repo/tests/kernel/toolchain.sh"
src="$PEERMEM_CACHE/src/linux-source-6.12"
if [ ! -f "$src/Makefile" ]; then
	mkdir -p "$PEERMEM_CACHE/src"
	tar -C "$PEERMEM_CACHE/src" -xf /usr/src/linux-source-6.12.tar.xz
fi
if ! make -s -C "$src" "${PEERMEM_KMAKE_ARGS[@]}" rustavailable >&2; then
	echo "error: the kernel says Rust is not available with this toolchain (see above)" >&2
	exit 1
fi
# NVIDIA's own nvidia-peermem sources and headers, the ABI oracle of
# `make test` (tests/nvidia/abi-oracle.sh): downloaded once from Debian's
# archive (nothing installed), then cached. A failed download stops here.
if ! "$repo/tests/nvidia/fetch-nvidia-src.sh"; then
	echo "error: NVIDIA's sources could not be fetched (see above); make test needs them" >&2
	exit 1
fi
echo "deps: ok" >&2
