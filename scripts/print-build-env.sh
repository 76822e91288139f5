#!/usr/bin/env bash
# `make print-build-env`: can this node's kernel build nvidia_peermem_rs?
# One screen: each requirement, what was found, and a closing verdict with
# what to do. Reads the kernel build tree KDIR (default: the running
# kernel's /lib/modules/$(uname -r)/build); RUSTC, BINDGEN and CC override
# the tools looked for (as they would in the kernel make).
#
# It also says which PeerDirect core (ib_uverbs or ib_core, or an OFED
# tree) and which nvidia.ko the build takes for this kernel, whether the
# loaded RDMA stack has PeerDirect, and whether pahole is needed.
#
# On Ubuntu (ID=ubuntu in /etc/os-release) it also names the packages to
# install, one `apt install` line: linux-headers-<release>,
# linux-lib-rust-<release> (the kernel's compiled Rust crates, under
# /usr/src/linux-lib-rust-<release>/rust), rustc-1.NN (the release the
# kernel records in CONFIG_RUSTC_VERSION_TEXT), bindgen, libclang-dev,
# dkms and dwarves (pahole, for kernels with BTF); and it says when the kernel cannot build Rust modules at all (Rust
# off, or a flavour built without linux-lib-rust): boot the generic kernel.
#
# PEERMEM_SYSROOT=<dir> reads /etc/os-release, /boot, /usr/src, /usr/lib
# and /lib/modules under <dir> (tests); KVER=<release> names the kernel
# when it is not the running one.
# Exit 0 when the module can be built here, 1 when it cannot.
set -uo pipefail
root=${PEERMEM_SYSROOT:-}
kver=${KVER:-}
if [ -z "$kver" ] && [ -n "${KDIR:-}" ] && [ -f "$KDIR/include/config/kernel.release" ]; then
	kver=$(cat "$KDIR/include/config/kernel.release")
fi
[ -n "$kver" ] || kver=$(uname -r)
kdir=${KDIR:-$root/lib/modules/$kver/build}
bindgen=${BINDGEN:-bindgen}
bad=0
warn=0
# Ubuntu packages to install, in `apt install` order.
apt=()
need() {
	local p
	for p in "$@"; do
		[[ " ${apt[*]} " == *" $p "* ]] || apt+=("$p")
	done
}

row() { printf '  %-5s %-22s %s\n' "$1" "$2" "$3"; }
ok() { row ok "$1" "$2"; }
no() { row NO "$1" "$2"; bad=$((bad + 1)); }
note() { row warn "$1" "$2"; warn=$((warn + 1)); }

# has_libclang: libclang, which bindgen loads, is installed.
has_libclang() {
	compgen -G "$root/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null ||
		compgen -G "$root/usr/lib/*-linux-gnu/libclang-*.so*" >/dev/null ||
		compgen -G "$root/usr/lib64/libclang.so*" >/dev/null
}

# The kernel's config: the build tree's, else the one the kernel package
# installs in /boot (Ubuntu nodes without the headers still have it).
kconfig=$kdir/.config
[ -f "$kconfig" ] || kconfig=$root/boot/config-$kver
# Else the running kernel's own config (CONFIG_IKCONFIG_PROC), where the
# kernel came with no /boot nor headers (a cloud provider's, say).
running=$(cat "$root/proc/sys/kernel/osrelease" 2>/dev/null || uname -r)
if [ ! -f "$kconfig" ] && [ "$kver" = "$running" ] && [ -f "$root/proc/config.gz" ]; then
	proc_config=$(mktemp)
	trap 'rm -f "$proc_config"' EXIT
	gzip -dc "$root/proc/config.gz" >"$proc_config" 2>/dev/null && kconfig=$proc_config
fi
# conf NAME: the value of CONFIG_NAME in the kernel's config ("" if unset).
conf() {
	sed -n "s/^CONFIG_$1=//p" "$kconfig" 2>/dev/null | sed 's/^"\(.*\)"$/\1/' | head -n 1
}

# Ubuntu, and the flavour of its kernel (7.0.0-14-generic: generic). A
# kernel on Ubuntu whose release is not of that shape is not Ubuntu's: its
# archive has no headers nor lib-rust package for it, and none is named.
os_id=$(sed -n 's/^ID=//p' "$root/etc/os-release" 2>/dev/null | tr -d '"' | head -n 1)
os_ver=$(sed -n 's/^VERSION_ID=//p' "$root/etc/os-release" 2>/dev/null | tr -d '"' | head -n 1)
flavour=
if [ "$os_id" = ubuntu ] && [[ $kver =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?-[0-9]+-(.+)$ ]]; then
	flavour=${BASH_REMATCH[2]}
