#!/bin/sh
# pmio-tgt end to end on an emulated NVMe controller behind VFIO, in the QEMU guest
# (`make vm-test-tgt`): attach (twice: idempotent), list, perform_tests with none and with
# mq-deadline around a controller reset, iostat, save_config, detach, spdk_kill_instance,
# restart with -c, SIGTERM.
# Any failed check exits non-zero.
set -eu
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { # expect PATTERN TEXT
    printf '%s\n' "$2" | grep -q -- "$1" || { printf '%s\n' "$2" >&2; fail "expected '$1'"; }
}
wait_sock() { for _ in $(seq 100); do [ -S $S ] && return 0; sleep 0.1; done; fail "no socket"; }

RUST_LOG=info ./pmio-tgt -r $S -m 0x3 &
TGT=$!
wait_sock
[ "$(stat -c %a $S)" = 600 ] || fail "socket mode $(stat -c %a $S)"

out=$($R bdev_nvme_attach_controller -b Nvme0 -t PCIe -a "$RUN_IN_VM_NVME_BDF")
[ "$out" = Nvme0n1 ] || fail "attach printed '$out'"
out=$($R bdev_nvme_attach_controller -b Nvme0 -t PCIe -a "$RUN_IN_VM_NVME_BDF")
[ "$out" = Nvme0n1 ] || fail "second attach printed '$out'"
out=$($R bdev_get_bdevs -b Nvme0n1)
expect '"product_name": "NVMe disk"' "$out"

out=$($R perform_tests -b Nvme0n1 -w randread -q 32 -o 4096 -t 3)
echo "$out"
expect '"status": "finished"' "$out"
expect '"io_failed": 0,' "$out"

# A controller reset through the daemon, then I/O again (next perform_tests).
$R bdev_nvme_reset_controller Nvme0 || fail "bdev_nvme_reset_controller"
out=$($R bdev_nvme_reset_controller Nvme9 2>&1 || true)
expect '"code": -19' "$out"

$R bdev_set_scheduler Nvme0n1 mq-deadline
out=$($R perform_tests -b Nvme0n1 -w randrw -q 32 -o 4096 -t 3)
echo "$out"
expect '"scheduler": "mq-deadline"' "$out"
expect '"io_failed": 0,' "$out"
out=$($R bdev_get_scheduler -b Nvme0n1)
echo "$out"
[ "$(printf '%s\n' "$out" | grep -c '"queued": 0')" = 3 ] || fail "requests left queued"
out=$($R bdev_get_iostat -b Nvme0n1)
expect '"num_write_ops": [1-9]' "$out"

$R save_config > /tmp/cfg.json
expect bdev_nvme_attach_controller "$(cat /tmp/cfg.json)"

$R bdev_nvme_detach_controller Nvme0
[ "$($R bdev_get_bdevs)" = "[]" ] || fail "bdevs left after detach"
out=$($R bdev_nvme_detach_controller Nvme0 || true)
expect '"code": -19' "$out"

$R spdk_kill_instance SIGTERM
wait $TGT || fail "pmio-tgt exited $? after spdk_kill_instance"
[ ! -e $S ] || fail "socket left behind"

RUST_LOG=info ./pmio-tgt -r $S -c /tmp/cfg.json &
TGT=$!
wait_sock
expect '"name": "Nvme0n1"' "$($R bdev_get_bdevs)"
expect '"scheduler": "mq-deadline"' "$($R bdev_get_scheduler -b Nvme0n1)"
kill -TERM $TGT
wait $TGT || fail "pmio-tgt exited $? after SIGTERM"
[ ! -e $S ] || fail "socket left behind"
echo "tgt-in-guest: all checks passed"
