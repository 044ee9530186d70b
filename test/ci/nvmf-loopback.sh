#!/usr/bin/env bash
# `make nvmf-loopback` (issue 18): pmio's NVMe/TCP host against pmio's NVMe/TCP target on
# 127.0.0.1, no VM. The target (pmio-tgt on core 0) serves a file through a uring bdev, so its
# data outlives a killed target. Checks, each a failure of the script when it does not hold:
#  1. pmio-perf --dev nvmf:… --verify (random read/write) at 4 KiB and 128 KiB, digests off and
#     on (pmio-perf on core 1);
#  2. the target killed -9 under a pmio-perf --verify run with reconnect options and restarted
#     from its save_config: the host reconnects, the run finishes with no error and no
#     mismatch (held I/O is resubmitted, data written before the kill reads back);
#  3. the target killed for good: pmio-perf's I/O fails once the reconnect gives up, pmio-perf
#     exits non-zero with a message saying so, well before its run time would have ended;
#  4. pmio-tgt as the host: a second pmio-tgt attaches the subsystem through pmio-rpc
#     (bdev_nvme_set_options' reconnect defaults, bdev_nvme_attach_controller -t tcp),
#     bdev_get_bdevs shows Nvme0n1, bdev_nvme_get_controllers the path, perform_tests runs on
#     it, the target killed and restarted under it (resetting, then enabled and serving I/O),
#     save_config restores it in a restarted host, bdev_nvme_detach_controller removes it;
#     attached again with a 2 s loss timeout and the target killed for good, it shows failed.
# About a minute after the build. Two cores are enough: each target and pmio-perf get one.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh

DIR=$(mktemp -d /tmp/pmio-nvmf-loop.XXXXXX)
NQN=nqn.2016-06.io.pmio:loop1
. test/ci/script-lib.sh
PORT=$(free_port)

