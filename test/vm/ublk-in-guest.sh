#!/bin/sh
# pmio-tgt serving bdevs as local block devices through the guest kernel's ublk_drv
# (`make vm-test-ublk`, Debian 13's kernel): errors before the target exists, a malloc bdev as
# /dev/ublkb0 on 2 queues, its bdev refused for deletion, pmio-perf --verify at 4 KiB and
# 128 KiB, discard reading back zeros, a thin lvol as /dev/ublkb2, mkfs.ext4 + mount +
# checksums across a stop and start of the disk, save_config, pmio-tgt's exit removing the
# disk; last, pmio-tgt killed -9 under a mounted ext4 on a uring bdev while a copy to it is
# being written, and restarted with ublk_recover_disk: the copy completes intact and the
# filesystem goes on.
# Any failed check exits non-zero.
set -eu
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
D=/dev/ublkb0
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}
wait_sock() { for _ in $(seq 100); do [ -S $S ] && return 0; sleep 0.1; done; fail "no socket"; }
wait_gone() { for _ in $(seq 100); do [ -e "$1" ] || return 0; sleep 0.1; done; fail "$1 still there"; }
[ -e /dev/ublk-control ] || fail "no /dev/ublk-control: ublk_drv not loaded"

RUST_LOG=info ./pmio-tgt -r $S -m 0x3 &
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

echo "== pmio-perf --verify on $D"
for bs in 4096 131072; do
    ./pmio-perf --dev uring:path=$D -m '[0,1]' -w randrw -M 50 -b $bs -d 32 -t 3 --verify \
        > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify -b $bs"; }
    tail -n 3 /tmp/perf.out
    expect 'verify' "$(cat /tmp/perf.out)"
done
out=$($R bdev_get_iostat -b Malloc0)
expect '"num_write_ops": [1-9]' "$out"

echo "== discard reads back zeros"
[ "$(cat /sys/block/ublkb0/queue/discard_max_bytes)" != 0 ] || fail "no discard"
dd if=/dev/urandom of=/tmp/pat bs=64k count=16 2>/dev/null
dd if=/tmp/pat of=$D bs=64k count=16 oflag=direct 2>/dev/null || fail "dd write"
dd if=$D of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read"
cmp /tmp/pat /tmp/back || fail "pattern differs"
blkdiscard -o 0 -l 1048576 $D || fail "blkdiscard"
dd if=$D of=/tmp/z bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read zeros"
dd if=/dev/zero of=/tmp/zero bs=64k count=16 2>/dev/null
cmp /tmp/z /tmp/zero || fail "discarded range is not zero"

echo "== a thin lvol as /dev/ublkb2"
$R bdev_malloc_create -b Malloc1 64 4096 >/dev/null
$R bdev_lvol_create_lvstore Malloc1 lvs0 -c 1048576 >/dev/null
$R bdev_lvol_create -l lvs0 -t vol0 32 >/dev/null
out=$($R ublk_start_disk lvs0/vol0 2 -q 2 2>&1) || true
[ "$out" = 2 ] || fail "ublk_start_disk lvs0/vol0 printed '$out'"
[ "$(cat /sys/block/ublkb2/size)" = $((32 * 2048)) ] || fail "lvol size $(cat /sys/block/ublkb2/size)"
./pmio-perf --dev uring:path=/dev/ublkb2 -m '[0,1]' -w randrw -M 50 -b 4096 -d 32 -t 2 --verify \
    > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify on the lvol"; }
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
(cd /mnt/u && sha256sum f1 f2 f3 f4) > /tmp/sums
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
(cd /mnt/u && sha256sum -c /tmp/sums) || fail "checksums differ after stop and start"
umount /mnt/u

echo "== save_config"
$R save_config > /tmp/cfg.json
expect '"ublk_create_target"' "$(cat /tmp/cfg.json)"
expect '"ublk_start_disk"' "$(cat /tmp/cfg.json)"

echo "== pmio-tgt exit removes the disk"
$R spdk_kill_instance SIGTERM
wait $TGT || fail "pmio-tgt exited $? after spdk_kill_instance"
wait_gone $D
[ ! -e /dev/ublkc0 ] || fail "/dev/ublkc0 left after exit"

echo "== pmio-tgt killed -9 under a mounted filesystem, then ublk_recover_disk"
D=/dev/ublkb1
dd if=/dev/zero of=/tmp/disk.img bs=1M count=64 2>/dev/null
RUST_LOG=info ./pmio-tgt -r $S -m 0x3 &
TGT=$!
wait_sock
$R bdev_uring_create /tmp/disk.img Uring0 4096 --buffered >/dev/null
$R ublk_create_target
[ "$($R ublk_start_disk Uring0 1 -q 2)" = 1 ] || fail "ublk_start_disk Uring0 1"
./mke2fs -q -F -t ext4 $D || fail "mkfs.ext4 on $D"
mount -t ext4 $D /mnt/u || fail "mount $D"
for i in 1 2 3; do
    dd if=/dev/urandom of=/mnt/u/g$i bs=64k count=$((i * 8)) 2>/dev/null
done
(cd /mnt/u && sha256sum g1 g2 g3) > /tmp/sums1
sync
# A copy is being written when the server dies: its requests wait in the kernel (or are
# reissued, UBLK_F_USER_RECOVERY_REISSUE) for the next server.
dd if=/dev/urandom of=/tmp/big bs=64k count=64 2>/dev/null
(cp /tmp/big /mnt/u/g5 && sync) &
CP=$!
sleep 0.2
kill -9 $TGT
wait $TGT 2>/dev/null || true
rm -f $S
[ -b $D ] || fail "$D went with its server"
RUST_LOG=info ./pmio-tgt -r $S -m 0x3 &
TGT=$!
wait_sock
$R bdev_uring_create /tmp/disk.img Uring0 4096 --buffered >/dev/null
$R ublk_create_target
out=$($R ublk_recover_disk Uring0 1)
[ "$out" = 1 ] || fail "ublk_recover_disk printed '$out'"
expect '"bdev_name": "Uring0"' "$($R ublk_get_disks -n 1)"
dd if=/dev/urandom of=/mnt/u/g4 bs=64k count=16 2>/dev/null || fail "write after recovery"
wait $CP || fail "the copy under the kill failed"
sync
echo 3 > /proc/sys/vm/drop_caches
(cd /mnt/u && sha256sum -c /tmp/sums1) || fail "checksums differ after recovery"
cmp /tmp/big /mnt/u/g5 || fail "the file copied across the kill differs"
umount /mnt/u
$R ublk_stop_disk 1
wait_gone $D
$R spdk_kill_instance SIGTERM
wait $TGT || fail "pmio-tgt exited $? after recovery"

echo "ublk-in-guest: all checks passed"
