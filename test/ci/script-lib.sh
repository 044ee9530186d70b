# Sourced by the host-side daemon scripts (nvmf-loopback.sh, nvmf-tls.sh, raid-replicas.sh,
# rbd-tgt.sh) once DIR, their scratch directory, is set: PIDS, the processes they start
# (killed at exit, then the script's cleanup_more if it has one, then DIR removed); fail (the
# message, then the tail of every $DIR/*.log); expect; free_port; start_tgt, rpc and perf for
# the daemons named by their socket in DIR (BIN: test/ci/release-bins.sh).
PIDS=()
fail() {
    echo "FAIL: $*" >&2
    for f in "$DIR"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -25 "$f" >&2; }; done
    exit 1
}
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if declare -F cleanup_more >/dev/null; then cleanup_more; fi
    rm -rf "$DIR"
}
trap cleanup EXIT
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}

# A TCP port nothing listens on: random, checked against the kernel's listening sockets.
free_port() {
    local p hex
    while :; do
        p=$((20000 + RANDOM % 40000))
        hex=$(printf ':%04X ' "$p")
        grep -q " 0A " <(grep -h "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null) || break
    done
    echo "$p"
}

# start_tgt NAME MASK [ARGS]: pmio-tgt on socket $DIR/NAME.sock, log $DIR/NAME.log; its pid in
# NAME_PID.
start_tgt() {
    local name=$1 mask=$2
    shift 2
    rm -f "$DIR/$name.sock"
    RUST_LOG=${RUST_LOG:-info} "$BIN/pmio-tgt" -r "$DIR/$name.sock" -m "$mask" "$@" \
        2>>"$DIR/$name.log" &
    local pid=$!
    PIDS+=("$pid")
    printf -v "${name}_PID" %s "$pid"
    for _ in $(seq 200); do [ -S "$DIR/$name.sock" ] && return 0; sleep 0.05; done
    fail "pmio-tgt $name did not start"
}
# rpc NAME ARGS: pmio-rpc to daemon NAME.
rpc() { local name=$1; shift; "$BIN/pmio-rpc" -s "$DIR/$name.sock" "$@"; }
# perf LOG ARGS: pmio-perf on core 1, its output in $DIR/LOG.log.
perf() { local log=$1; shift; "$BIN/pmio-perf" -m '[1]' "$@" >"$DIR/$log.log" 2>&1; }