DEV="nvmf:traddr=127.0.0.1,trsvcid=$PORT,subnqn=$NQN"
# wait_state STATE: until the host's controller Nvme0 is in STATE (10 s); the last in $state.
wait_state() {
    for _ in $(seq 100); do
        state=$(rpc host bdev_nvme_get_controllers -n Nvme0 | sed -n 's/.*"state": "\(.*\)".*/\1/p')
        [ "$state" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

echo "== pmio-tgt (core 0) serving $NQN on 127.0.0.1:$PORT"
truncate -s 64M "$DIR/disk.img"
start_tgt tgt 0x1
rpc tgt bdev_uring_create "$DIR/disk.img" Uring0 512 --buffered >/dev/null
rpc tgt nvmf_create_transport -t TCP >/dev/null
rpc tgt nvmf_create_subsystem $NQN -a -s PMIO0018 >/dev/null
rpc tgt nvmf_subsystem_add_ns $NQN Uring0 >/dev/null
rpc tgt nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s "$PORT" >/dev/null
rpc tgt save_config >"$DIR/tgt.json"

echo "== 1. pmio-perf --verify over NVMe/TCP (core 1)"
for dig in "" ",hdgst=1,ddgst=1"; do
    for bs in 4096 131072; do
        perf verify -w randrw -M 50 -b $bs -d 32 -t 2 --verify --dev "$DEV$dig" ||
            fail "pmio-perf --verify -b $bs ${dig:-no digests}: $(tail -3 "$DIR/verify.log")"
        echo "  -b $bs ${dig#,}: $(grep -m1 '^Total' "$DIR/verify.log" || tail -1 "$DIR/verify.log")"
    done
done
out=$(rpc tgt nvmf_subsystem_get_controllers $NQN)
[ "$(printf '%s' "$out" | tr -d ' \n')" = "[]" ] || fail "controllers left after pmio-perf: $out"

echo "== 2. target killed -9 under pmio-perf --verify, restarted from save_config"
perf reconnect -w randrw -M 50 -b 4096 -d 32 -t 8 --verify \
    --dev "$DEV,ctrlr_loss_timeout_sec=30,reconnect_delay_sec=1" &
PERF=$!
PIDS+=("$PERF")
sleep 3
[ -n "$(rpc tgt nvmf_subsystem_get_controllers $NQN | grep cntlid)" ] || fail "pmio-perf not connected"
kill -9 "$tgt_PID"
wait "$tgt_PID" 2>/dev/null || true
sleep 1
start_tgt tgt 0x1 -c "$DIR/tgt.json"
back=
for _ in $(seq 100); do
    case $(rpc tgt nvmf_subsystem_get_controllers $NQN) in *cntlid*) back=1; break ;; esac
    sleep 0.1
done
[ -n "$back" ] || fail "the host did not reconnect to the restarted target"
rc=0
wait "$PERF" || rc=$?
[ $rc = 0 ] || fail "pmio-perf --verify across the restart exited $rc: $(tail -5 "$DIR/reconnect.log")"
grep -q "verify mismatch on" "$DIR/reconnect.log" && fail "verify mismatches across the restart"
echo "  reconnected; $(grep -m1 '^Total' "$DIR/reconnect.log" || tail -1 "$DIR/reconnect.log")"

echo "== 3. target killed for good: I/O fails after the timeouts, no hang"
perf gone -w randread -b 4096 -d 32 -t 60 \
    --dev "$DEV,ctrlr_loss_timeout_sec=3,reconnect_delay_sec=1,fast_io_fail_timeout_sec=2" &
PERF=$!
PIDS+=("$PERF")
sleep 2
kill -9 "$tgt_PID"
wait "$tgt_PID" 2>/dev/null || true
t0=$SECONDS
for _ in $(seq 300); do kill -0 "$PERF" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PERF" 2>/dev/null && fail "pmio-perf still runs 30 s after its target died"
rc=0
wait "$PERF" || rc=$?
[ $rc != 0 ] || fail "pmio-perf succeeded with its target dead"
expect "every I/O failed for" "$(cat "$DIR/gone.log")"
echo "  pmio-perf exited $rc $((SECONDS - t0)) s after the kill: $(tail -1 "$DIR/gone.log")"

echo "== 4. pmio-tgt as the host (core 1) through pmio-rpc"
start_tgt tgt 0x1 -c "$DIR/tgt.json"
start_tgt host 0x2
rpc host bdev_nvme_set_options -l 20 -o 2 >/dev/null
names=$(rpc host bdev_nvme_attach_controller -b Nvme0 -t tcp -a 127.0.0.1 -f ipv4 -s "$PORT" \
    -n $NQN -q nqn.2014-08.org.nvmexpress:uuid:18181818-0000-4000-8000-000000000018)
[ "$names" = Nvme0n1 ] || fail "attach answered '$names'"
out=$(rpc host bdev_get_bdevs -b Nvme0n1)
expect '"num_blocks": 131072' "$out"
expect '"trtype": "TCP"' "$out"
out=$(rpc host bdev_nvme_get_controllers)
expect '"name": "Nvme0"' "$out"
expect "\"trsvcid\": \"$PORT\"" "$out"
expect "\"subnqn\": \"$NQN\"" "$out"
expect '"nqn": "nqn.2014-08.org.nvmexpress:uuid:18181818' "$out"
out=$(rpc tgt nvmf_subsystem_get_controllers $NQN)
expect "18181818-0000-4000-8000-000000000018" "$out"
out=$(rpc host perform_tests -b Nvme0n1 -w randrw -q 16 -o 4096 -t 2)
expect '"status": "finished"' "$out"
printf '%s' "$out" | grep -q '"iops": 0[,.]' && fail "perform_tests on Nvme0n1 did no I/O: $out"
# The target killed under the attached host: the controller shows resetting, then (target
# back from its config) enabled again, and serves I/O.
kill -9 "$tgt_PID"
wait "$tgt_PID" 2>/dev/null || true
wait_state resetting || fail "controller state '$state' with its target dead"
start_tgt tgt 0x1 -c "$DIR/tgt.json"
wait_state enabled || fail "controller state '$state' after the target came back"
out=$(rpc host perform_tests -b Nvme0n1 -w randread -q 16 -o 4096 -t 1)
expect '"status": "finished"' "$out"
rpc host save_config >"$DIR/host.json"
out=$(cat "$DIR/host.json")
expect '"method": "bdev_nvme_attach_controller"' "$out"
expect '"ctrlr_loss_timeout_sec": 20' "$out"
expect '"reconnect_delay_sec": 2' "$out"
kill "$host_PID"
wait "$host_PID" || fail "the host pmio-tgt exited with $? on SIGTERM"
start_tgt host 0x2 -c "$DIR/host.json"
rpc host bdev_get_bdevs -b Nvme0n1 >/dev/null || fail "Nvme0n1 not restored by -c"
rpc host bdev_nvme_detach_controller Nvme0
out=$(rpc host bdev_get_bdevs)
[ "$(printf '%s' "$out" | tr -d ' \n')" = "[]" ] || fail "bdevs left after detach: $out"
for _ in $(seq 50); do
    out=$(rpc tgt nvmf_subsystem_get_controllers $NQN)
    [ "$(printf '%s' "$out" | tr -d ' \n')" = "[]" ] && break
    sleep 0.1
done
[ "$(printf '%s' "$out" | tr -d ' \n')" = "[]" ] || fail "target still has the host's controller: $out"
# Attached again with a 2 s loss timeout, the target killed for good: the controller is
# resetting while it retries, then failed (SPDK's state once the reconnects gave up).
rpc host bdev_nvme_attach_controller -b Nvme0 -t tcp -a 127.0.0.1 -f ipv4 -s "$PORT" -n $NQN \
    -l 2 -o 1 >/dev/null
wait_state enabled || fail "controller state '$state' after attaching again"
kill -9 "$tgt_PID"
wait "$tgt_PID" 2>/dev/null || true
wait_state failed || fail "controller state '$state' 10 s after its target died for good"
rpc host bdev_nvme_detach_controller Nvme0
echo "nvmf-loopback: all checks passed"
