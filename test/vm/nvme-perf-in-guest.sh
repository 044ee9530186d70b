#!/bin/sh
# make vm-test, second part: pmio-perf on the VFIO NVMe driver in the run-in-vm guest.
# The namespace is 64 MiB (--disk-size 64M): --verify first writes every block of each
# reactor's half with a self-describing pattern (64 MiB in all), then 5 s of random 4 KiB reads
# at QD32 on 2 reactors, one queue pair each, checking every block read.
set -eu
cd /job
echo "nvme-perf-in-guest: controller $RUN_IN_VM_NVME_BDF"
./pmio-perf --dev "nvme:traddr=$RUN_IN_VM_NVME_BDF" -m 0x3 -w randread -b 4096 -d 32 -t 5 --verify
echo "nvme-perf-in-guest: PASS"
