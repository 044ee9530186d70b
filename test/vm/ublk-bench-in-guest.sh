#!/bin/sh
# /dev/ublkb0 served by pmio-tgt from a null bdev against the kernel's own null_blk, in the
# guest, side by side: the same load drives each (pmio-perf over io_uring on the block device,
# 4 KiB random reads, QD 128, one core). Prints IOPS and the CPU time per I/O of the whole
# guest. `make bench-ublk`; the guest is software-emulated: compare ratios.
set -eu
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
SECS=${BENCH_SECS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
fail() { echo "FAIL: $*" >&2; exit 1; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
run() { # run DEV LABEL
    t0=$(busy_ticks)
    ./pmio-perf --dev uring:path=$1 -m '[1]' -w randread -b 4096 -d 128 -t $SECS --json > /tmp/r.json
    t1=$(busy_ticks)
    iops=$(sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p' /tmp/r.json | head -1)
    hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
    awk -v l="$2" -v i="$iops" -v t=$((t1 - t0)) -v hz=$hz -v s=$SECS \
        'BEGIN { printf "%-10s IOPS %10.0f   guest CPU per I/O %7.2f us\n", l, i, t / hz * 1e6 / (i * s) }'
}

# pmio-tgt on core 0 (one reactor), null bdev, one queue.
RUST_LOG=warn ./pmio-tgt -r $S -m 0x1 2>/tmp/tgt.log &
TGT=$!
for _ in $(seq 100); do [ -S $S ] && break; sleep 0.1; done
$R bdev_null_create Null0 1024 4096 >/dev/null
$R ublk_create_target >/dev/null
$R ublk_start_disk Null0 0 -q 1 -d 128 >/dev/null
[ -b /dev/ublkb0 ] || fail "no /dev/ublkb0"
[ -b /dev/nullb0 ] || fail "no /dev/nullb0 (null_blk)"
echo "4 KiB random reads, QD 128, pmio-perf on core 1, ${SECS} s per run"
for i in $(seq $ROUNDS); do
    run /dev/ublkb0 ublk
    run /dev/nullb0 null_blk
done
$R spdk_kill_instance SIGTERM
wait $TGT || { cat /tmp/tgt.log; fail "pmio-tgt exited $?"; }
