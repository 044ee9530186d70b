#!/bin/sh
# Two pmio-tgt gateways and the guest kernel's native NVMe multipath (`make vm-test-ana`, issue
# 30): gateways A (127.0.0.1:4420, core 0) and B (127.0.0.1:4421, core 1) serve the same
# subsystem NQN with ANA reporting, disjoint controller ID ranges (as ceph-nvmeof gives each
# gateway) and the same namespace (same UUID and NGUID, ANA group 1) on the same data: one
# tmpfs file both open buffered, so the page cache keeps them coherent. It stands in for the
# RBD image the gateways would share (the guest cannot reach a Ceph cluster). A's listener is
# optimized, B's non-optimized, each gateway setting its own listener's state as ceph-nvmeof
# does. The guest connects to both; one /dev/nvmeXnY with two paths; pmio-perf --verify runs
# through it while A is killed -9 and B set optimized: I/O goes on, no data error. A restarts
# from its save_config (optimized), B is set back to non-optimized: the paths fail back, which
# the gateways' own counters show (nvmf_get_stats). Any failed check exits non-zero.
set -eu
cd /job
NQN=nqn.2016-06.io.pmio:ana1
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-555555555555
UUID=3c7e7a52-6f0e-4e55-9f5c-3a2b1c0d9e8f
RA="./pmio-rpc -s /tmp/a.sock"
RB="./pmio-rpc -s /tmp/b.sock"
fail() {
    echo "FAIL: $*" >&2
    for c in ${CA:-} ${CB:-}; do echo "$c: $(cat /sys/class/nvme/$c/state) $(path_state $c)" >&2; done
    [ -f /tmp/perf.out ] && tail -5 /tmp/perf.out >&2
    dmesg | grep -v -e ima -e evm -e Key | tail -25 >&2
    tail -8 /tmp/tgt-a.log /tmp/tgt-b.log >&2
    exit 1
}
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; fail "no socket $1"; }
# start GW CORE_MASK [ARGS]: pmio-tgt named GW (a or b), its pid in PID_a / PID_b
start() {
    gw=$1 mask=$2
    shift 2
    rm -f /tmp/$gw.sock
    RUST_LOG=${RUST_LOG:-info} ./pmio-tgt -r /tmp/$gw.sock -m $mask "$@" 2>>/tmp/tgt-$gw.log &
    eval "PID_$gw=$!"
    wait_sock /tmp/$gw.sock
}
# gateway RPC MIN_CNTLID MAX_CNTLID PORT STATE: the gateway's bdev, subsystem and listener
gateway() {
    R=$1
    $R bdev_uring_create /tmp/ana.img Uring0 512 --buffered >/dev/null
    $R nvmf_create_transport -t TCP -u 131072 -c 4096 >/dev/null
    $R nvmf_create_subsystem $NQN -a -s PMIO00A1 -r -m 4 --min-cntlid $2 --max-cntlid $3 >/dev/null
    $R nvmf_subsystem_add_ns $NQN Uring0 -u $UUID -a 1 >/dev/null
    $R nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s $4 >/dev/null
    $R nvmf_subsystem_listener_set_ana_state $NQN -t tcp -a 127.0.0.1 -s $4 -n $5 >/dev/null
}
# connect PORT: prints the controller instance (nvmeN)
connect() {
    exec 3<>/dev/nvme-fabrics
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=$1,nqn=$NQN,hostnqn=$HOSTNQN,nr_io_queues=2,queue_size=128,reconnect_delay=1,ctrl_loss_tmo=60" >&3 || { exec 3>&-; return 1; }
    line=$(cat <&3)
    exec 3>&-
    echo "nvme${line#instance=}" | cut -d, -f1
}
# path_state CTRL: the ANA state the host sees through controller CTRL ("" if none yet)
path_state() { cat /sys/class/nvme/$1/nvme*c*n1/ana_state 2>/dev/null | head -1; }
wait_path() { # wait_path CTRL STATE
    for _ in $(seq 150); do [ "$(path_state $1)" = "$2" ] && return 0; sleep 0.1; done
    fail "path $1: '$(path_state $1)', expected $2"
}
wait_live() {
    for _ in $(seq 300); do [ "$(cat /sys/class/nvme/$1/state 2>/dev/null)" = live ] && return 0; sleep 0.1; done
    fail "controller $1: $(cat /sys/class/nvme/$1/state 2>/dev/null)"
}
# ios RPC: the NVMe commands a gateway completed, over its poll groups
ios() { $1 nvmf_get_stats | grep completed_nvme_io | tr -dc '0-9\n' | awk '{s+=$1} END {print s+0}'; }

