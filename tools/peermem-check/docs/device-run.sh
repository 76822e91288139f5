#!/bin/sh
# The real-GPU run recorded in real-gpu-run.md: run on a GPU node from the
# repository root, with a release peermem-check at target/release/.
#   OUT=/some/dir tools/peermem-check/docs/device-run.sh
B=${B:-target/release/peermem-check}
OUT=${OUT:-/tmp/peermem-check-run}
mkdir -p "$OUT"
step() {
	echo
	echo "\$ $*"
	"$@"
	echo "[exit status $?]"
}
{
	echo "==== node"
	uname -r
	head -n 1 /proc/driver/nvidia/version 2>/dev/null
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv 2>/dev/null
	nvidia-smi -q -d MEMORY 2>/dev/null | grep -A3 BAR1
	gpu=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -n 1 | tr 'A-Z' 'a-z' | sed 's/^0000//')
	echo "GPU sysfs: $gpu"; ls -l "/sys/bus/pci/devices/$gpu/" 2>&1 | grep resource
	ls /sys/class/infiniband 2>&1
	ldconfig -p 2>/dev/null | grep -E 'libcuda.so.1|libibverbs.so.1'
	ldd "$B"
	step "$B" --version
	step "$B" doctor
	step "$B" doctor --json
	step "$B" validate --size 1M,4M --offset 0,4097 --iterations 2 --seed 42
	step "$B" validate --json --size 1M --seed 42
	step "$B" validate --path dmabuf --size 2M --seed 42
	step "$B" bench --sizes 64K,1M,16M,64M --iterations 20 --out "$OUT"
	step "$B" validate --backend sim
	step "$B" validate --memory host --size 1M --seed 42
	# A software RDMA device (soft-RoCE), if this kernel and container allow
	# it: the verbs half then runs for real.
	if [ -n "${TRY_RXE:-}" ]; then
		nd=$(ip -o link 2>/dev/null | awk -F': ' '$2 != "lo" {print $2; exit}' | cut -d@ -f1)
		echo "soft-RoCE on $nd:"
		modprobe rdma_rxe 2>&1 | tail -n 1
		rdma link add rxe0 type rxe netdev "$nd" 2>&1 | tail -n 1
		ls /sys/class/infiniband 2>&1
		if [ -d /sys/class/infiniband/rxe0 ]; then
			step "$B" doctor
			step "$B" validate --size 1M --offset 0,4097 --seed 42
			step "$B" bench --sizes 64K,1M,16M --iterations 10 --out "$OUT/rxe"
		fi
	fi
} >"$OUT/run.txt" 2>&1
cat "$OUT/run.txt"
