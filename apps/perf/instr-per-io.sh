#!/bin/sh
# Instructions per I/O inside pmio-perf's reactor poller (valgrind callgrind; deterministic
# enough to compare hot-path changes on a noisy machine). --fair-sched: without it a reactor
# spinning while it waits for its go signal can inflate the count up to 2x.
# Usage: [PMIO_DEV=uring:path=FILE,nop=1] apps/perf/instr-per-io.sh [pmio-perf args]
set -eu
BIN=${PMIO_PERF:-./target/release/pmio-perf}
DEV=${PMIO_DEV:-null}
OUT=$(mktemp -d)
valgrind --tool=callgrind --fair-sched=yes --toggle-collect='*register_poller*' --callgrind-out-file="$OUT/cg" \
    "$BIN" --dev "$DEV" -t 1 -m '[1]' --json "$@" >"$OUT/json" 2>"$OUT/err"
IR=$(grep -E '^summary:|^totals:' "$OUT/cg" | head -1 | awk '{print $2}')
IOS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ios"])' "$OUT/json")
python3 -c "print(f'instructions per I/O in the poller: {$IR / $IOS:.1f} ({$IR} Ir / {$IOS} I/Os)')"
echo "profile kept in $OUT/cg (callgrind_annotate --auto=yes $OUT/cg)"
