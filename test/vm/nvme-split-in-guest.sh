#!/bin/sh
# make vm-test, the split run: QEMU's NVMe controller with MDTS 4 (64 KiB per command,
# run-in-vm --nvme-opts mdts=4) and pmio-perf at 1 MiB, so the block layer splits every I/O
# into 16 commands (issue 15). The namespace is 64 MiB: --verify first writes every block of
# each reactor's half (64 MiB), then 5 s of random 1 MiB reads and writes at QD8 on 2
# reactors, checking every block read; then random reads at QD2 (a queue shallower than one
# I/O's children: the rest are issued as tags free up).
set -eu
cd /job
echo "nvme-split-in-guest: controller $RUN_IN_VM_NVME_BDF"
DEV="nvme:traddr=$RUN_IN_VM_NVME_BDF"
RUST_LOG=info ./pmio-perf --dev "$DEV" -m 0x3 -w randrw -M 50 -b 1M -d 8 -s 4 -c 4 -t 5 \
    --verify 2>/tmp/perf.err || { cat /tmp/perf.err >&2; exit 1; }
cat /tmp/perf.err >&2
grep -q 'MDTS 4$' /tmp/perf.err || { echo "FAIL: the controller does not report MDTS 4" >&2; exit 1; }
./pmio-perf --dev "$DEV" -m 0x1 -w randread -b 1M -d 2 -s 1 -c 1 -t 3 --verify
echo "nvme-split-in-guest: PASS"
