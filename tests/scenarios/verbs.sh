#!/bin/sh
# Real RDMA userspace against a real verbs stack (issue 14): soft-RoCE (rxe)
# on a dummy netdev, rdma-core's libibverbs with its rxe provider, perftest
# as the independent reference, then peermem-check's real verbs backend.
#   verbs.sh part=perftest|validate
# part=perftest: rxe0 comes up ACTIVE, loopback ib_write_bw and ib_read_bw
#   over RoCEv2/IPv4 move data (figures: their average bandwidth, msg rate).
# part=validate: peermem-check validate --backend real --memory host (the
#   dma-buf path skipped: rxe refuses ibv_reg_dmabuf_mr), its fault paths
#   and bench (with the dynamic real-backend build in the image).
. /scenarios/lib.sh

part=perftest
for a in "$@"; do
	case "$a" in
	part=*) part=${a#part=} ;;
	*) fail "unknown argument $a" ;;
	esac
done

R=/opt/rdma/bin
[ -x $R/ib_write_bw ] || fail "no rdma-core userspace in the image (/opt/rdma/bin; scripts/deps.sh installs perftest)"
export PATH=$R:$PATH

# rxe_up: rxe0 on dummy0, port ACTIVE; sets gid (the RoCEv2 GID index of
# 10.77.0.1). Loopback and a dummy netdev with an IPv4 address: rxe's
# RoCEv2 GID for it is ::ffff:10.77.0.1, and a QP whose peer is that GID
# never leaves rxe. The first scenario of the boot creates them; later ones
# reuse them (and part=validate makes rxe0 again after removing it).
rxe_up() {
	if [ ! -d /sys/class/infiniband/rxe0 ]; then
		ip link set lo up || fail "ip link set lo up"
		# The built-in dummy driver makes dummy0 at boot (numdummies=1).
		[ -d /sys/class/net/dummy0 ] || ip link add dummy0 type dummy ||
			fail "cannot create dummy0 (CONFIG_DUMMY?)"
		ip -4 addr show dev dummy0 | grep -q 10.77.0.1 ||
			ip addr add 10.77.0.1/24 dev dummy0 || fail "cannot address dummy0"
		ip link set dummy0 up || fail "cannot bring dummy0 up"
		rdma link add rxe0 type rxe netdev dummy0 ||
			fail "rdma link add rxe0 failed (CONFIG_RDMA_RXE?)"
	fi
	state=
	i=0
	while [ $i -lt 20 ]; do
		state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
		case "$state" in *ACTIVE*) break ;; esac
		sleep 0.5
		i=$((i + 1))
	done
	case "$state" in *ACTIVE*) ;; *) fail "rxe0 port 1 is not ACTIVE: '$state'" ;; esac
	ibv_devices 2>&1 | grep -q rxe0 || fail "ibv_devices does not list rxe0 (rxe provider not found?)"
	log "$(rdma link show 2>&1 | tr '\n' ' ')"

	# The RoCEv2 GID of the IPv4 address.
	gid=
	for t in /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/*; do
		n=${t##*/}
		g=$(cat "/sys/class/infiniband/rxe0/ports/1/gids/$n" 2>/dev/null)
		if [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] && [ "$g" = "0000:0000:0000:0000:0000:ffff:0a4d:0001" ]; then
			gid=$n
			break
		fi
	done
	[ -n "$gid" ] || fail "no RoCE v2 GID for 10.77.0.1 on rxe0"
	log "rxe0 ACTIVE, RoCEv2 GID index $gid"
}
rxe_up

# rxe_sent_pkts: the packets rxe0 has sent (its hardware counter).
rxe_sent_pkts() {
	$R/rdma statistic show link rxe0/1 2>/dev/null |
		awk '{ for (i = 1; i < NF; i++) if ($i == "sent_pkts") { print $(i + 1); exit } }'
}

