#!/bin/bash
# `make vm-test-vhost`: pmio-tgt on the host serves a QEMU guest's disks over vhost-user-blk.
# Two malloc bdevs on two reactors: vhost.0 (two queues) and a read-only vhost.1. RPC checks
# on the host (SPDK's replies, packed_ring refused, a served bdev cannot be deleted), then the
# guest's checks (test/vm/vhost-in-guest.sh), then pmio-tgt restarted from its save_config
# serving a second guest; last, pmio-tgt killed and restarted under a guest's pmio-perf --verify
# (QEMU reconnects; the in-flight log resubmits what was in flight). Any failed check exits
# non-zero.
set -euo pipefail
BIN=${BIN:-target/release}
RUN_IN_VM=${RUN_IN_VM:-../shared/vm/run-in-vm}
EXAMPLE=${EXAMPLE:-$BIN/examples/blkzeroout}
DIR=$(mktemp -d /tmp/pmio-vhost.XXXXXX)
S=$DIR/pmio.sock
R="$BIN/pmio-rpc -s $S"
TGT=
fail() { echo "FAIL: $*" >&2; [ -f "$DIR/tgt.log" ] && tail -30 "$DIR/tgt.log" >&2; exit 1; }
cleanup() {
    [ -n "$TGT" ] && kill "$TGT" 2>/dev/null && wait "$TGT" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}
start_tgt() {
    RUST_LOG=${RUST_LOG:-info} "$BIN/pmio-tgt" -r "$S" -m 0x3 -S "$DIR" "$@" 2>>"$DIR/tgt.log" &
    TGT=$!
    for _ in $(seq 100); do [ -S "$S" ] && return 0; sleep 0.1; done
    fail "pmio-tgt did not start"
}
stop_tgt() {
    kill "$TGT"
    wait "$TGT" || fail "pmio-tgt exited with $?"
    TGT=
}

echo "== pmio-tgt on the host, socket directory $DIR"
start_tgt
$R bdev_malloc_create -b Malloc0 64 4096 >/dev/null
$R bdev_malloc_create -b Malloc1 16 512 >/dev/null
$R vhost_create_blk_controller --cpumask 0x3 vhost.0 Malloc0
$R vhost_create_blk_controller -r vhost.1 Malloc1
[ -S "$DIR/vhost.0" ] && [ -S "$DIR/vhost.1" ] || fail "no controller sockets"
out=$($R vhost_create_blk_controller vhost.0 Malloc0 2>&1) && fail "duplicate accepted"
expect "File exists" "$out"
out=$($R vhost_create_blk_controller -p vhost.2 Malloc0 2>&1) && fail "packed_ring accepted"
expect "packed_ring is not supported" "$out"
out=$($R vhost_get_controllers -n nope 2>&1) && fail "unknown controller listed"
expect "No such device" "$out"
out=$($R bdev_malloc_delete Malloc0 2>&1) && fail "a served bdev was deleted"
expect "vhost controller vhost.0" "$out"
out=$($R vhost_get_controllers)
expect '"ctrlr": "vhost.1"' "$out"
expect '"readonly": true' "$out"
expect "\"socket\": \"$DIR/vhost.0\"" "$out"
$R save_config > "$DIR/config.json"
expect '"method": "vhost_create_blk_controller"' "$(cat "$DIR/config.json")"
echo "RPC checks passed"

echo "== the guest"
"$RUN_IN_VM" --quiet --timeout 300 --cpus 2 \
    --vhost-user-blk "$DIR/vhost.0,queues=2" --vhost-user-blk "$DIR/vhost.1" \
    --file "$BIN/pmio-perf" --file "$EXAMPLE" -- test/vm/vhost-in-guest.sh \
    || fail "guest checks (exit $?)"
out=$($R vhost_get_controllers -n vhost.0)
expect '"sessions": \[\]' "$out"
grep -q "queue 1 started on core" "$DIR/tgt.log" || fail "the second queue never ran"
grep "vhost.0: queue . stopped" "$DIR/tgt.log" | sed 's/.*vhost /  /' | tail -4

echo "== restart from save_config"
stop_tgt
start_tgt -c "$DIR/config.json"
out=$($R vhost_get_controllers)
expect '"ctrlr": "vhost.0"' "$out"
expect '"bdev": "Malloc1"' "$out"
cat > "$DIR/again.sh" <<'GUEST'
#!/bin/sh
set -eu
dd if=/dev/urandom of=/tmp/p bs=64k count=4 2>/dev/null
dd if=/tmp/p of=/dev/vda bs=64k oflag=direct 2>/dev/null
dd if=/dev/vda of=/tmp/q bs=64k count=4 iflag=direct 2>/dev/null
cmp /tmp/p /tmp/q
echo "restarted target: pattern written and read back"
GUEST
chmod +x "$DIR/again.sh"
"$RUN_IN_VM" --quiet --timeout 120 --vhost-user-blk "$DIR/vhost.0" -- "$DIR/again.sh" \
    || fail "guest after restart"
$R vhost_delete_controller vhost.1
out=$($R vhost_delete_controller vhost.1 2>&1) && fail "deleted twice"
expect "No such device" "$out"
[ -e "$DIR/vhost.1" ] && fail "socket left after delete"

echo "== pmio-tgt killed and restarted under the guest's I/O"
truncate -s 64M "$DIR/disk.img"
$R bdev_uring_create "$DIR/disk.img" Uring0 4096 --buffered >/dev/null
$R vhost_create_blk_controller vhost.r Uring0
$R save_config > "$DIR/config2.json"
: > "$DIR/vm.log"
"$RUN_IN_VM" --quiet --timeout 240 --cpus 2 --vhost-user-blk "$DIR/vhost.r,queues=2" \
    --qemu-arg=-set --qemu-arg=chardev.vub0.reconnect=1 \
    --file "$BIN/pmio-perf" -- test/vm/vhost-restart-in-guest.sh > "$DIR/vm.log" 2>&1 &
VM=$!
for _ in $(seq 300); do grep -q "vhost.r: queue 1 started" "$DIR/tgt.log" && break; sleep 0.1; done
grep -q "vhost.r: queue 1 started" "$DIR/tgt.log" || { kill $VM; fail "the guest never started vhost.r"; }
sleep 4
kill -9 "$TGT"
wait "$TGT" 2>/dev/null || true
TGT=
echo "killed pmio-tgt under I/O; restarting it in 1 s"
sleep 1
start_tgt -c "$DIR/config2.json"
rc=0
wait $VM || rc=$?
cat "$DIR/vm.log"
[ $rc = 0 ] || fail "guest across the restart (exit $rc)"
grep "resubmitted" "$DIR/tgt.log" | sed 's/.*vhost /  /' || echo "  (nothing was in flight at the kill)"
stop_tgt
echo "vm-test-vhost passed"
