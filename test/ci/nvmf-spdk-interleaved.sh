#!/usr/bin/env bash
# `make bench-nvmf-spdk-interleaved` (issue 26, BENCHMARKS.md "#26"): pmio-tgt beside SPDK's
# nvmf_tgt as test/ci/nvmf-spdk-bench.sh sets them up (core 0, one reactor, a null bdev of
# 4 KiB blocks, the initiator on core 1, one I/O queue at QD 128), but measured in interleaved
# slices: both targets and both initiators run for the whole measurement, and one pair
# (target + its initiator) at a time is let run by SIGCONT while the other pair is held by
# SIGSTOP. Each slice's IOPS is the target's own count (`nvmf_get_stats` completed_nvme_io,
# which both targets answer) over the slice's wall time; the ratio of each pmio slice to the
# SPDK slice right after it is taken, and their median reported.
#
# Why: this machine's speed swings by 2x within a second (shared host, memory bandwidth),
# so separate runs seconds apart compare the machine more than the targets; slices a second
# apart, many times over, see the same machine. A stopped target has no busy-polling reactor
# taking the running one's core.
#
# SPDK_DIR (default /tmp/spdk), BENCH_SLICES (30 pairs), BENCH_SLICE_SECS (1),
# BENCH_CASES (randread-4k randread-128k randwrite-4k; also conns64-4k: 4 KiB random reads
# over 16 subsystems x 4 I/O queues at QD 8 each, spdk_nvme_perf only, as in
# nvmf-spdk-bench.sh), BENCH_INITIATORS (spdk pmio),
# BENCH_TGT_ARGS (more pmio-tgt flags), BENCH_LOG (keep the outputs in this directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh
SPDK_DIR=${SPDK_DIR:-/tmp/spdk}
SLICES=${BENCH_SLICES:-30}
SLICE=${BENCH_SLICE_SECS:-1}
CASES=${BENCH_CASES:-randread-4k randread-128k randwrite-4k}
INITIATORS=${BENCH_INITIATORS:-spdk pmio}
NQN=nqn.2016-06.io.pmio:bench-spdk
[ -x "$SPDK_DIR/build/bin/nvmf_tgt" ] || {
    echo "no SPDK build at $SPDK_DIR (SPDK_DIR=...; ../shared/reference/spdk-build.md)" >&2
    exit 2
}
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib
DIR=${BENCH_LOG:-$(mktemp -d /tmp/pmio-spdk-interleaved.XXXXXX)}
mkdir -p "$DIR"
declare -A TGT CLI PORT
PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    [ -n "${BENCH_LOG:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# cpu_ns PID: nanoseconds of CPU the process has used (utime + stime, in clock ticks), for
# IOPS per target core actually used: SPDK's reactor polls without sleeping, pmio-tgt's
# sleeps when it has nothing to do. (schedstat is not in nanoseconds on every kernel.)
HZ=$(getconf CLK_TCK)
cpu_ns() { awk -v hz="$HZ" '{sub(/.*\) /, ""); printf "%.0f", ($12 + $13) * 1000000000 / hz}' /proc/"$1"/stat; }

# pmio-rpc speaks SPDK's JSON-RPC: it sets up and reads both targets.
rpc() { local t=$1; shift; "$BIN/pmio-rpc" -s "$DIR/$t.sock" "$@"; }
ops() {
    rpc "$1" nvmf_get_stats |
        python3 -c 'import json, sys; print(sum(g["completed_nvme_io"] for g in json.load(sys.stdin)["poll_groups"]))'
}

# start_target pmio|spdk [SUBSYSTEMS]: subsystem $NQN (and $NQN-1 ... for more) on the
# target's port, each with a null bdev of its own.
start_target() {
    local t=$1
    rm -f "$DIR/$t.sock"
    case $t in
    pmio)
        # shellcheck disable=SC2086 # BENCH_TGT_ARGS is a list of flags
        RUST_LOG=warn setsid "$BIN/pmio-tgt" -r "$DIR/$t.sock" -m 0x1 ${BENCH_TGT_ARGS:-} \
            </dev/null >"$DIR/$t.log" 2>&1 &
        ;;
    spdk)
        setsid "$SPDK_DIR/build/bin/nvmf_tgt" -m 0x1 --no-huge -s 1024 -u -i 7 \
            -r "$DIR/$t.sock" </dev/null >"$DIR/$t.log" 2>&1 &
        ;;
    esac
    TGT[$t]=$!
    PIDS+=("$!")
    for _ in $(seq 400); do [ -S "$DIR/$t.sock" ] && break; sleep 0.05; done
    [ -S "$DIR/$t.sock" ] || fail "$t target did not open its RPC socket"
    rpc "$t" nvmf_create_transport -t TCP -q 256 -c 4096 >/dev/null || fail "$t transport"
    local k nqn
    for k in $(seq 0 $((${2:-1} - 1))); do
        nqn=$(sub_nqn "$k")
        {
            rpc "$t" bdev_null_create "Null$k" 1024 4096 &&
                rpc "$t" nvmf_create_subsystem "$nqn" -a -s "SPDK$k" &&
                rpc "$t" nvmf_subsystem_add_ns "$nqn" "Null$k" &&
                rpc "$t" nvmf_subsystem_add_listener "$nqn" -t tcp -a 127.0.0.1 -s "${PORT[$t]}"
        } >/dev/null || fail "$t target setup of $nqn"
    done
}
sub_nqn() { if [ "$1" = 0 ]; then echo "$NQN"; else echo "$NQN-$1"; fi; }