# perf_pair TOOL: a loopback server/client run of a perftest tool; sets
# BW (average MB/s) and RATE (Mpps) from the client's result row. That the
# data moved is told by rxe0's packet counter: 100 messages of 64 KiB at an
# MTU of 1 KiB are 6,400 packets at least. perftest's figures come from its
# own CPU clock calibration, which a loaded host can spoil (r^2 below 0.9,
# "0.00 MB/s" for a run that moved every byte): figures, not a verdict.
perf_pair() {
	_tool=$1
	_args="-d rxe0 -x $gid -s 65536 -n 100 -F"
	_pk0=$(rxe_sent_pkts)
	[ -n "$_pk0" ] || fail "rdma statistic shows no sent_pkts counter for rxe0/1"
	# shellcheck disable=SC2086
	timeout 60 $_tool $_args >/tmp/$_tool.server 2>&1 &
	_srv=$!
	sleep 1
	# shellcheck disable=SC2086
	timeout 60 $_tool $_args 127.0.0.1 >/tmp/$_tool.client 2>&1
	_rc=$?
	wait $_srv
	_src=$?
	sed "s/^/SCENARIO-LOG verbs: $_tool: /" /tmp/$_tool.client
	[ $_rc = 0 ] && [ $_src = 0 ] ||
		fail "$_tool loopback failed (client exit $_rc, server exit $_src): $(tail -n 3 /tmp/$_tool.client | tr '\n' ' ')"
	# "#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]"
	_row=$(awk '$1 == 65536 && NF >= 5 { print $4, $5 }' /tmp/$_tool.client | tail -n 1)
	BW=${_row% *}
	RATE=${_row#* }
	[ -n "$_row" ] || fail "$_tool printed no result row"
	_pk1=$(rxe_sent_pkts)
	[ $((_pk1 - _pk0)) -ge 6400 ] ||
		fail "$_tool moved no data: rxe0 sent $((_pk1 - _pk0)) packets, 6400 at least expected (BW average $BW MB/s)"
	log "$_tool: rxe0 sent $((_pk1 - _pk0)) packets"
}

case "$part" in
perftest)
	perf_pair ib_write_bw
	wbw=$BW
	wrate=$RATE
	perf_pair ib_read_bw
	pass gid_index="$gid" write_bw_MBps="$wbw" write_Mpps="$wrate" read_bw_MBps="$BW" read_Mpps="$RATE"
	;;
