#!/usr/bin/env bash
# `make bench-nvmf-loopback` (issue 18, BENCHMARKS.md "#18 loopback"): pmio's NVMe/TCP pair on
# the host over 127.0.0.1. pmio-tgt on core 0 serves a null bdev; pmio-perf on core 1 is the
# host: 4 KiB random reads, QD 128, one connection. Per run:
# - IOPS;
# - pmio-perf's CPU per I/O (its own report: process CPU time over I/Os) and its reactor's
#   busy time per I/O (its busy share of the run: the work, without polls that found nothing);
# - pmio-tgt's CPU per I/O (its process CPU time, /proc/PID/stat, as getrusage counts it) and
#   its reactor's busy time per I/O (framework_get_reactors);
# - the cores everything else on the machine used meanwhile (all busy time in /proc/stat less
#   both processes'): a round with others at work does not measure the pair.
# BENCH_ROUNDS (5), BENCH_SECS (10), BENCH_DEPTH (128); BENCH_TGT_ARGS: more pmio-tgt flags
# (`--no-interrupt` busy-polls as SPDK's nvmf_tgt does); BENCH_TLS=1: each round runs twice,
# plain TCP then TLS 1.3 with a PSK (a second subsystem on a secure-channel listener, its own
# null bdev; issue 31). Not part of `make test`: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh
ROUNDS=${BENCH_ROUNDS:-5}
SECS=${BENCH_SECS:-10}
DEPTH=${BENCH_DEPTH:-128}
NQN=nqn.2016-06.io.pmio:bench-loop
DIR=$(mktemp -d /tmp/pmio-nvmf-bench.XXXXXX)
TGT=
cleanup() {
    [ -n "$TGT" ] && kill "$TGT" 2>/dev/null && wait "$TGT" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$DIR/tgt.log" >&2; exit 1; }
R() { "$BIN/pmio-rpc" -s "$DIR/tgt.sock" "$@"; }
port=$((20000 + RANDOM % 40000))

# shellcheck disable=SC2086 # BENCH_TGT_ARGS is a list of flags
RUST_LOG=warn "$BIN/pmio-tgt" -r "$DIR/tgt.sock" -m 0x1 ${BENCH_TGT_ARGS:-} 2>"$DIR/tgt.log" &
TGT=$!
for _ in $(seq 200); do [ -S "$DIR/tgt.sock" ] && break; sleep 0.05; done
R bdev_null_create Null0 1024 512 >/dev/null
R nvmf_create_transport -t TCP >/dev/null
R nvmf_create_subsystem $NQN -a >/dev/null
R nvmf_subsystem_add_ns $NQN Null0 >/dev/null
R nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s $port >/dev/null
MODES=plain
if [ "${BENCH_TLS:-0}" = 1 ]; then
    MODES="plain tls"
    HOST=nqn.2014-08.org.nvmexpress:uuid:31313131-0000-4000-8000-0000000000b1
    tport=$((port + 1))
    mkdir -m 700 "$DIR/keys"
    echo 'NVMeTLSkey-1:01:cG1pby10bHMtbG9vcGJhY2sta2V5LTAxMjM0NTY3ODklaiGz:' >"$DIR/keys/psk"
    chmod 600 "$DIR/keys/psk"
    R keyring_file_add_key psk "$DIR/keys/psk" >/dev/null
    R bdev_null_create Null1 1024 512 >/dev/null
    R nvmf_create_subsystem $NQN-tls >/dev/null
    R nvmf_subsystem_add_ns $NQN-tls Null1 >/dev/null
    R nvmf_subsystem_add_host $NQN-tls $HOST --psk psk >/dev/null
    R nvmf_subsystem_add_listener $NQN-tls -t tcp -a 127.0.0.1 -s $tport --secure-channel >/dev/null
fi
dev() { # dev MODE: pmio-perf's device
    case $1 in
    plain) echo "nvmf:traddr=127.0.0.1,trsvcid=$port,subnqn=$NQN" ;;
    tls) echo "nvmf:traddr=127.0.0.1,trsvcid=$tport,subnqn=$NQN-tls,hostnqn=$HOST,psk=$DIR/keys/psk" ;;
    esac
}

hz=$(getconf CLK_TCK)
tgt_ticks() { awk '{print $14 + $15}' "/proc/$TGT/stat"; }
all_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
tgt_busy_ns() { R framework_get_reactors | sed -n 's/^ *"busy": \([0-9]*\),*$/\1/p' | head -1; }
num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" "$DIR/r.json" | head -1; }

echo "pmio-tgt ${BENCH_TGT_ARGS:-}(core 0, null bdev) <- NVMe/TCP 127.0.0.1:$port <- pmio-perf (core 1)," \
    "randread 4 KiB QD $DEPTH, ${SECS}s x $ROUNDS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| run | mode | IOPS | pmio-perf CPU/IO (ns) | pmio-perf reactor busy/IO (ns) | pmio-tgt CPU/IO (ns) | pmio-tgt reactor busy/IO (ns) | others (cores) |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for i in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    t0=$(tgt_ticks)
    b0=$(tgt_busy_ns)
    a0=$(all_ticks)
    "$BIN/pmio-perf" -m '[1]' --dev "$(dev "$mode")" \
        -w randread -b 4096 -d "$DEPTH" -t "$SECS" --json >"$DIR/r.json" 2>"$DIR/perf.err" ||
        fail "pmio-perf: $(cat "$DIR/perf.err")"
    t1=$(tgt_ticks)
    b1=$(tgt_busy_ns)
    a1=$(all_ticks)
    iops=$(num iops)
    ios=$(num ios)
    perf_cpu=$(num cpu_ns_per_io)
    perf_busy=$(num busy_pct)
    # The target's counters also cover pmio-perf's connect and disconnect (milliseconds).
    awk -v i="$i" -v mode="$mode" -v iops="$iops" -v ios="$ios" -v pc="$perf_cpu" -v dt=$((t1 - t0)) \
        -v hz="$hz" -v db=$((b1 - b0)) -v da=$((a1 - a0)) -v s="$SECS" -v pb="$perf_busy" 'BEGIN {
            tgt = dt / hz * 1e9; perf = pc * ios
            others = (da / hz * 1e9 - tgt - perf) / (s * 1e9)
            if (others < 0) others = 0
            printf "| %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f |\n", i, mode, iops, pc,
                pb / 100 * s * 1e9 / ios, tgt / ios, db / ios, others
        }'
  done
done