fi
# The generic kernel of the release: 24.04's GA 6.8 is older than the
# module supports, its HWE kernel is not.
generic=linux-generic
[ "$os_ver" != 24.04 ] || generic=linux-generic-hwe-24.04
boot_generic="boot the generic kernel: sudo apt install $generic, reboot into it, then run this again"
lib_rust=$root/usr/src/linux-lib-rust-$kver/rust

echo "nvidia_peermem_rs: can this node build the module? (KDIR=$kdir)"
[ -z "$os_id" ] || echo "  os: $os_id ${os_ver}${flavour:+, kernel flavour $flavour}"
[ "$os_id" != ubuntu ] || [ -n "$flavour" ] ||
	echo "  os: kernel $kver is not one of Ubuntu's (its archive has no packages for it)"

# A kernel without Rust, or an Ubuntu flavour built without linux-lib-rust
# (DGX OS's linux-nvidia, the cloud kernels): nothing to install helps.
if [ -f "$kconfig" ] && [ "$(conf RUST)" != y ]; then
	why=
	[[ $flavour != nvidia* ]] || why=" (DGX OS's linux-nvidia kernels are built without Rust)"
	no "CONFIG_RUST" "not set in $kver$why: this kernel cannot build or load Rust modules"
	if [ -n "$flavour" ]; then
		echo "verdict: NO: $boot_generic"
	elif [ "$os_id" = ubuntu ]; then
		echo "verdict: NO: boot a kernel built with CONFIG_RUST=y, such as Ubuntu's generic kernel (sudo apt install $generic, reboot into it, then run this again)"
	else
		echo "verdict: NO: boot a kernel built with CONFIG_RUST=y (README: 'Does it run on my node?')"
	fi
	exit 1
fi
case ${flavour%-64k} in
azure | gcp | gke | aws | oracle | nvidia)
	if [ ! -e "$lib_rust/libkernel.rmeta" ] && [ ! -e "$kdir/rust/libkernel.rmeta" ]; then
		no "linux-lib-rust" "Ubuntu builds its -${flavour%-64k} kernels without linux-lib-rust: no Rust crates to build against"
		echo "verdict: NO: $boot_generic"
		exit 1
	fi
	;;
esac

