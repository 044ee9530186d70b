#!/bin/sh
# pmio-tgt as an NVMe/TCP target for the guest kernel's own host (`make vm-test-nvmf`): a malloc
# bdev on 2 reactors served over 127.0.0.1, connected through /dev/nvme-fabrics; dd and
# pmio-perf --verify (4 KiB in-capsule and 128 KiB R2T writes) with and without digests; a second
# subsystem with two namespaces; namespaces added and removed while connected; a refused host;
# disconnect; a thin lvol written with dd, snapshotted while connected, resized (the host sees
# it), its clone exported and read back; pmio-tgt killed under I/O, restarted from its saved
# config, data read back.
# Any failed check exits non-zero.
set -eu
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
NQN=nqn.2016-06.io.pmio:vm1
NQN2=nqn.2016-06.io.pmio:vm2
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-444444444444
fail() { echo "FAIL: $*" >&2; dmesg | tail -30 >&2; exit 1; }
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}
wait_sock() { for _ in $(seq 100); do [ -S $S ] && return 0; sleep 0.1; done; fail "no socket"; }
# connect NQN [OPTS]: prints the controller instance (nvmeN)
connect() {
    exec 3<>/dev/nvme-fabrics
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$1,hostnqn=$HOSTNQN,nr_io_queues=2,queue_size=128${2:+,$2}" >&3 || { exec 3>&-; return 1; }
    line=$(cat <&3)
    exec 3>&-
    echo "nvme${line#instance=}" | cut -d, -f1
}
disconnect() { echo 1 > /sys/class/nvme/$1/delete_controller; }
# ns_dev NQN NSID: the block device of namespace NSID of subsystem NQN (empty if none)
ns_dev() {
    for b in /sys/block/nvme*; do
        [ -e "$b" ] || continue
        case ${b##*/} in *c*) continue ;; esac
        [ "$(cat $b/device/subsysnqn 2>/dev/null)" = "$1" ] || continue
        [ "$(cat $b/nsid 2>/dev/null)" = "$2" ] && { echo /dev/${b##*/}; return 0; }
    done
    return 0
}
wait_dev() { # wait_dev NQN NSID: waits until the namespace's block device exists
    for _ in $(seq 100); do d=$(ns_dev "$1" "$2"); [ -n "$d" ] && [ -b "$d" ] && { echo "$d"; return 0; }; sleep 0.1; done
    fail "no block device for $1 nsid $2"
}
wait_gone() {
    for _ in $(seq 100); do [ -z "$(ns_dev "$1" "$2")" ] && return 0; sleep 0.1; done
    fail "namespace $2 of $1 still there"
}

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

start_tgt() {
    RUST_LOG=${RUST_LOG:-info} ./pmio-tgt -r $S -m 0x3 "$@" 2>/tmp/tgt.log &
    TGT=$!
    wait_sock
}
start_tgt
# The first subsystem's namespace is a file, so its data outlives a killed pmio-tgt.
truncate -s 64M /tmp/disk0.img
$R bdev_uring_create /tmp/disk0.img Uring0 512 --buffered >/dev/null
$R bdev_malloc_create -b Malloc1 16 4096 >/dev/null
$R bdev_malloc_create -b Malloc2 16 512 >/dev/null
$R nvmf_create_transport -t TCP -u 131072 -c 4096 >/dev/null
$R nvmf_create_subsystem $NQN -a -s PMIO0001 >/dev/null
$R nvmf_subsystem_add_ns $NQN Uring0 >/dev/null
$R nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s 4420 >/dev/null
$R nvmf_subsystem_add_listener discovery -t tcp -a 127.0.0.1 -s 4420 >/dev/null

echo "== connect, dd"
C=$(connect $NQN) || fail "connect"
D=$(wait_dev $NQN 1)
echo "$C $D"
[ "$(cat /sys/block/${D#/dev/}/size)" = 131072 ] || fail "size $(cat /sys/block/${D#/dev/}/size)"
head -c 1048576 /dev/urandom > /tmp/pat
dd if=/tmp/pat of=$D bs=64k oflag=direct 2>/dev/null || fail "dd write"
dd if=$D of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read"
cmp /tmp/pat /tmp/back || fail "dd: data read back differs"
out=$($R nvmf_subsystem_get_controllers $NQN)
expect '"cntlid"' "$out"
expect "$HOSTNQN" "$out"

echo "== pmio-perf --verify on the connected namespace"
for bs in 4096 131072; do
    ./pmio-perf --dev uring:path=$D -m '[0,1]' -w randrw -M 50 -b $bs -d 32 -t 3 --verify \
        > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify -b $bs"; }
    tail -3 /tmp/perf.out
done
disconnect $C
wait_gone $NQN 1
out=$($R nvmf_subsystem_get_controllers $NQN)
[ "$(printf '%s' "$out" | tr -d ' \n')" = "[]" ] || fail "controllers left after disconnect: $out"

echo "== digests"
C=$(connect $NQN hdr_digest,data_digest) || fail "connect with digests"
D=$(wait_dev $NQN 1)
for bs in 4096 131072; do
    ./pmio-perf --dev uring:path=$D -m '[0,1]' -w randrw -M 50 -b $bs -d 32 -t 3 --verify \
        > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify -b $bs (digests)"; }
    tail -1 /tmp/perf.out
done
# pmio-perf wrote over the pattern: write it again, through the digests.
dd if=/tmp/pat of=$D bs=64k oflag=direct 2>/dev/null || fail "dd write (digests)"
dd if=$D of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read (digests)"
cmp /tmp/pat /tmp/back || fail "digests: data read back differs"
disconnect $C
wait_gone $NQN 1

echo "== a second subsystem with two namespaces, changed while connected"
$R nvmf_create_subsystem $NQN2 -s PMIO0002 >/dev/null
$R nvmf_subsystem_add_ns $NQN2 Malloc1 >/dev/null
$R nvmf_subsystem_add_listener $NQN2 -t tcp -a 127.0.0.1 -s 4420 >/dev/null
if connect $NQN2 >/dev/null 2>&1; then fail "a host not on the list connected"; fi
$R nvmf_subsystem_add_host $NQN2 $HOSTNQN >/dev/null
$R nvmf_subsystem_add_ns $NQN2 Malloc2 >/dev/null
C2=$(connect $NQN2) || fail "connect to $NQN2 once allowed"
D1=$(wait_dev $NQN2 1)
D2=$(wait_dev $NQN2 2)
[ "$(cat /sys/block/${D1#/dev/}/queue/logical_block_size)" = 4096 ] || fail "ns 1 block size"
[ "$(cat /sys/block/${D2#/dev/}/queue/logical_block_size)" = 512 ] || fail "ns 2 block size"
$R bdev_malloc_create -b Malloc3 8 512 >/dev/null
nsid=$($R nvmf_subsystem_add_ns $NQN2 Malloc3 -n 5 2>&1 || true)
D5=$(wait_dev $NQN2 5)
echo "added: $D5"
$R nvmf_subsystem_remove_ns $NQN2 2 >/dev/null
wait_gone $NQN2 2
echo "removed nsid 2"
disconnect $C2
wait_gone $NQN2 1

echo "== a thin lvol over NVMe/TCP: dd, snapshot while connected, resize, the clone exported"
NQN3=nqn.2016-06.io.pmio:vm3
$R bdev_malloc_create -b Malloc4 64 4096 >/dev/null
$R bdev_lvol_create_lvstore Malloc4 lvs0 -c 1048576 >/dev/null
$R bdev_lvol_create -l lvs0 -t vol0 16 >/dev/null
$R nvmf_create_subsystem $NQN3 -a -s PMIO0003 >/dev/null
$R nvmf_subsystem_add_ns $NQN3 lvs0/vol0 >/dev/null
$R nvmf_subsystem_add_listener $NQN3 -t tcp -a 127.0.0.1 -s 4420 >/dev/null
C3=$(connect $NQN3) || fail "connect to the lvol's subsystem"
V=$(wait_dev $NQN3 1)
[ "$(cat /sys/block/${V#/dev/}/size)" = 32768 ] || fail "lvol size $(cat /sys/block/${V#/dev/}/size) sectors"
dd if=/tmp/pat of=$V bs=64k oflag=direct 2>/dev/null || fail "dd write (lvol)"
# The snapshot is taken with the host connected; vol0 becomes its clone and takes new writes.
$R bdev_lvol_snapshot lvs0/vol0 snap0 >/dev/null
head -c 262144 /dev/urandom > /tmp/pat2
dd if=/tmp/pat2 of=$V bs=64k oflag=direct 2>/dev/null || fail "dd write after the snapshot"
dd if=$V of=/tmp/back bs=64k count=4 iflag=direct 2>/dev/null || fail "dd read (lvol)"
cmp /tmp/pat2 /tmp/back || fail "lvol: the write after the snapshot reads back differently"
dd if=$V of=/tmp/back bs=64k skip=4 count=12 iflag=direct 2>/dev/null || fail "dd read (lvol, rest)"
dd if=/tmp/pat of=/tmp/pat_rest bs=64k skip=4 2>/dev/null
cmp /tmp/pat_rest /tmp/back || fail "lvol: what the snapshot holds reads back differently"
# A resize while connected: the host sees the new size (Namespace Attribute Changed).
$R bdev_lvol_resize lvs0/vol0 24 >/dev/null
for _ in $(seq 100); do [ "$(cat /sys/block/${V#/dev/}/size)" = 49152 ] && break; sleep 0.1; done
[ "$(cat /sys/block/${V#/dev/}/size)" = 49152 ] || fail "after the resize the host sees $(cat /sys/block/${V#/dev/}/size) sectors"
dd if=/tmp/pat2 of=$V bs=64k seek=256 oflag=direct 2>/dev/null || fail "dd write past the old end"
dd if=$V of=/tmp/back bs=64k skip=256 count=4 iflag=direct 2>/dev/null || fail "dd read past the old end"
cmp /tmp/pat2 /tmp/back || fail "lvol: data past the old end reads back differently"
# The snapshot's clone, exported as a second namespace, holds what was written before it.
$R bdev_lvol_clone lvs0/snap0 clone0 >/dev/null
$R nvmf_subsystem_add_ns $NQN3 lvs0/clone0 >/dev/null
K=$(wait_dev $NQN3 2)
dd if=$K of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read (clone)"
cmp /tmp/pat /tmp/back || fail "clone: the snapshot's data reads back differently"
./pmio-perf --dev uring:path=$K -m '[0,1]' -w randrw -M 50 -b 4096 -d 32 -t 2 --verify \
    > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify on the clone"; }
tail -1 /tmp/perf.out
dd if=$V of=/tmp/back bs=64k count=4 iflag=direct 2>/dev/null || fail "dd read (lvol after clone I/O)"
cmp /tmp/pat2 /tmp/back || fail "lvol: writes to the clone reached vol0"
disconnect $C3
wait_gone $NQN3 1
$R nvmf_delete_subsystem $NQN3 >/dev/null

echo "== pmio-tgt killed under I/O, restarted from its saved config"
$R save_config > /tmp/cfg.json
expect '"nvmf_create_subsystem"' "$(cat /tmp/cfg.json)"
C=$(connect $NQN "ctrl_loss_tmo=60,reconnect_delay=1") || fail "connect before the kill"
D=$(wait_dev $NQN 1)
# (set -e holds in the subshell too: a failing dd must not skip the echo)
( rc=0; dd if=$D of=/dev/null bs=4k count=200000 iflag=direct 2>/dev/null || rc=$?; echo "dd ended: $rc" > /tmp/dd.rc ) &
DD=$!
sleep 1
kill -9 $TGT
wait $TGT 2>/dev/null || true
sleep 2
start_tgt -c /tmp/cfg.json
for _ in $(seq 200); do [ "$(cat /sys/class/nvme/$C/state 2>/dev/null)" = live ] && break; sleep 0.1; done
[ "$(cat /sys/class/nvme/$C/state)" = live ] || fail "host did not reconnect: $(cat /sys/class/nvme/$C/state)"
wait $DD 2>/dev/null || true
echo "$(cat /tmp/dd.rc 2>/dev/null) (the dd under the kill ended, no hang)"
D=$(wait_dev $NQN 1)
dd if=$D of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read after reconnect"
cmp /tmp/pat /tmp/back || fail "after reconnect: data written before the kill reads back differently"
disconnect $C
wait_gone $NQN 1

echo "== pmio-tgt killed for good: the host's I/O fails, no hang"
C=$(connect $NQN "ctrl_loss_tmo=3,reconnect_delay=1") || fail "connect before the last kill"
D=$(wait_dev $NQN 1)
rm -f /tmp/dd.rc
( rc=0; dd if=$D of=/dev/null bs=4k count=2000000 iflag=direct 2>/dev/null || rc=$?; echo $rc > /tmp/dd.rc ) &
sleep 1
kill -9 $TGT
wait $TGT 2>/dev/null || true
for _ in $(seq 300); do [ -s /tmp/dd.rc ] && break; sleep 0.1; done
[ -s /tmp/dd.rc ] || fail "dd still hangs 30 s after the target died"
[ "$(cat /tmp/dd.rc)" != 0 ] || fail "dd succeeded with its target dead"
echo "dd failed with status $(cat /tmp/dd.rc) after the target died (no hang)"
echo "nvmf-in-guest: all checks passed"
