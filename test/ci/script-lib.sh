# Sourced by the host-side daemon scripts (nvmf-loopback.sh, nvmf-tls.sh, raid-replicas.sh,
# rbd-tgt.sh) once DIR, their scratch directory, is set: PIDS, the processes they start
# (killed at exit, then the script's cleanup_more if it has one, then DIR removed); fail (the
# message, then the tail of every $DIR/*.log); expect; free_port.
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