if [ ! -f "$kdir/.config" ] || [ ! -f "$kdir/Makefile" ]; then
	if [ -n "$flavour" ]; then
		no "kernel build tree" "none at $kdir"
		need "linux-headers-$kver" "linux-lib-rust-$kver"
		rpkg=$(sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\..*/rustc-\1.\2/p' <<<"$(conf RUSTC_VERSION_TEXT)")
		[ -z "$rpkg" ] || command -v "$rpkg" >/dev/null || need "$rpkg"
		command -v "$bindgen" >/dev/null || need bindgen
		has_libclang || need libclang-dev
		command -v dkms >/dev/null || need dkms
		# Ubuntu's headers carry a BTF vmlinux: the build will run pahole.
		[ "$(conf DEBUG_INFO_BTF_MODULES)" != y ] || command -v pahole >/dev/null || need dwarves
		echo "install: sudo apt install ${apt[*]}"
		echo "verdict: NO: install the packages above, then run this again"
		exit 1
	fi
	no "kernel build tree" "none at $kdir (install the headers package of your kernel, or set KDIR)"
	echo "verdict: NO: no kernel build tree"
	exit 1
fi
release=$(cat "$kdir/include/config/kernel.release" 2>/dev/null || echo '?')
ok "kernel" "$release ($kdir)"

# Architecture: x86_64 and arm64 (Kbuild refuses the others).
if [ "$(conf X86_64)" = y ]; then
	ok "architecture" "x86_64"
elif [ "$(conf ARM64)" = y ]; then
	note "architecture" "arm64: supported by Kbuild, never built nor tested by this project"
else
	no "architecture" "$(sed -n 's/^# Linux\/\([^ ]*\) .*/\1/p' "$kdir/.config" | head -n 1): unsupported (x86_64, arm64 only)"
fi

# Rust support in the kernel.
if [ "$(conf RUST)" = y ]; then
	ok "CONFIG_RUST" "y"
else
	no "CONFIG_RUST" "not set: this kernel cannot load Rust modules (rebuild it with CONFIG_RUST=y)"
fi

# The C compiler the kernel was built with.
# GCC's version text starts with the command (gcc-12,
# x86_64-linux-gnu-gcc-16); clang's does not: clang-<major>, else clang.
cc_text=$(conf CC_VERSION_TEXT)
if [ "$(conf CC_IS_CLANG)" = y ]; then
	cc_kind=clang
	major=$(($(conf CLANG_VERSION) / 10000))
	cc_bin=${CC:-clang-$major}
	command -v "$cc_bin" >/dev/null || [ -n "${CC:-}" ] || cc_bin=clang
else
	cc_kind=gcc
	cc_bin=${CC:-$(awk '{ print $1 }' <<<"$cc_text")}
fi
if [ -z "$cc_text" ]; then
	note "C compiler" "CONFIG_CC_VERSION_TEXT unset"
elif command -v "$cc_bin" >/dev/null; then
	ok "C compiler" "$cc_text ($cc_kind; $cc_bin found$([ "$cc_kind" = gcc ] || echo ": build with LLVM=-$major"))"
else
	no "C compiler" "$cc_text: '$cc_bin' not found (install it, or pass CC=; LLVM=1 for clang kernels)"
fi

# rustc: the very version the kernel's Rust crates were compiled with.
# Distributions ship it versioned (Ubuntu: rustc-1.93 for "rustc 1.93.1
# ..."): that name first, unless RUSTC says which.
want_rustc=$(conf RUSTC_VERSION_TEXT)
rustc_pkg=$(sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\..*/rustc-\1.\2/p' <<<"$want_rustc")
rustc=${RUSTC:-}
if [ -z "$rustc" ]; then
	rustc=rustc
	[ -z "$rustc_pkg" ] || ! command -v "$rustc_pkg" >/dev/null || rustc=$rustc_pkg
fi
have_rustc=$("$rustc" --version 2>/dev/null || true)
if [ -z "$have_rustc" ]; then
	no "rustc" "'$rustc' not found (the kernel wants: ${want_rustc:-?})"
	[ -z "$rustc_pkg" ] || need "$rustc_pkg"
elif [ -n "$want_rustc" ] && [ "$have_rustc" != "$want_rustc" ]; then
	no "rustc" "$have_rustc, the kernel's is $want_rustc (.rmeta files only load in the rustc that wrote them: E0514)"
	[ -z "$rustc_pkg" ] || need "$rustc_pkg"
else
	ok "rustc" "$have_rustc (as the kernel's)"
fi

# bindgen (this module runs it over its own C headers).
want_bindgen=$(conf BINDGEN_VERSION_TEXT)
have_bindgen=$("$bindgen" --version 2>/dev/null | head -n 1 || true)
if [ -z "$have_bindgen" ]; then
	no "bindgen" "'$bindgen' not found (Ubuntu: apt install bindgen; else cargo install bindgen-cli; the kernel used ${want_bindgen:-?})"
	need bindgen
elif [ -n "$want_bindgen" ] && [ "$have_bindgen" != "$want_bindgen" ]; then
	note "bindgen" "$have_bindgen, the kernel's is $want_bindgen (usually fine: only our own bindings)"
else
	ok "bindgen" "$have_bindgen"
fi

# libclang, which bindgen loads at run time.
if has_libclang; then
	ok "libclang" "found (bindgen loads it)"
else
	no "libclang" "not found: bindgen cannot run (Debian/Ubuntu: apt install libclang-dev)"
	need libclang-dev
fi

# The kernel crate as compiled: what an out-of-tree Rust module links to.
# Ubuntu moves it out of the headers into linux-lib-rust-<release>, which
# the headers' rust link points to; on HWE kernels that link names a
# directory no package installs, and the build looks in linux-lib-rust
# itself.
rustdir=$kdir/rust
hwe_fix=
if [ -L "$rustdir" ] && [ ! -e "$rustdir" ]; then
	target=$(readlink "$rustdir")
	missing_dir=${target%/rust}
	if [[ $missing_dir == ../* ]] && [[ ${missing_dir#../} != */* ]]; then
		hwe_fix="sudo ln -s linux-lib-rust-$kver /usr/src/${missing_dir#../}"
	fi
	rustdir=$lib_rust
	note "rust link" "$kdir/rust points to the missing $target (Ubuntu HWE packaging): the build uses $lib_rust${hwe_fix:+; other out-of-tree Rust builds need: $hwe_fix}"
elif [ ! -e "$rustdir/libkernel.rmeta" ] && [ -e "$lib_rust/libkernel.rmeta" ]; then
	rustdir=$lib_rust
fi
missing=()
for f in libkernel.rmeta libcore.rmeta libmacros.so libffi.rmeta; do
	[ -e "$rustdir/$f" ] || missing+=("rust/$f")
done
[ "$(conf X86_64)" != y ] || [ -e "$kdir/scripts/target.json" ] || missing+=(scripts/target.json)
if [ ${#missing[@]} -eq 0 ]; then
	ok "Rust build artefacts" "$rustdir: libkernel.rmeta, libmacros.so, ... present"
elif [ -n "$flavour" ]; then
	no "Rust build artefacts" "missing ${missing[*]} (Ubuntu ships them in linux-lib-rust-$kver)"
	need "linux-lib-rust-$kver"
else
	no "Rust build artefacts" "missing ${missing[*]} (distribution headers packages ship none: docs/compatibility.md)"
fi

# DKMS builds the module for each new kernel.
if [ "$os_id" = ubuntu ] && ! command -v dkms >/dev/null; then
	no "dkms" "not installed: the package builds the module through it"
	need dkms
fi

# pahole: with CONFIG_DEBUG_INFO_BTF_MODULES=y and a vmlinux in the build
# tree (Ubuntu's headers ship a BTF-only one), Kbuild runs pahole on every
# module it links, and stops with "pahole: not found" without it.
if [ "$(conf DEBUG_INFO_BTF_MODULES)" = y ] &&
	{ [ -f "$kdir/vmlinux" ] || { [ "$kver" = "$running" ] && [ -e "$root/sys/kernel/btf/vmlinux" ]; }; }; then
	kpahole=$(conf PAHOLE_VERSION)
	have_pahole=$(pahole --version 2>/dev/null | sed 's/^v//; s/\.//' || true)
	if [ -z "$have_pahole" ]; then
		no "pahole" "not found: the kernel has BTF for modules (CONFIG_DEBUG_INFO_BTF_MODULES=y, $kdir/vmlinux), so the build runs pahole (Debian/Ubuntu: apt install dwarves)"
		need dwarves
	elif [ -n "$kpahole" ] && [ "$have_pahole" -lt "$kpahole" ] 2>/dev/null; then
		note "pahole" "version $have_pahole is older than the kernel's ($kpahole): its BTF may be refused at load (CONFIG_MODULE_ALLOW_BTF_MISMATCH=$(conf MODULE_ALLOW_BTF_MISMATCH))"
	else
		ok "pahole" "version $have_pahole (the kernel has BTF for modules)"
	fi
fi

# The PeerDirect core and the NVIDIA driver, as DKMS's make finds them
# (packaging/dkms/Makefile): a MLNX_OFED / DOCA-OFED tree whose
# Module.symvers lists the PeerDirect symbol, else the installed ib_uverbs
# (OFED 24.07 on) or ib_core (older) that exports it, the file modprobe
# would load for this kernel (depmod's choice, read back with modinfo).
pd_sym=ib_register_peer_memory_client
# modfile NAME: the file modprobe would load for NAME on kernel $kver.
modfile() { modinfo ${root:+-b "$root"} -k "$kver" -F filename "$1" 2>/dev/null | grep '^/' | head -n 1; }
# ko_exports FILE SYMBOL: the module (compressed or not) exports SYMBOL.
ko_exports() {
	local t rc=1
	t=$(mktemp) || return 1
	case "$1" in
	*.zst) zstd -qdc "$1" ;; *.xz) xz -dc "$1" ;; *.gz) gzip -dc "$1" ;; *) cat "$1" ;;
	esac >"$t" 2>/dev/null && objdump -t "$t" 2>/dev/null | grep -q "[[:space:]]__ksymtab_$2\$" && rc=0
	rm -f "$t"
	return $rc
}
if ! command -v modinfo >/dev/null || ! command -v objdump >/dev/null; then
	note "PeerDirect core" "cannot tell: modinfo (kmod) or objdump (binutils) missing"
