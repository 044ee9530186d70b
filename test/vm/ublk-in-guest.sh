#!/bin/sh
# pmio-tgt serving bdevs as local block devices through the guest kernel's ublk_drv
# (`make vm-test-ublk`, Debian 13's kernel): errors before the target exists, a malloc bdev as
# /dev/ublkb0 on 2 queues, its bdev refused for deletion, pmio-perf --verify at 4 KiB and
# 128 KiB with the kernel copying the data and with user copy (UBLK_F_USER_COPY), discard
# reading back zeros, a thin lvol as /dev/ublkb2, mkfs.ext4 + mount + checksums across a stop
# and start of the disk, save_config, pmio-tgt's exit removing the disk; last, pmio-tgt killed
# -9 under a mounted ext4 on a uring bdev while a copy to it is being written, and restarted
# with ublk_recover_disk: the copy completes intact and the filesystem goes on.
# Any failed check exits non-zero.
set -eu
cd /job
# Everything this script makes is under $T, and its disks go with pmio-tgt's exit; both are
# undone when it ends (another script may follow in the same guest: test/vm/each-in-guest.sh).
T=/tmp/ublk-in-guest
rm -rf $T && mkdir -p $T
S=$T/pmio.sock
R="./pmio-rpc -s $S"
D=/dev/ublkb0
fail() { echo "FAIL: $*" >&2; tail -20 $T/tgt.log >&2; exit 1; }
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}
wait_sock() { for _ in $(seq 100); do [ -S $S ] && return 0; sleep 0.1; done; fail "no socket"; }
wait_gone() { for _ in $(seq 100); do [ -e "$1" ] || return 0; sleep 0.1; done; fail "$1 still there"; }
[ -e /dev/ublk-control ] || fail "no /dev/ublk-control: ublk_drv not loaded"
[ -e /dev/ublkc0 ] && fail "/dev/ublkc0 exists already (left by another script?)"
TGT= CP=
# On any exit: the filesystem unmounted, pmio-tgt asked to exit (it stops its disks; killed
# if it has not gone in 10 s), $T removed.
cleanup() {
    set +e
    [ -n "$CP" ] && kill $CP 2>/dev/null
    umount /mnt/u 2>/dev/null
    if [ -n "$TGT" ] && kill $TGT 2>/dev/null; then
        for _ in $(seq 100); do kill -0 $TGT 2>/dev/null || break; sleep 0.1; done
        kill -9 $TGT 2>/dev/null
        wait $TGT 2>/dev/null
    fi
    rm -rf $T
    return 0
}
trap cleanup EXIT

RUST_LOG=info ./pmio-tgt -r $S -m 0x3 2>>$T/tgt.log &
TGT=$!
wait_sock

echo "== errors before the target exists"
$R bdev_malloc_create -b Malloc0 64 4096 >/dev/null
out=$($R ublk_start_disk Malloc0 0 2>&1 || true)
expect '"code": -19' "$out"
$R ublk_create_target
out=$($R ublk_create_target 2>&1 || true)
expect '"code": -32603' "$out"
out=$($R ublk_start_disk Nope 0 2>&1 || true)
expect '"code": -19' "$out"
out=$($R ublk_start_disk Malloc0 0 -d 5000 2>&1 || true)
expect '"code": -22' "$out"

echo "== Malloc0 as $D on 2 queues"
out=$($R ublk_start_disk Malloc0 0 -q 2 -d 64)
[ "$out" = 0 ] || fail "ublk_start_disk printed '$out'"
[ -b $D ] || fail "$D is not a block device"
out=$($R ublk_get_disks)
expect '"ublk_device": "/dev/ublkb0"' "$out"
expect '"num_queues": 2' "$out"
expect '"bdev_name": "Malloc0"' "$out"
[ "$(cat /sys/block/ublkb0/queue/logical_block_size)" = 4096 ] || fail "block size"
[ "$(cat /sys/block/ublkb0/size)" = $((64 * 2048)) ] || fail "size $(cat /sys/block/ublkb0/size)"
out=$($R ublk_start_disk Malloc0 1 2>&1 || true)
expect '"code": -16' "$out"
out=$($R bdev_malloc_delete Malloc0 2>&1 || true)
expect '"code": -16' "$out"
expect 'ublk disk 0' "$out"

