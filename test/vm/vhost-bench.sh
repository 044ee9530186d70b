#!/bin/bash
# `make bench-vhost` (issue 19, BENCHMARKS.md): pmio-tgt's vhost-user-blk target beside QEMU's
# own backend (qemu-storage-daemon --export type=vhost-user-blk), the same guest load on both in
# one run. On the host:
#   pmio-tgt            one reactor (-m, the mask of BENCH_CPU), bdev_null_create Null0 1024
#                       512, one vhost-blk controller (one queue) on that reactor;
#   qemu-storage-daemon null-co (1 GiB, read-zeroes=off), vhost-user-blk export, one queue,
#                       512-byte blocks, served from its main loop (no iothread);
# both started the same way, `taskset -c BENCH_CPU` (default host core 0), so every thread of
# either backend runs on that one core. One guest (run-in-vm, 2 vCPUs) gets both disks:
# /dev/vda is pmio-tgt's, /dev/vdb qemu-storage-daemon's. The guest QEMU runs under
# `taskset -c BENCH_GUEST_CPUS` (default 1: the other core, so the backend under test never
# shares its core with the guest; empty: unpinned). In the guest
# (test/vm/vhost-bench-in-guest.sh) `pmio-perf --dev uring:path=/dev/vdX -m '[1]' -w randread
# -b 4096 -d BENCH_DEPTH -t BENCH_SECS --json` runs on each disk in turn (the order swaps each
# round), BENCH_ROUNDS rounds. The host reads each run's begin and end lines off the console
# (the guest pauses 1 s after a begin line, the host samples 0.9 s after it) and samples there
# each backend's utime+stime (/proc/PID/stat) and the core's busy time (/proc/stat): per run,
# the serving backend's CPU time per I/O and its share of the core, and "others": the share of
# the core that neither backend used (the machine's other processes; a polled reactor gets only
# part of a core it shares). A run whose window is not about BENCH_SECS long (console output
# held up) gets n/a for these. Prints a line per run, a table of the rounds, the medians of the
# per-round ratios, and each backend's CPU time per I/O over the whole guest phase (no windows
# needed). The guest is software-emulated (TCG) here: compare the ratios, not the numbers.
# BENCH_PRIO=1 (root) raises this session's scheduler autogroup to nice -19 for the run (as
# apps/perf/bench.sh does), for both backends and the guest alike: on a shared machine with
# autogroup scheduling the other sessions' work then gets little of the backends' core, which
# a polled reactor needs to itself (plain nice does not reach across autogroups). Without it a
# loaded machine's other processes share the backends' core, and pmio-tgt gets only its share.
# With it, the others' work on that core slows to a crawl in pmio-tgt's runs (a timing-bound
# test elsewhere has failed beside it): use it on a machine you may take a core of.
set -euo pipefail
BIN=${BIN:-target/release}
RUN_IN_VM=${RUN_IN_VM:-../shared/vm/run-in-vm}
QSD=${QSD:-qemu-storage-daemon}
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECS:-10}
DEPTH=${BENCH_DEPTH:-32}
CPU=${BENCH_CPU:-0}
GUEST_CPUS=${BENCH_GUEST_CPUS-1}
HZ=$(getconf CLK_TCK)
MASK=$(printf 0x%x $((1 << CPU)))
DIR=$(mktemp -d /tmp/pmio-vhost-bench.XXXXXX)
TGT= QSDPID=
fail() {
    echo "FAIL: $*" >&2
    for l in tgt qsd; do [ -s "$DIR/$l.log" ] && tail -20 "$DIR/$l.log" >&2; done
    exit 1
}
cleanup() {
    for p in $TGT $QSDPID; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    # BENCH_LOGS=DIR keeps the backends' logs (tgt.log, qsd.log) and the rows there.
    [ -n "${BENCH_LOGS:-}" ] && mkdir -p "$BENCH_LOGS" &&
        cp "$DIR"/*.log "$DIR"/rows "$BENCH_LOGS"/ 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
if [ "${BENCH_PRIO:-0}" = 1 ]; then
    OLD_PRIO=$(awk '{ print $3 }' /proc/self/autogroup)
    echo -19 > /proc/self/autogroup
    trap 'cleanup; echo "$OLD_PRIO" > /proc/self/autogroup' EXIT
fi
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; fail "no socket $1"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
core_busy() { awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# With the guest on one core, the share of that core its QEMU did not use is noise too.
GCORE=; [[ $GUEST_CPUS =~ ^[0-9]+$ ]] && GCORE=$GUEST_CPUS
QEMU=
guest_rest() { # guest_rest -> "core_busy qemu_ticks" of the guest's core, or "0 0"
    [ -n "$GCORE" ] || { echo "0 0"; return; }
    echo "$(core_busy "$GCORE") $(ticks "$QEMU" 2>/dev/null || echo 0)"
}

echo "== backends on host core $CPU (taskset -c $CPU); guest on ${GUEST_CPUS:-any core};" \
    "session $(cat /proc/self/autogroup)"
RUST_LOG=${RUST_LOG:-warn} taskset -c "$CPU" "$BIN/pmio-tgt" -r "$DIR/pmio.sock" -m "$MASK" \
    -S "$DIR" 2>"$DIR/tgt.log" &
TGT=$!
wait_sock "$DIR/pmio.sock"
R="$BIN/pmio-rpc -s $DIR/pmio.sock"
$R bdev_null_create Null0 1024 512 >/dev/null
$R vhost_create_blk_controller --cpumask "$MASK" vhost.0 Null0 >/dev/null
wait_sock "$DIR/vhost.0"
EXPORT=type=vhost-user-blk,id=e0,node-name=null0,addr.type=unix,addr.path=$DIR/qsd.sock
EXPORT+=,writable=on,num-queues=1,logical-block-size=512
taskset -c "$CPU" "$QSD" \
    --blockdev driver=null-co,node-name=null0,size=1073741824,read-zeroes=off \
    --export "$EXPORT" 2>"$DIR/qsd.log" &
QSDPID=$!
wait_sock "$DIR/qsd.sock"
for p in $TGT $QSDPID; do
    echo "  $(cat /proc/$p/comm) pid $p: $(ls /proc/$p/task | wc -l) threads, allowed cpus" \
        "$(taskset -pc "$p" | sed 's/.*: //'), $(cat /proc/$p/autogroup)"
done
echo "  host load average: $(cut -d' ' -f1-3 /proc/loadavg)"

guest=("$RUN_IN_VM")
[ -n "$GUEST_CPUS" ] && guest=(taskset -c "$GUEST_CPUS" "$RUN_IN_VM")
ROWS=$DIR/rows
: > "$ROWS"
echo "== the guest: ${SECS}s x $ROUNDS rounds on each disk, 4 KiB random reads, QD $DEPTH"
T_ALL=$(ticks $TGT) Q_ALL=$(ticks $QSDPID)
set +e
"${guest[@]}" --quiet --timeout $((200 + ROUNDS * 2 * (SECS + 15))) --cpus 2 \
    --vhost-user-blk "$DIR/vhost.0" --vhost-user-blk "$DIR/qsd.sock" \
    --env BENCH_SECS="$SECS" --env BENCH_ROUNDS="$ROUNDS" --env BENCH_DEPTH="$DEPTH" \
    --file "$BIN/pmio-perf" -- test/vm/vhost-bench-in-guest.sh vda vdb 2>&1 |
while IFS= read -r line; do
    case $line in
    "BENCH begin "*)
        if [ -z "$QEMU" ]; then # the guest's QEMU: the process with our first disk's socket
            QEMU=$(pgrep -f -- "id=vub0,path=$DIR/vhost.0" | head -1)
            echo "  guest QEMU pid $QEMU: allowed cpus $(taskset -pc "$QEMU" | sed 's/.*: //')," \
                "$(cat /proc/$QEMU/autogroup)"
        fi
        sleep 0.9 # the guest waits 1 s after this line before it starts pmio-perf
        t0=$(ticks $TGT); q0=$(ticks $QSDPID); c0=$(core_busy $CPU); w0=$(date +%s%N)
        read -r g0 m0 <<<"$(guest_rest)" ;;
    "BENCH end "*)
        t1=$(ticks $TGT); q1=$(ticks $QSDPID); c1=$(core_busy $CPU); w1=$(date +%s%N)
        read -r g1 m1 <<<"$(guest_rest)"
        read -r _ _ round dev ios iops p50 p99 irqs <<<"$line"
        if [ "$dev" = vda ]; then who=pmio-tgt own=$((t1 - t0)) other=$((q1 - q0))
        else who=qsd own=$((q1 - q0)) other=$((t1 - t0)); fi
        # The rest of the core's busy time: other processes of the machine on the backends' core.
        rest=$((c1 - c0 - own - other)); [ $rest -lt 0 ] && rest=0
        grest=$((g1 - g0 - (m1 - m0))); [ $grest -lt 0 ] && grest=0
        wall=$(((w1 - w0) / 1000000))
        echo "$round $who $ios $iops $p50 $p99 $own $other $irqs $rest $wall $grest" >> "$ROWS"
        awk -v r="$round" -v w="$who" -v n="$ios" -v i="$iops" -v p="$p99" -v o="$own" \
            -v x="$other" -v q="$irqs" -v z="$rest" -v ms="$wall" -v hz="$HZ" -v c="$CPU" \
            -v gz="$grest" -v gc="${GCORE:--}" -v secs="$SECS" 'BEGIN {
            printf "round %s %-8s IOPS %6.0f  p99 %7.1f us  backend CPU %5.2f s = %5.1f us/IO," \
                " %3.0f%% of core %s (other backend %.2f s, others %3.0f%%; others on guest core" \
                " %s %3.0f%%)  guest IRQs/IO %.3f  window %.1f s%s\n", r, w, i, p / 1000, o / hz,
                o / hz * 1e6 / n, o / hz * 1e5 / ms, c, x / hz, z / hz * 1e5 / ms, gc,
                gz / hz * 1e5 / ms, q / n, ms / 1000,
                (ms < 900 * secs || ms > 1500 * secs) ? " (console late: host CPU figures invalid)" : "" }' ;;
    *) printf '%s\n' "$line" ;;
    esac
done
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || fail "guest (exit $rc)"
T_ALL=$(($(ticks $TGT) - T_ALL)) Q_ALL=$(($(ticks $QSDPID) - Q_ALL))
echo "  host load average: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== per round (pmio-tgt / qemu-storage-daemon)"
# A run's host-side window comes from when its begin and end lines reached the host; one not
# about BENCH_SECS long (console output delayed) makes that run's host CPU figures meaningless.
awk -v hz="$HZ" -v secs="$SECS" '
    { k = $1 SUBSEP $2; ios[k] = $3; iops[k] = $4; p99[k] = $6; cpu[k] = $7; irq[k] = $9
      ok[k] = $11 >= 900 * secs && $11 <= 1500 * secs; bad += !ok[k]
      share[k] = $7 / hz * 1e5 / $11; rest[k] = $10 / hz * 1e5 / $11
      grest[k] = $12 / hz * 1e5 / $11; n = $1 > n ? $1 : n }
    function us(k) { return cpu[k] / hz * 1e6 / ios[k] }
    function f(k, v, fmt) { return ok[k] ? sprintf(fmt, v) : "n/a" }
    function med(a, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
        if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    END {
        print "| round | pmio-tgt IOPS | qsd IOPS | IOPS ratio | p99 pmio-tgt / qsd (us) | p99 ratio" \
            " | backend CPU/IO pmio-tgt / qsd (us) | backend CPU share of the core pmio-tgt / qsd (%)" \
            " | others on the core pmio-tgt / qsd (%) | others on the guest core pmio-tgt / qsd (%)" \
            " | guest IRQs/IO pmio-tgt / qsd |"
        print "|---|---|---|---|---|---|---|---|---|---|---|"
        for (r = 1; r <= n; r++) {
            a = r SUBSEP "pmio-tgt"; b = r SUBSEP "qsd"
            ri[r] = iops[a] / iops[b]; rp[r] = p99[a] / p99[b]
            printf "| %d | %.0f | %.0f | %.2f | %.0f / %.0f | %.2f | %s / %s | %s / %s | %s / %s" \
                " | %s / %s | %.3f / %.3f |\n", r, iops[a], iops[b], ri[r], p99[a] / 1000,
                p99[b] / 1000, rp[r], f(a, us(a), "%.1f"), f(b, us(b), "%.1f"),
                f(a, share[a], "%.0f"), f(b, share[b], "%.0f"), f(a, rest[a], "%.0f"),
                f(b, rest[b], "%.0f"), f(a, grest[a], "%.0f"), f(b, grest[b], "%.0f"),
                irq[a] / ios[a], irq[b] / ios[b]
        }
        if (bad) printf "(n/a: %d run(s) whose console lines reached the host late)\n", bad
        lo = hi = ri[1]; for (r = 2; r <= n; r++) { lo = ri[r] < lo ? ri[r] : lo; hi = ri[r] > hi ? ri[r] : hi }
        printf "median IOPS ratio %.2f (range %.2f-%.2f), median p99 ratio %.2f (< 1: pmio-tgt lower)\n",
            med(ri, n), lo, hi, med(rp, n)
        # Whole guest phase (boot, and each backend idle during the other runs): needs no windows.
        for (r = 1; r <= n; r++) { ta += ios[r SUBSEP "pmio-tgt"]; qa += ios[r SUBSEP "qsd"] }
        printf "whole guest phase: pmio-tgt %.2f s CPU / %d I/Os = %.1f us/IO;" \
            " qemu-storage-daemon %.2f s / %d = %.1f us/IO\n", tall / hz, ta, tall / hz * 1e6 / ta,
            qall / hz, qa, qall / hz * 1e6 / qa
    }' tall="$T_ALL" qall="$Q_ALL" "$ROWS"
