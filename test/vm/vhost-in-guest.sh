#!/bin/sh
# The guest half of `make vm-test-vhost`: /dev/vda is a 64 MiB malloc bdev served by pmio-tgt's
# vhost-user-blk target on the host (two queues), /dev/vdb a read-only controller. dd pattern,
# pmio-perf --verify at 4 KiB and 128 KiB, discard and write zeroes read back as zeros, GET_ID,
# the pattern surviving a reset of the guest's driver (unbind/bind), a read-only disk that
# refuses writes. Any failed check exits non-zero.
set -eu
cd /job
fail() { echo "FAIL: $*" >&2; dmesg | tail -20 >&2; exit 1; }
A=/dev/vda
B=/dev/vdb
[ -b $A ] && [ -b $B ] || fail "no /dev/vda and /dev/vdb"

echo "== geometry and features"
[ "$(blockdev --getsize64 $A)" = 67108864 ] || fail "vda size $(blockdev --getsize64 $A)"
[ "$(blockdev --getss $A)" = 4096 ] || fail "vda block size $(blockdev --getss $A)"
nq=$(ls /sys/block/vda/mq | wc -l)
[ "$nq" = 2 ] || fail "vda has $nq queues, want 2"
[ "$(cat /sys/block/vda/queue/discard_max_bytes)" != 0 ] || fail "no discard"
[ "$(cat /sys/block/vda/queue/write_zeroes_max_bytes)" != 0 ] || fail "no write zeroes"
[ "$(cat /sys/block/vda/ro)" = 0 ] || fail "vda read-only"
[ "$(cat /sys/block/vdb/ro)" = 1 ] || fail "vdb not read-only"
serial=$(cat /sys/block/vda/serial 2>/dev/null || true)
[ "$serial" = Malloc0 ] || fail "GET_ID gave serial '$serial'"
echo "vda: 64 MiB, 4 KiB blocks, $nq queues, discard and write zeroes, serial $serial; vdb read-only"

echo "== dd pattern"
dd if=/dev/urandom of=/tmp/pat bs=64k count=32 2>/dev/null
dd if=/tmp/pat of=$A bs=64k oflag=direct 2>/dev/null || fail "dd write"
dd if=$A of=/tmp/back bs=64k count=32 iflag=direct 2>/dev/null || fail "dd read"
cmp /tmp/pat /tmp/back || fail "pattern read back differs"
echo "2 MiB pattern written and read back"

echo "== pmio-perf --verify on /dev/vda"
for bs in 4096 131072; do
    ./pmio-perf --dev uring:path=$A -m '[0,1]' -w randrw -M 50 -b $bs -d 32 -t 3 --verify \
        > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify -b $bs"; }
    # pmio-perf exits non-zero on any I/O error or verify mismatch.
    grep -iE "verif|IOPS" /tmp/perf.out | tail -2
done

echo "== the pattern survives a driver reset"
dd if=/tmp/pat of=$A bs=64k oflag=direct 2>/dev/null || fail "dd write"
dev=$(basename "$(readlink /sys/block/vda/device)")
echo "$dev" > /sys/bus/virtio/drivers/virtio_blk/unbind
[ -b $A ] && fail "vda still there after unbind"
echo "$dev" > /sys/bus/virtio/drivers/virtio_blk/bind
for _ in $(seq 50); do [ -b $A ] && break; sleep 0.1; done
[ -b $A ] || fail "vda did not come back after bind"
dd if=$A of=/tmp/back bs=64k count=32 iflag=direct 2>/dev/null || fail "dd read after rebind"
cmp /tmp/pat /tmp/back || fail "pattern differs after rebind"
echo "unbound and bound $dev: pattern intact"

echo "== discard and write zeroes read back as zeros"
blkdiscard -o 0 -l 1048576 $A || fail "blkdiscard"
./blkzeroout $A 1048576 1048576 || fail "BLKZEROOUT"
dd if=$A of=/tmp/z bs=64k count=32 iflag=direct 2>/dev/null || fail "dd read zeros"
dd if=/dev/zero of=/tmp/zero bs=64k count=32 2>/dev/null
cmp /tmp/z /tmp/zero || fail "discarded / zeroed range is not zero"
echo "1 MiB discarded and 1 MiB zeroed: both read back as zeros"

echo "== a read-only controller fails writes"
dd if=$B of=/dev/null bs=4k count=16 iflag=direct 2>/dev/null || fail "read of vdb"
if dd if=/tmp/pat of=$B bs=4k count=1 oflag=direct 2>/tmp/ro.err; then fail "write to read-only vdb succeeded"; fi
echo "vdb: writes refused ($(head -1 /tmp/ro.err)); the device's own IOERR for them is a unit test"
echo "vhost guest checks passed"
