#!/bin/sh
# /dev/ublkb0 served by pmio-tgt from a null bdev against the kernel's own null_blk, in the
# guest, side by side: the same load drives each (pmio-perf over io_uring on the block device,
# 4 KiB and 128 KiB random reads, QD 128, one core), the ublk disk once with the kernel copying
# its data (/dev/ublkb0) and once by user copy (/dev/ublkb1, another null bdev). Prints IOPS
# and the CPU time per I/O of the whole guest, rounds alternating. `make bench-ublk`; the guest
# is software-emulated: compare ratios. BENCH_SIZES: the block sizes (default "4096 131072").
set -eu
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
SECS=${BENCH_SECS:-10}
SIZES=${BENCH_SIZES:-4096 131072}
ROUNDS=${BENCH_ROUNDS:-3}
fail() { echo "FAIL: $*" >&2; exit 1; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
run() { # run DEV LABEL BS
    t0=$(busy_ticks)
    ./pmio-perf --dev uring:path=$1 -m '[1]' -w randread -b $3 -d 128 -t $SECS --json > /tmp/r.json
    t1=$(busy_ticks)
    iops=$(sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p' /tmp/r.json | head -1)
    hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
    awk -v l="$2" -v i="$iops" -v t=$((t1 - t0)) -v hz=$hz -v s=$SECS \
        'BEGIN { printf "%-14s IOPS %10.0f   guest CPU per I/O %7.2f us\n", l, i, t / hz * 1e6 / (i * s) }'
}

# pmio-tgt on core 0 (one reactor), null bdev, one queue.
RUST_LOG=warn ./pmio-tgt -r $S -m 0x1 2>/tmp/tgt.log &
TGT=$!
for _ in $(seq 100); do [ -S $S ] && break; sleep 0.1; done
$R bdev_null_create Null0 1024 4096 >/dev/null
$R ublk_create_target >/dev/null
$R bdev_null_create Null1 1024 4096 >/dev/null
$R ublk_start_disk Null0 0 -q 1 -d 128 --user-copy false >/dev/null
$R ublk_start_disk Null1 1 -q 1 -d 128 --user-copy true >/dev/null
[ -b /dev/ublkb0 ] && [ -b /dev/ublkb1 ] || fail "no /dev/ublkb0 or /dev/ublkb1"
$R ublk_get_disks -n 1 | grep -q '"user_copy": true' || fail "/dev/ublkb1 is not user copy"
[ -b /dev/nullb0 ] || fail "no /dev/nullb0 (null_blk)"
for bs in $SIZES; do
    echo "$((bs / 1024)) KiB random reads, QD 128, pmio-perf on core 1, ${SECS} s per run"
    for i in $(seq $ROUNDS); do
        run /dev/ublkb0 "ublk copy" $bs
        run /dev/ublkb1 "ublk user copy" $bs
        run /dev/nullb0 null_blk $bs
    done
done
$R spdk_kill_instance SIGTERM
wait $TGT || { cat /tmp/tgt.log; fail "pmio-tgt exited $?"; }
