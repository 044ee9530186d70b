#!/usr/bin/env bash
# `make bench-nvmf-spdk` (issue 26, BENCHMARKS.md "#26"): pmio-tgt beside SPDK's nvmf_tgt, each
# driven by SPDK's spdk_nvme_perf and by pmio-perf, over NVMe/TCP on 127.0.0.1. The target runs
# on core 0 with one reactor and a null bdev (4 KiB blocks), the initiator on core 1, one I/O
# queue at QD 128. Every round starts each target fresh and alone (an idle nvmf_tgt busy-polls
# its core, so two side by side measure neither), alternating pmio, SPDK, pmio, SPDK...
#
# Needs an SPDK v25.09 build outside the repository (../shared/reference/spdk-build.md):
# SPDK_DIR (default /tmp/spdk). Not part of `make test`.
#
# BENCH_ROUNDS (5), BENCH_SECS (5); BENCH_CASES: the workloads, any of
#   randread-4k randread-128k randwrite-4k: one connection at QD 128;
#   conns64-4k: 4 KiB random reads over 64 connections, 16 subsystems (a null bdev each) of
#     one controller with 4 I/O queues (spdk_nvme_perf -P 4), QD 8 each;
#   idle256: the target's resident memory (VmRSS) with 256 idle connections held by
#     pmio's host (64 controllers, admin + 3 I/O queues each: drivers/nvme/examples/nvmf_idle);
#   (default: all five);
# BENCH_INITIATORS: spdk pmio (default both); BENCH_TARGETS: pmio spdk (default both);
# BENCH_TGT_ARGS: more pmio-tgt flags; BENCH_LOG: keep the per-run outputs in this directory.
# Prints one line per run and a table of medians with the ratio pmio / SPDK.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh
"${CARGO:-cargo}" build --release -q -p pmio-nvme --example nvmf_idle
IDLE=$BIN/examples/nvmf_idle
SPDK_DIR=${SPDK_DIR:-/tmp/spdk}
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECS:-5}
CASES=${BENCH_CASES:-randread-4k randread-128k randwrite-4k conns64-4k idle256}
INITIATORS=${BENCH_INITIATORS:-spdk pmio}
TARGETS=${BENCH_TARGETS:-pmio spdk}
NQN=nqn.2016-06.io.pmio:bench-spdk
[ -x "$SPDK_DIR/build/bin/nvmf_tgt" ] || {
    echo "no SPDK build at $SPDK_DIR (SPDK_DIR=...; ../shared/reference/spdk-build.md)" >&2
    exit 2
}
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib
DIR=${BENCH_LOG:-$(mktemp -d /tmp/pmio-spdk-bench.XXXXXX)}
mkdir -p "$DIR"
TGT=
stop_target() {
    if [ -n "$TGT" ]; then
        kill "$TGT" 2>/dev/null || true
        wait "$TGT" 2>/dev/null || true
        TGT=
    fi
}
cleanup() {
    stop_target
    [ -n "${BENCH_LOG:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$DIR/tgt.log" >&2; exit 1; }

# The same SPDK RPCs set up either target; rpc.py for SPDK's, pmio-rpc (rpc.py's flags) for pmio.
rpc() {
    case $1 in
    pmio) shift; "$BIN/pmio-rpc" -s "$DIR/tgt.sock" "$@" ;;
    spdk) shift; PYTHONPATH=$SPDK_DIR/python "$SPDK_DIR/scripts/rpc.py" -s "$DIR/tgt.sock" "$@" ;;
    esac
}

# start_target pmio|spdk PORT [SUBSYSTEMS]: a fresh target on core 0; subsystem $NQN (and
# $NQN-1 ... for more) on PORT, each with a null bdev of its own.
start_target() {
    local t=$1 port=$2 subs=${3:-1}
    rm -f "$DIR/tgt.sock"
    case $t in
    pmio)
        # shellcheck disable=SC2086 # BENCH_TGT_ARGS is a list of flags
        RUST_LOG=warn "$BIN/pmio-tgt" -r "$DIR/tgt.sock" -m 0x1 ${BENCH_TGT_ARGS:-} \
            2>"$DIR/tgt.log" &
        ;;
    spdk)
        "$SPDK_DIR/build/bin/nvmf_tgt" -m 0x1 --no-huge -s 1024 -u -r "$DIR/tgt.sock" \
            >"$DIR/tgt.log" 2>&1 &
        ;;
    esac
    TGT=$!
    for _ in $(seq 400); do [ -S "$DIR/tgt.sock" ] && break; sleep 0.05; done
    [ -S "$DIR/tgt.sock" ] || fail "$t target did not open its RPC socket"
    rpc "$t" nvmf_create_transport -t TCP -q 256 -c 4096 >/dev/null || fail "$t transport"
    local k nqn
    for k in $(seq 0 $((subs - 1))); do
        nqn=$(sub_nqn "$k")
        {
            rpc "$t" bdev_null_create "Null$k" 1024 4096 &&
                rpc "$t" nvmf_create_subsystem "$nqn" -a -s "SPDK$k" &&
                rpc "$t" nvmf_subsystem_add_ns "$nqn" "Null$k" &&
                rpc "$t" nvmf_subsystem_add_listener "$nqn" -t tcp -a 127.0.0.1 -s "$port"
        } >/dev/null || fail "$t target setup of $nqn"
    done
}
sub_nqn() { if [ "$1" = 0 ]; then echo "$NQN"; else echo "$NQN-$1"; fi; }