# through_a WHEN: 1 MiB written and read back through the head in 64 KiB commands, which the
# gateways' counters must show going through A, none (but keep-alives) through B.
through_a() {
    a0=$(ios "$RA") b0=$(ios "$RB")
    dd if=/tmp/pat of=$D bs=64k oflag=direct 2>/dev/null || fail "dd write $1"
    dd if=$D of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read $1"
    cmp /tmp/pat /tmp/back || fail "$1: data read back differs"
    a1=$(ios "$RA") b1=$(ios "$RB")
    echo "I/O $1: A $((a1 - a0)), B $((b1 - b0))"
    [ $((a1 - a0)) -ge 32 ] && [ $((b1 - b0)) -lt 8 ] || fail "$1: the I/O did not go through A"
}

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] || fail "native multipath is off"

echo "== two gateways on one file (standing in for one RBD image)"
truncate -s 64M /tmp/ana.img
start a 0x1
start b 0x2
gateway "$RA" 1 100 4420 optimized
gateway "$RB" 101 200 4421 non_optimized
$RB nvmf_subsystem_get_listeners $NQN | grep -q '"non_optimized"' || fail "B's listener state"
$RA save_config > /tmp/a.json

echo "== the host connects to both: one namespace, two paths"
CA=$(connect 4420) || fail "connect to A"
CB=$(connect 4421) || fail "connect to B"
[ "$(cat /sys/class/nvme/$CA/subsysnqn)" = $NQN ] || fail "A's subsystem"
[ "$(cat /sys/class/nvme/$CA/cntlid)" -le 100 ] && [ "$(cat /sys/class/nvme/$CB/cntlid)" -gt 100 ] \
    || fail "controller IDs $(cat /sys/class/nvme/$CA/cntlid) $(cat /sys/class/nvme/$CB/cntlid)"
wait_path $CA optimized
wait_path $CB non-optimized
D=
for _ in $(seq 100); do
    for b in /sys/block/nvme*n1; do
        case ${b##*/} in *c*) continue ;; esac
        [ "$(cat $b/device/subsysnqn 2>/dev/null)" = $NQN ] && D=/dev/${b##*/}
    done
    [ -n "$D" ] && [ -b "$D" ] && break
    sleep 0.1
done
[ -b "$D" ] || fail "no multipath head"
# The head's paths: nvmeXcYn1 under each controller (6.1 has no multipath/ links yet).
H=${D#/dev/}
paths=$(ls -d /sys/class/nvme/*/${H%n1}c*n1 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')
[ "$(echo $paths | wc -w)" = 2 ] || fail "$D has paths '$paths'"
[ -e /sys/class/nvme/$CA/${H%n1}c${CA#nvme}n1 ] || [ -n "$(ls -d /sys/class/nvme/$CA/${H%n1}c*n1 2>/dev/null)" ] \
    || fail "no path of $D through $CA"
echo "$D: paths $paths($CA optimized, $CB non-optimized)"
# The optimized path carries the I/O.
dd if=/dev/urandom of=/tmp/pat bs=64k count=16 2>/dev/null
through_a "before the failover"

echo "== A killed -9 under pmio-perf --verify, B set optimized"
./pmio-perf --dev uring:path=$D -m '[0]' -w randrw -M 50 -b 4096 -d 32 -t 14 --verify \
    > /tmp/perf.out 2>&1 &
PERF=$!
sleep 3
kill -9 $PID_a
wait $PID_a 2>/dev/null || true
$RB nvmf_subsystem_listener_set_ana_state $NQN -t tcp -a 127.0.0.1 -s 4421 -n optimized
wait_path $CB optimized
b2=$(ios "$RB")
sleep 2
b3=$(ios "$RB")
echo "B carries the I/O: $((b3 - b2)) commands in 2 s"
[ $((b3 - b2)) -gt 0 ] || fail "no I/O through B after the failover"

echo "== A restarted from its save_config, B back to non-optimized: the paths fail back"
start a 0x1 -c /tmp/a.json
wait_live $CA
wait_path $CA optimized
$RB nvmf_subsystem_listener_set_ana_state $NQN -t tcp -a 127.0.0.1 -s 4421 -n non_optimized
wait_path $CB non-optimized
rc=0
wait $PERF || rc=$?
tail -3 /tmp/perf.out
[ $rc = 0 ] || { cat /tmp/perf.out; fail "pmio-perf --verify across the failover and failback: $rc"; }
through_a "after the failback"

echo 1 > /sys/class/nvme/$CA/delete_controller
echo 1 > /sys/class/nvme/$CB/delete_controller
kill $PID_a $PID_b 2>/dev/null || true
echo "PASS"
