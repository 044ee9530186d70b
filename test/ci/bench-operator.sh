#!/usr/bin/env bash
# What the operator's view costs (issue 32), on release binaries (RELEASE=dir, default
# target/release; CARGO_TARGET_DIR honoured by the Makefile's bench-operator target):
#  1. latency histograms: pmio-perf on a null bdev, one core, --latency-histogram off and on,
#     alternating the order every round; IOPS and user-space instructions per I/O (perf stat
#     -e instructions:u, when perf can count them);
#  2. a /metrics scrape: its time, from pmio-tgt with N null bdevs and perform_tests running;
#     and perform_tests IOPS with no scraping against a client scraping as fast as it can,
#     alternating.
# ROUNDS (default 7), SECS (default 3) per run, PARTS (default 12: both). Prints one line per run and the medians.
set -euo pipefail

RELEASE=${RELEASE:-target/release}
ROUNDS=${ROUNDS:-7}
SECS=${SECS:-3}
PARTS=${PARTS:-12}
PERF=$RELEASE/pmio-perf
TGT=$RELEASE/pmio-tgt
RPC=$RELEASE/pmio-rpc
for b in "$PERF" "$TGT" "$RPC"; do
    [ -x "$b" ] || { echo "bench-operator: $b missing (cargo build --release)" >&2; exit 1; }
done
work=$(mktemp -d)
tgt_pid=
cleanup() {
    [ -n "$tgt_pid" ] && kill "$tgt_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# perf stat counts instructions only where the CPU's counters reach (not in every VM: it
# prints "<not supported>"); CPU time per I/O (the report's cpu_ns_per_io) is always there.
have_perf_stat=0
if command -v perf >/dev/null &&
    perf stat -x, -e instructions:u -o "$work/probe" true >/dev/null 2>&1 &&
    grep -q '^[0-9]' "$work/probe"; then
    have_perf_stat=1
fi

if [[ $PARTS == *1* ]]; then
echo "== 1. latency histograms: pmio-perf --dev null -t $SECS, one core, off/on alternating"
perf_run() { # $1 = off|on; prints "iops cpu_ns_per_io instr_per_io"
    local flag=() out instr
    [ "$1" = on ] && flag=(--latency-histogram)
    if [ $have_perf_stat = 1 ]; then
        out=$(perf stat -x, -e instructions:u -o "$work/stat" -- \
            "$PERF" --dev null -t "$SECS" --json "${flag[@]}" 2>/dev/null)
        instr=$(awk -F, '/instructions/ {print $1}' "$work/stat")
    else
        out=$("$PERF" --dev null -t "$SECS" --json "${flag[@]}" 2>/dev/null)
        instr=0
    fi
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["iops"], r["cpu_ns_per_io"], round(int(sys.argv[2])/max(r["ios"],1), 1))' \
        "$out" "${instr:-0}"
}
: >"$work/off"
: >"$work/on"
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="off on"; else order="on off"; fi
    for m in $order; do
        line=$(perf_run "$m")
        read -r i c n <<<"$line"
        echo "round $r $m: IOPS=$i CPU/IO=${c}ns instructions/IO=$n"
        echo "$line" >>"$work/$m"
    done
done
off_iops=$(cut -d' ' -f1 "$work/off" | median)
on_iops=$(cut -d' ' -f1 "$work/on" | median)
off_cpu=$(cut -d' ' -f2 "$work/off" | median)
on_cpu=$(cut -d' ' -f2 "$work/on" | median)
off_ins=$(cut -d' ' -f3 "$work/off" | median)
on_ins=$(cut -d' ' -f3 "$work/on" | median)
echo "median IOPS off=$off_iops on=$on_iops on/off=$(awk -v a="$on_iops" -v b="$off_iops" 'BEGIN{printf "%.4f", a/b}')"
echo "median CPU ns/IO off=$off_cpu on=$on_cpu"
[ $have_perf_stat = 1 ] && echo "median instructions/IO off=$off_ins on=$on_ins (+$(awk -v a="$on_ins" -v b="$off_ins" 'BEGIN{printf "%.1f", a-b}'))"

[ $have_perf_stat = 1 ] || echo "(perf stat cannot count instructions here)"

fi

if [[ $PARTS == *2* ]]; then
echo "== 2. /metrics: pmio-tgt -m 0x1, ${NBDEVS:-16} null bdevs, perform_tests on them"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
setsid "$TGT" -m 0x1 -r "$work/tgt.sock" --metrics-listen "127.0.0.1:$port" >"$work/tgt.log" 2>&1 &
tgt_pid=$!
for _ in $(seq 100); do [ -S "$work/tgt.sock" ] && break; sleep 0.05; done
for i in $(seq 0 $((${NBDEVS:-16} - 1))); do
    "$RPC" -s "$work/tgt.sock" bdev_null_create "Null$i" 64 512 >/dev/null
done
scrape_time() { # mean seconds per scrape over $1 scrapes
    python3 - "$port" "$1" <<'EOF'
import sys, time, urllib.request
port, n = sys.argv[1], int(sys.argv[2])
url = f"http://127.0.0.1:{port}/metrics"
t = time.perf_counter()
for _ in range(n):
    body = urllib.request.urlopen(url).read()
print(f"{(time.perf_counter() - t) / n * 1e3:.3f} {len(body)}")
EOF
}
read -r idle_ms size <<<"$(scrape_time 200)"
echo "scrape, idle daemon: ${idle_ms} ms mean over 200, ${size} bytes"
pt_iops() { # perform_tests on every bdev for SECS; total IOPS
    "$RPC" -s "$work/tgt.sock" perform_tests -q 32 -t "$SECS" |
        python3 -c 'import json,sys; print(sum(j["iops"] for j in json.load(sys.stdin)["results"]))'
}
: >"$work/quiet"
: >"$work/scraped"
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="quiet scraped"; else order="scraped quiet"; fi
    for m in $order; do
        if [ "$m" = scraped ]; then
            python3 - "$port" "$SECS" >"$work/scrapes" <<'EOF' &
import sys, time, urllib.request
port, secs = sys.argv[1], float(sys.argv[2])
url = f"http://127.0.0.1:{port}/metrics"
end, n, t0 = time.time() + secs, 0, time.perf_counter()
while time.time() < end:
    urllib.request.urlopen(url).read()
    n += 1
print(n, f"{(time.perf_counter() - t0) / max(n, 1) * 1e3:.3f}")
EOF
            scraper=$!
            iops=$(pt_iops)
            wait "$scraper"
            echo "round $r scraped: perform_tests IOPS=$iops, scrapes (count, ms each): $(cat "$work/scrapes")"
        else
            iops=$(pt_iops)
            echo "round $r quiet: perform_tests IOPS=$iops"
        fi
        echo "$iops" >>"$work/$m"
    done
done
q=$(median <"$work/quiet")
s=$(median <"$work/scraped")
echo "median perform_tests IOPS quiet=$q scraped=$s scraped/quiet=$(awk -v a="$s" -v b="$q" 'BEGIN{printf "%.4f", a/b}')"
fi
