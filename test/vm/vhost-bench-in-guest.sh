#!/bin/sh
# The guest half of `make bench-vhost` (test/vm/vhost-bench.sh runs it): the same load on each
# vhost-user-blk disk named on the command line (vda vdb ...), alternately, BENCH_ROUNDS rounds;
# the order within a round turns each round so neither disk always goes first. Each run is
# bracketed by "BENCH begin ROUND DEV" and "BENCH end ROUND DEV IOS IOPS P50_NS P99_NS IRQS"
# lines on the console (IRQS: the guest's interrupts from that disk's queues over the run): the
# host samples its backends' CPU time when it reads them (1 s after a begin line: the guest
# waits that long before it starts the load). (The guest's own CPU time says little here:
# pmio-perf polls its io_uring, so its vCPU is busy whatever the disk.)
set -eu
cd /job
SECS=${BENCH_SECS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
DEPTH=${BENCH_DEPTH:-32}
fail() { echo "FAIL: $*" >&2; exit 1; }
[ $# -ge 1 ] || fail "usage: $0 DEV..."
for d in "$@"; do
    [ -b /dev/$d ] || fail "no /dev/$d"
    echo "/dev/$d: $(blockdev --getsize64 /dev/$d) bytes," \
        "$(blockdev --getss /dev/$d)-byte blocks, $(ls /sys/block/$d/mq | wc -l) queue(s)"
done
num() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" /tmp/r.json | head -1; }
irqs() { # irqs DEV: interrupts so far from DEV's request queues, all vCPUs
    v=$(basename "$(readlink -f /sys/block/$1/device)")
    awk -v v="$v-req." 'index($0, v) { for (i = 2; $i ~ /^[0-9]+$/; i++) n += $i }
        END { print n + 0 }' /proc/interrupts
}
run() { # run ROUND DEV
    echo "BENCH begin $1 $2"
    # Let the line leave through the serial console before the load starts: under load it has
    # reached the host seconds late. The host waits as long before it samples.
    sleep 1
    i0=$(irqs $2)
    ./pmio-perf --dev uring:path=/dev/$2 -m '[1]' -w randread -b 4096 -d "$DEPTH" -t "$SECS" \
        --json > /tmp/r.json || fail "pmio-perf on /dev/$2"
    [ "$(num errors)" = 0 ] || fail "/dev/$2: $(num errors) I/O errors"
    echo "BENCH end $1 $2 $(num ios) $(num iops) $(num p50) $(num p99) $(($(irqs $2) - i0))"
}
for i in $(seq "$ROUNDS"); do
    order="$*"
    [ $((i % 2)) = 0 ] && order=$(for d in "$@"; do echo $d; done | sort -r)
    for d in $order; do run "$i" "$d"; done
done
echo "BENCH done"