else
	pd_tree=
	for t in "$root/usr/src/ofa_kernel-dkms/$(uname -m)/$kver" "$root/usr/src/ofa_kernel/$(uname -m)/$kver" \
		"$root/usr/src/ofa_kernel-dkms/$kver" "$root/usr/src/ofa_kernel/$kver" "$root/usr/src/ofa_kernel/default"; do
		if grep -q "[[:space:]]${pd_sym}[[:space:]]" "$t/Module.symvers" 2>/dev/null; then
			pd_tree=$t
			break
		fi
	done
	pd_ko=
	pd_seen=()
	for m in ib_uverbs ib_core; do
		f=$(modfile "$m")
		[ -n "$f" ] || continue
		pd_seen+=("$f")
		if [ -z "$pd_ko" ] && ko_exports "$f" "$pd_sym"; then pd_ko=$f; fi
	done
	[ ${#pd_seen[@]} -eq 0 ] || ok "RDMA modules" "modprobe loads ${pd_seen[*]}"
	if [ -n "$pd_tree" ]; then
		ok "PeerDirect core" "$pd_tree/Module.symvers lists $pd_sym"
	elif [ -n "$pd_ko" ]; then
		ok "PeerDirect core" "$pd_ko exports $pd_sym"
	else
		no "PeerDirect core" "${pd_seen[*]:+modprobe would load ${pd_seen[*]}, without $pd_sym (the inbox RDMA stack),}${pd_seen[*]:-no ib_uverbs or ib_core module for $kver,} and no ofa_kernel tree lists it: install DOCA-OFED (Ubuntu 26.04: Canonical's doca-ofed packages or NVIDIA's DOCA-Host), then reboot"
	fi
	# The loaded stack: a core installed since boot is only used once the
	# inbox one is out (reboot, or unload every RDMA module and load again).
	if [ "$kver" = "$running" ] && { [ -d "$root/sys/module/ib_core" ] || [ -d "$root/sys/module/ib_uverbs" ]; }; then
		loaded=$(grep -m 1 "[[:space:]]$pd_sym\([[:space:]]\|$\)" "$root/proc/kallsyms" 2>/dev/null)
		if [ -n "$loaded" ]; then
			ok "loaded RDMA stack" "has PeerDirect ($pd_sym${loaded##*"$pd_sym"})"
		elif [ -r "$root/proc/kallsyms" ] && [ -n "$pd_ko$pd_tree" ]; then
			note "loaded RDMA stack" "has no PeerDirect (the inbox ib_uverbs/ib_core, loaded at boot), though the installed one has: reboot (or reload the RDMA stack) before loading the module"
		elif [ -r "$root/proc/kallsyms" ]; then
			note "loaded RDMA stack" "has no PeerDirect ($pd_sym not in /proc/kallsyms)"
		fi
	fi
	nv=$(modfile nvidia)
	if [ -n "$nv" ]; then
		ok "NVIDIA driver" "modprobe loads $nv"
	elif compgen -G "$root/usr/src/nvidia-*/Module.symvers" >/dev/null; then
		ok "NVIDIA driver" "no nvidia module for $kver; a built driver tree: $(compgen -G "$root/usr/src/nvidia-*/Module.symvers" | head -n 1)"
	else
		no "NVIDIA driver" "no nvidia module for $kver (modinfo -k $kver nvidia) and no built /usr/src/nvidia-*: install the driver (Ubuntu: sudo ubuntu-drivers install --gpgpu)"
	fi
	# Which nvidia-peermem modprobe loads: the drop-in (updates/dkms/
	# nvidia_peermem.ko, made to win by its /etc/depmod.d line) or the
	# driver's own, which without an OFED tree at its build is a stub
	# that refuses to load.
	pm=$(modfile nvidia-peermem)
	case "$pm" in
	'') ;;
	*/updates/dkms/nvidia_peermem.ko*) ok "nvidia-peermem" "modprobe loads the drop-in, $pm" ;;
	*)
		if compgen -G "$root/lib/modules/$kver/updates/dkms/nvidia_peermem.ko*" >/dev/null; then
			note "nvidia-peermem" "modprobe loads $pm, not the installed drop-in: is /etc/depmod.d/nvidia-peermem-rs-dropin.conf there? then run depmod $kver"
		else
			ok "nvidia-peermem" "modprobe loads $pm (the driver's) until the drop-in is installed, which then wins"
		fi
		;;
	esac
fi

# Informational: what the loader will ask of the module.
[ -f "$kdir/Module.symvers" ] || note "Module.symvers" "missing: undefined kernel symbols cannot be checked at build time"
[ "$(conf MODULE_SIG_FORCE)" != y ] || note "module signing" "CONFIG_MODULE_SIG_FORCE=y: sign the module (DKMS's MOK key) or it will not load"

if [ "$bad" -eq 0 ]; then
	echo "verdict: YES: 'make KDIR=$kdir' (or the DKMS package) can build nvidia_peermem_rs here$( [ "$warn" -eq 0 ] || echo " ($warn warning(s) above)")"
	exit 0
fi
[ ${#apt[@]} -eq 0 ] || echo "install: sudo apt install ${apt[*]}"
echo "verdict: NO: $bad requirement(s) not met (NO above); see docs/compatibility.md"
exit 1