validate)
	pc=$R/peermem-check
	[ -x $pc ] || fail "no dynamically linked peermem-check in the image"
	out=$($pc validate --backend real --memory host --device rxe0 --gid-index "$gid" \
		--size 4K,64K,1M --offset 0,4097 --seed 5 2>&1)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG verbs: validate: /'
	[ $rc = 0 ] || fail "validate --memory host on rxe0 exited $rc"
	echo "$out" | grep -q PASSED || fail "validate printed no PASSED"
	# The dma-buf path: skipped (no GPU memory), and rxe has no dma-buf
	# registration: the device's answer is named, validate still passes.
	dmabuf=$(echo "$out" | grep -m 1 "^\[SKIP\] dma-buf path")
	case "$dmabuf" in
	*"--memory host"*"not supported by this device: rxe0"*EOPNOTSUPP*) ;;
	*) fail "validate did not report the dma-buf path as skipped and unsupported by rxe0: $dmabuf" ;;
	esac
	log "dma-buf: $dmabuf"
	out=$($pc validate --backend real --memory host --device rxe0 --gid-index "$gid" \
		--size 64K --path dmabuf 2>&1)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG verbs: validate --path dmabuf: /'
	[ $rc = 1 ] || fail "validate --memory host --path dmabuf exited $rc, want 1"
	for f in bad-lkey short-mr qp-reset; do
		out=$(timeout 60 $pc validate --backend real --memory host --device rxe0 \
			--gid-index "$gid" --size 64K --fault $f 2>&1)
		rc=$?
		echo "$out" | sed "s/^/SCENARIO-LOG verbs: fault $f: /"
		[ $rc = 124 ] && fail "validate --fault $f hung"
		[ $rc = 1 ] || fail "validate --fault $f exited $rc, want 1"
		# The failed step names the refused call or the completion status.
		why=$(echo "$out" | grep -m 1 "^\[FAIL\]")
		case "$why" in
		*"work completion: status"* | *ibv_post_send* | *ibv_modify_qp*) ;;
		*) fail "validate --fault $f named no cause: $why" ;;
		esac
		log "fault $f caught: $why"
	done
	# A device removed mid-run: validate holds with its QP ready (--fault
	# hold: it creates the hold file and waits, at most 20 s, for it to go),
	# rxe0 is deleted meanwhile, then the run goes on. It must stop naming
	# the removal, exit 1, never hang or pass. rxe cannot disassociate a
	# user context, so the unregistration waits for validate to close the
	# device (rdma link delete blocks until then); the device's uverbs node
	# goes first, and that is what the run sees.
	hf=/tmp/peermem-check.hold
	rm -f $hf
	uv=
	for u in /sys/class/infiniband_verbs/uverbs*; do
		[ "$(cat "$u/ibdev" 2>/dev/null)" = rxe0 ] && uv=$u
	done
	[ -n "$uv" ] || fail "no uverbs device for rxe0"
	timeout 60 $pc validate --backend real --memory host --device rxe0 --gid-index "$gid" \
		--size 64K --fault hold --hold-file $hf >/tmp/removal.out 2>&1 &
	vpid=$!
	i=0
	while [ ! -e $hf ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	if [ ! -e $hf ]; then
		kill $vpid 2>/dev/null
		fail "validate --fault hold never held: $(tr '\n' ' ' </tmp/removal.out)"
	fi
	rdma link delete rxe0 >/tmp/rdma-delete.out 2>&1 &
	dpid=$!
	i=0
	while [ -e "$uv" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -e "$uv" ] && log "removal: $uv still there after 10 s"
	rm -f $hf
	wait $vpid
	rc=$?
	wait $dpid
	drc=$?
	sed 's/^/SCENARIO-LOG verbs: removal: /' /tmp/removal.out
	[ $rc = 124 ] && fail "validate hung after rxe0 was removed"
	[ $drc = 0 ] || fail "rdma link delete rxe0 exited $drc: $(cat /tmp/rdma-delete.out)"
	[ -d /sys/class/infiniband/rxe0 ] && fail "rxe0 is still there after rdma link delete"
	[ $rc = 1 ] || fail "validate with rxe0 removed mid-run exited $rc, want 1"
	grep -q "^\[PASS\] Held with the QP ready" /tmp/removal.out ||
		fail "validate did not report the hold"
	why=$(grep -m 1 "^\[FAIL\]" /tmp/removal.out)
	case "$why" in
	*"RDMA device during the run"*rxe0*) ;;
	*) fail "validate with rxe0 removed named no removal: $why" ;;
	esac
	grep -q PASSED /tmp/removal.out && fail "validate passed with rxe0 removed"
	log "removal caught (exit $rc): $why"
	removal_rc=$rc
	rxe_up

	# bench: registration latency by size, RDMA WRITE direct vs bounce.
	out=$(timeout 120 $pc bench --backend real --memory host --device rxe0 --gid-index "$gid" \
		--sizes 4K,64K,1M --iterations 5 --no-plot --out /tmp/bench 2>&1)
	rc=$?
	echo "$out" | sed 's/^/SCENARIO-LOG verbs: bench: /'
	[ $rc = 0 ] || fail "bench --memory host on rxe0 exited $rc"
	row=$(echo "$out" | awk '$1 == "1M" { print $3, $7, $8 }')
	set -- $row
	[ $# = 3 ] && [ "$1" != - ] && [ "$2" != - ] ||
		fail "bench printed no registration or RDMA figures for 1M: $row"
	pass gid_index="$gid" removal_exit="$removal_rc" reg_1M_us="$1" direct_1M_MiBps="$2" bounce_1M_MiBps="$3"
	;;
*)
	fail "unknown part $part"
	;;
esac