start_initiator() {
    local i=$1 t=$2 w=$3 bs=$4 shm
    shm=$([ "$t" = pmio ] && echo 11 || echo 12)
    case $i in
    spdk-conns64)
        local k r=()
        for k in $(seq 0 15); do
            r+=(-r "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:${PORT[$t]} subnqn:$(sub_nqn "$k") ns:1")
        done
        taskset -c 1 "$SPDK_DIR/build/bin/spdk_nvme_perf" -c 0x2 --no-huge -s 1024 -i "$shm" \
            "${r[@]}" -P 4 -q 8 -o "$bs" -w "$w" -t 3600 >"$DIR/init.$t" 2>&1 &
        ;;
    spdk)
        taskset -c 1 "$SPDK_DIR/build/bin/spdk_nvme_perf" -c 0x2 --no-huge -s 1024 -i "$shm" \
            -r "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:${PORT[$t]} subnqn:$NQN" \
            -q 128 -o "$bs" -w "$w" -t 3600 >"$DIR/init.$t" 2>&1 &
        ;;
    pmio)
        taskset -c 1 "$BIN/pmio-perf" -m '[1]' \
            --dev "nvmf:traddr=127.0.0.1,trsvcid=${PORT[$t]},subnqn=$NQN" \
            -w "$w" -b "$bs" -d 128 -t 3600 >"$DIR/init.$t" 2>&1 &
        ;;
    esac
    CLI[$t]=$!
    PIDS+=("$!")
}

echo "pmio-tgt vs SPDK nvmf_tgt, interleaved ${SLICE}s slices x $SLICES pairs (core 0 target," \
    "core 1 initiator, QD 128); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| case | initiator | pmio-tgt slice median (min-max) | SPDK slice median (min-max) | pmio / SPDK, median of slice pairs (IQR) | target cores used, pmio / SPDK (median) | IOPS per target core used, pmio / SPDK (IQR) |"
echo "|---|---|---|---|---|---|---|"
port=$((20000 + RANDOM % 40000))
for c in $CASES; do
    w=${c%-*}
    bs=${c#*-}
    bs=$((${bs%k} * 1024))
    for i in $INITIATORS; do
        subs=1 how=$i wl=$w
        if [ "$w" = conns64 ]; then
            [ "$i" = spdk ] || continue # pmio-perf has no -P (queues per namespace)
            subs=16 how=spdk-conns64 wl=randread
        fi
        for t in pmio spdk; do
            port=$((port + 1))
            PORT[$t]=$port
            start_target "$t" "$subs"
            start_initiator "$how" "$t" "$wl" "$bs"
            # Until its I/O flows, then held.
            for _ in $(seq 200); do [ "$(ops "$t")" -gt 1000 ] && break; sleep 0.05; done
            [ "$(ops "$t")" -gt 1000 ] || fail "$i -> $t: no I/O ($(tail -3 "$DIR/init.$t"))"
            kill -STOP "${CLI[$t]}" "${TGT[$t]}"
        done
        : >"$DIR/slices"
        for _ in $(seq "$SLICES"); do
            for t in pmio spdk; do
                kill -CONT "${TGT[$t]}" "${CLI[$t]}"
                sleep 0.3 # the connection back at full speed
                a=$(ops "$t")
                ca=$(cpu_ns "${TGT[$t]}")
                ta=$(date +%s%N)
                sleep "$SLICE"
                b=$(ops "$t")
                cb=$(cpu_ns "${TGT[$t]}")
                tb=$(date +%s%N)
                kill -STOP "${CLI[$t]}" "${TGT[$t]}"
                echo "$t $(((b - a) * 1000000000 / (tb - ta))) $(((cb - ca) * 1000 / (tb - ta)))" >>"$DIR/slices"
            done
        done
        stop_all
        python3 - "$DIR/slices" "$c" "$i" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
p = [int(v) for t, v, _ in rows if t == "pmio"]
s = [int(v) for t, v, _ in rows if t == "spdk"]
# CPU the target used, in thousandths of a core, and IOPS per core it used.
pc = [int(c) for t, _, c in rows if t == "pmio"]
sc = [int(c) for t, _, c in rows if t == "spdk"]
pe = [v * 1000 / max(c, 1) for v, c in zip(p, pc)]
se = [v * 1000 / max(c, 1) for v, c in zip(s, sc)]
r = sorted(a / b for a, b in zip(p, s) if b)
re = sorted(a / b for a, b in zip(pe, se) if b)
q = st.quantiles(r, n=4)
qe = st.quantiles(re, n=4)
k = lambda v: f"{v / 1e3:.0f} K"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {k(st.median(p))} ({k(min(p))}-{k(max(p))}) "
      f"| {k(st.median(s))} ({k(min(s))}-{k(max(s))}) | {st.median(r):.2f}x ({q[0]:.2f}-{q[2]:.2f}) "
      f"| {st.median(pc) / 1000:.2f} / {st.median(sc) / 1000:.2f} "
      f"| {st.median(re):.2f}x ({qe[0]:.2f}-{qe[2]:.2f}) |")
PY
    done
done