# verify DEV: pmio-perf --verify at 4 KiB and 128 KiB, from both cores
verify() {
    for bs in 4096 131072; do
        ./pmio-perf --dev uring:path=$1 -m '[0,1]' -w randrw -M 50 -b $bs -d 32 -t 3 --verify \
            > $T/perf.out 2>&1 || { cat $T/perf.out; fail "pmio-perf --verify -b $bs on $1"; }
        tail -n 3 $T/perf.out
        expect 'verify' "$(cat $T/perf.out)"
    done
}

echo "== pmio-perf --verify on $D (the kernel copies the data)"
expect '"user_copy": false' "$($R ublk_get_disks -n 0)"
verify $D
out=$($R bdev_get_iostat -b Malloc0)
expect '"num_write_ops": [1-9]' "$out"

echo "== user copy: Malloc2 as /dev/ublkb3 on 2 queues, pmio-perf --verify"
$R bdev_malloc_create -b Malloc2 64 4096 >/dev/null
out=$($R ublk_start_disk Malloc2 3 -q 2 -d 64 --user-copy true)
[ "$out" = 3 ] || fail "ublk_start_disk --user-copy true printed '$out'"
expect '"user_copy": true' "$($R ublk_get_disks -n 3)"
verify /dev/ublkb3
expect '"num_read_ops": [1-9]' "$($R bdev_get_iostat -b Malloc2)"

echo "== a disk stopped under I/O: its requests drain, the target serves on"
./pmio-perf --dev uring:path=/dev/ublkb3 -m '[1]' -w randrw -M 50 -b 4096 -d 32 -t 4 \
    > $T/perf.out 2>&1 &
P=$!
sleep 1
$R ublk_stop_disk 3 || fail "ublk_stop_disk 3 under I/O"
wait_gone /dev/ublkb3
wait $P || true
grep -q "ublk 3: queue 1 closed" $T/tgt.log || fail "queue 1 of disk 3 did not close"
if grep -q "bdev I/Os in flight\|did not close" $T/tgt.log; then fail "a queue closed undrained"; fi
$R bdev_malloc_delete Malloc2
expect '"bdev_name": "Malloc0"' "$($R ublk_get_disks)"

echo "== discard reads back zeros"
[ "$(cat /sys/block/ublkb0/queue/discard_max_bytes)" != 0 ] || fail "no discard"
dd if=/dev/urandom of=$T/pat bs=64k count=16 2>/dev/null
dd if=$T/pat of=$D bs=64k count=16 oflag=direct 2>/dev/null || fail "dd write"
dd if=$D of=$T/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read"
cmp $T/pat $T/back || fail "pattern differs"
blkdiscard -o 0 -l 1048576 $D || fail "blkdiscard"
dd if=$D of=$T/z bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read zeros"
dd if=/dev/zero of=$T/zero bs=64k count=16 2>/dev/null
cmp $T/z $T/zero || fail "discarded range is not zero"

echo "== a thin lvol as /dev/ublkb2"
$R bdev_malloc_create -b Malloc1 64 4096 >/dev/null
$R bdev_lvol_create_lvstore Malloc1 lvs0 -c 1048576 >/dev/null
$R bdev_lvol_create -l lvs0 -t vol0 32 >/dev/null
out=$($R ublk_start_disk lvs0/vol0 2 -q 2 2>&1) || true
[ "$out" = 2 ] || fail "ublk_start_disk lvs0/vol0 printed '$out'"
[ "$(cat /sys/block/ublkb2/size)" = $((32 * 2048)) ] || fail "lvol size $(cat /sys/block/ublkb2/size)"
./pmio-perf --dev uring:path=/dev/ublkb2 -m '[0,1]' -w randrw -M 50 -b 4096 -d 32 -t 2 --verify \
    > $T/perf.out 2>&1 || { cat $T/perf.out; fail "pmio-perf --verify on the lvol"; }
out=$($R bdev_lvol_delete lvs0/vol0 2>&1 || true)
expect '"code": -16' "$out"
$R ublk_stop_disk 2
wait_gone /dev/ublkb2
$R bdev_lvol_delete lvs0/vol0

