#!/bin/sh
# The guest half of `make vm-test-vhost`'s restart phase: /dev/vda is a file on the host served
# by pmio-tgt, which the host kills (-9) and restarts while this runs pmio-perf --verify. QEMU
# reconnects (reconnect=1) and hands the new pmio-tgt the in-flight log: every request resumes,
# none is lost or done twice, and verify stays clean.
set -eu
cd /job
fail() { echo "FAIL: $*" >&2; dmesg | tail -20 >&2; exit 1; }
./pmio-perf --dev uring:path=/dev/vda -m '[0,1]' -w randrw -M 50 -b 4096 -d 32 -t 14 --verify \
    > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify across the restart"; }
grep -E "IOPS" /tmp/perf.out | tail -2
dd if=/dev/urandom of=/tmp/p bs=64k count=4 2>/dev/null
dd if=/tmp/p of=/dev/vda bs=64k oflag=direct 2>/dev/null || fail "dd write after the restart"
dd if=/dev/vda of=/tmp/q bs=64k count=4 iflag=direct 2>/dev/null || fail "dd read after the restart"
cmp /tmp/p /tmp/q || fail "pattern after the restart"
echo "verify clean across a pmio-tgt restart"