# conns64 PORT: spdk_nvme_perf over 16 controllers x 4 I/O queues at QD 8; prints the IOPS.
conns64() {
    local port=$1 k r=()
    for k in $(seq 0 15); do
        r+=(-r "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$(sub_nqn "$k") ns:1")
    done
    taskset -c 1 "$SPDK_DIR/build/bin/spdk_nvme_perf" -c 0x2 --no-huge -s 1024 "${r[@]}" -P 4 \
        -q 8 -o 4096 -w randread -t "$SECS" >"$DIR/init.out" 2>&1 ||
        fail "spdk_nvme_perf: $(tail -5 "$DIR/init.out")"
    awk '/^Total/ {print int($3)}' "$DIR/init.out"
}

# idle256 PORT: how much the target's VmRSS (KiB) grew while pmio's host holds 256 idle
# connections (its total then on stderr).
idle256() {
    local port=$1 held rss rss0
    rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$TGT/status")
    "$IDLE" 127.0.0.1 "$port" "$NQN" 64 3 3600 >"$DIR/idle.out" 2>"$DIR/idle.err" &
    held=$!
    for _ in $(seq 600); do grep -q connected "$DIR/idle.out" && break; sleep 0.1; done
    grep -q "connected 256" "$DIR/idle.out" || fail "nvmf_idle: $(cat "$DIR/idle.err")"
    sleep 2
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$TGT/status")
    kill "$held"
    wait "$held" 2>/dev/null || true
    echo "  VmRSS $((rss0 / 1024)) MiB before, $((rss / 1024)) MiB with 256 connections" >&2
    echo $((rss - rss0))
}

# run_initiator spdk|pmio PORT CASE: prints the IOPS.
run_initiator() {
    local i=$1 port=$2 case=$3 w bs
    w=${case%-*}
    bs=${case#*-}
    bs=${bs%k}
    bs=$((bs * 1024))
    case $i in
    spdk)
        taskset -c 1 "$SPDK_DIR/build/bin/spdk_nvme_perf" -c 0x2 --no-huge -s 1024 \
            -r "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" \
            -q 128 -o "$bs" -w "$w" -t "$SECS" >"$DIR/init.out" 2>&1 ||
            fail "spdk_nvme_perf: $(tail -5 "$DIR/init.out")"
        awk '/^Total/ {print int($3)}' "$DIR/init.out"
        ;;
    pmio)
        "$BIN/pmio-perf" -m '[1]' --dev "nvmf:traddr=127.0.0.1,trsvcid=$port,subnqn=$NQN" \
            -w "$w" -b "$bs" -d 128 -t "$SECS" --json >"$DIR/init.out" 2>"$DIR/init.err" ||
            fail "pmio-perf: $(cat "$DIR/init.err")"
        sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p' "$DIR/init.out" | head -1 | cut -d. -f1
        ;;
    esac
}

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

echo "pmio-tgt vs SPDK nvmf_tgt (core 0, null bdev 4 KiB blocks) <- NVMe/TCP 127.0.0.1 <-" \
    "initiator (core 1), QD 128, ${SECS}s x $ROUNDS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$DIR/results"
port=$((20000 + RANDOM % 40000))
for r in $(seq "$ROUNDS"); do
    for c in $CASES; do
        for i in $INITIATORS; do
            for t in $TARGETS; do
                port=$((port + 1))
                case $c in
                conns64-4k)
                    [ "$i" = spdk ] || continue # pmio-perf has no -P (queues per namespace)
                    start_target "$t" "$port" 16
                    iops=$(conns64 "$port")
                    ;;
                idle256)
                    [ "$i" = spdk ] || continue # one row: the host is pmio's either way
                    start_target "$t" "$port"
                    iops=$(idle256 "$port")
                    ;;
                *)
                    start_target "$t" "$port"
                    iops=$(run_initiator "$i" "$port" "$c")
                    ;;
                esac
                stop_target
                echo "round $r: $c $i -> $t: $iops $([ "$c" = idle256 ] && echo KiB || echo IOPS)"
                echo "$c $i $t $iops" >>"$DIR/results"
            done
        done
    done
done

echo
echo "(idle256: how much the resident memory grew with 256 idle connections, not IOPS; its ratio is pmio's over SPDK's)"
echo "| case | initiator | -> pmio-tgt (median, min-max) | -> SPDK nvmf_tgt (median, min-max) | pmio / SPDK |"
echo "|---|---|---|---|---|"
for c in $CASES; do
    for i in $INITIATORS; do
        line="| $c | $i"
        meds=()
        case $c in conns64-4k | idle256) [ "$i" = spdk ] || continue ;; esac
        unit=K
        [ "$c" = idle256 ] && unit=KiB
        for t in pmio spdk; do
            vals=$(awk -v c="$c" -v i="$i" -v t="$t" '$1 == c && $2 == i && $3 == t {print $4}' "$DIR/results")
            if [ -z "$vals" ]; then
                line="$line | -"
                meds+=(0)
                continue
            fi
            m=$(echo "$vals" | median)
            lo=$(echo "$vals" | sort -n | head -1)
            hi=$(echo "$vals" | sort -n | tail -1)
            line="$line | $(awk -v m="$m" -v lo="$lo" -v hi="$hi" -v u="$unit" 'BEGIN {d = (u == "K") ? 1e3 : 1; printf "%.0f %s (%.0f-%.0f %s)", m / d, u, lo / d, hi / d, u}')"
            meds+=("$m")
        done
        ratio=$(awk -v a="${meds[0]}" -v b="${meds[1]}" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-"}')
        echo "$line | $ratio |"
    done
done