echo "== ext4 on $D, across a stop and start"
./mke2fs -q -F -t ext4 $D || fail "mkfs.ext4"
mkdir -p /mnt/u
mount -t ext4 $D /mnt/u || fail "mount"
for i in 1 2 3 4; do
    dd if=/dev/urandom of=/mnt/u/f$i bs=64k count=$((i * 8)) 2>/dev/null
done
(cd /mnt/u && sha256sum f1 f2 f3 f4) > $T/sums
sync
umount /mnt/u
$R ublk_stop_disk 0
wait_gone $D
[ "$($R ublk_get_disks)" = "[]" ] || fail "disk listed after stop"
out=$($R ublk_stop_disk 0 2>&1 || true)
expect '"code": -19' "$out"
out=$($R ublk_start_disk Malloc0 0 -q 2)
[ "$out" = 0 ] || fail "restart printed '$out'"
mount -t ext4 $D /mnt/u || fail "mount after restart"
(cd /mnt/u && sha256sum -c $T/sums) || fail "checksums differ after stop and start"
umount /mnt/u

echo "== save_config"
$R save_config > $T/cfg.json
expect '"ublk_create_target"' "$(cat $T/cfg.json)"
expect '"ublk_start_disk"' "$(cat $T/cfg.json)"

echo "== pmio-tgt exit removes the disk"
$R spdk_kill_instance SIGTERM
wait $TGT || fail "pmio-tgt exited $? after spdk_kill_instance"
TGT=
wait_gone $D
[ ! -e /dev/ublkc0 ] || fail "/dev/ublkc0 left after exit"

echo "== pmio-tgt killed -9 under a mounted filesystem, then ublk_recover_disk"
D=/dev/ublkb1
dd if=/dev/zero of=$T/disk.img bs=1M count=64 2>/dev/null
RUST_LOG=info ./pmio-tgt -r $S -m 0x3 2>>$T/tgt.log &
TGT=$!
wait_sock
$R bdev_uring_create $T/disk.img Uring0 4096 --buffered >/dev/null
$R ublk_create_target
[ "$($R ublk_start_disk Uring0 1 -q 2)" = 1 ] || fail "ublk_start_disk Uring0 1"
./mke2fs -q -F -t ext4 $D || fail "mkfs.ext4 on $D"
mount -t ext4 $D /mnt/u || fail "mount $D"
for i in 1 2 3; do
    dd if=/dev/urandom of=/mnt/u/g$i bs=64k count=$((i * 8)) 2>/dev/null
done
(cd /mnt/u && sha256sum g1 g2 g3) > $T/sums1
sync
# A copy is being written when the server dies: its requests wait in the kernel (or are
# reissued, UBLK_F_USER_RECOVERY_REISSUE) for the next server.
dd if=/dev/urandom of=$T/big bs=64k count=64 2>/dev/null
(cp $T/big /mnt/u/g5 && sync) &
CP=$!
sleep 0.2
kill -9 $TGT
wait $TGT 2>/dev/null || true
rm -f $S
[ -b $D ] || fail "$D went with its server"
RUST_LOG=info ./pmio-tgt -r $S -m 0x3 2>>$T/tgt.log &
TGT=$!
wait_sock
$R bdev_uring_create $T/disk.img Uring0 4096 --buffered >/dev/null
$R ublk_create_target
out=$($R ublk_recover_disk Uring0 1)
[ "$out" = 1 ] || fail "ublk_recover_disk printed '$out'"
expect '"bdev_name": "Uring0"' "$($R ublk_get_disks -n 1)"
dd if=/dev/urandom of=/mnt/u/g4 bs=64k count=16 2>/dev/null || fail "write after recovery"
wait $CP || fail "the copy under the kill failed"
CP=
sync
echo 3 > /proc/sys/vm/drop_caches
(cd /mnt/u && sha256sum -c $T/sums1) || fail "checksums differ after recovery"
cmp $T/big /mnt/u/g5 || fail "the file copied across the kill differs"
umount /mnt/u
$R ublk_stop_disk 1
wait_gone $D
# The README's last step: the target goes, and with it the disks' methods.
$R ublk_destroy_target || fail "ublk_destroy_target"
out=$($R ublk_start_disk Uring0 1 2>&1 || true)
expect '"code": -19' "$out"
$R spdk_kill_instance SIGTERM
wait $TGT || fail "pmio-tgt exited $? after recovery"
TGT=

echo "ublk-in-guest: all checks passed"
