#!/bin/sh
# pmio's NVMe/TCP host against a server no one here wrote (`make vm-test-nvmet`, issue 18):
# Linux's nvmet-tcp in the guest, set up through configfs on a tmpfs file, and pmio-perf as the
# host in the same guest over 127.0.0.1. pmio-perf --verify at 4 KiB and 128 KiB, with and
# without digests; then the subsystem unlinked from its port and linked again while a
# pmio-perf --verify with reconnect options runs: the kernel target drops the connections, the
# host reconnects once the subsystem is back, and the run ends clean. The guest is emulated
# (TCG): runs are short. Any failed check exits non-zero.
set -eu
cd /job
NQN=nqn.2016-06.io.linux:nvmet-peer
PORT=4421
fail() { echo "FAIL: $*" >&2; dmesg | tail -20 >&2; exit 1; }
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

echo "== nvmet-tcp: $NQN on 127.0.0.1:$PORT, a 16 MiB tmpfs file"
truncate -s 16M /tmp/back.img
mount -t configfs none /sys/kernel/config 2>/dev/null || true
C=/sys/kernel/config/nvmet
[ -d $C ] || fail "no nvmet configfs"
mkdir $C/subsystems/$NQN
echo 1 > $C/subsystems/$NQN/attr_allow_any_host
mkdir $C/subsystems/$NQN/namespaces/1
echo -n /tmp/back.img > $C/subsystems/$NQN/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN/namespaces/1/buffered_io
echo 1 > $C/subsystems/$NQN/namespaces/1/enable
mkdir $C/ports/1
echo tcp > $C/ports/1/addr_trtype
echo ipv4 > $C/ports/1/addr_adrfam
echo 127.0.0.1 > $C/ports/1/addr_traddr
echo $PORT > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
DEV="nvmf:traddr=127.0.0.1,trsvcid=$PORT,subnqn=$NQN"
# Controllers the kernel target has created so far (one per host association).
created() { dmesg | grep -c "creating nvm controller" || true; }

echo "== pmio-perf --verify as the host"
for dig in "" ",hdgst=1,ddgst=1"; do
    for bs in 4096 131072; do
        ./pmio-perf -m '[1]' --dev "$DEV$dig" -w randrw -M 50 -b $bs -d 32 -t 2 --verify \
            > /tmp/perf.out 2>&1 || { cat /tmp/perf.out; fail "pmio-perf --verify -b $bs$dig"; }
        echo "-b $bs ${dig#,}: $(grep -m1 '^Total' /tmp/perf.out || tail -1 /tmp/perf.out)"
    done
done

echo "== the subsystem unlinked from its port and linked again under pmio-perf --verify"
before=$(created)
./pmio-perf -m '[1]' --dev "$DEV,ctrlr_loss_timeout_sec=60,reconnect_delay_sec=1" \
    -w randrw -M 50 -b 4096 -d 32 -t 12 --verify > /tmp/perf.out 2>&1 &
PERF=$!
for _ in $(seq 100); do [ "$(created)" -gt "$before" ] && break; sleep 0.1; done
[ "$(created)" -gt "$before" ] || { cat /tmp/perf.out; fail "pmio-perf did not connect"; }
sleep 2
rm $C/ports/1/subsystems/$NQN
echo "unlinked; $(dmesg | tail -1)"
sleep 3
mid=$(created)
ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
for _ in $(seq 200); do [ "$(created)" -gt "$mid" ] && break; sleep 0.1; done
[ "$(created)" -gt "$mid" ] || fail "the host did not reconnect after the relink"
echo "relinked; the host reconnected"
rc=0
wait $PERF || rc=$?
cat /tmp/perf.out | tail -4
[ $rc = 0 ] || fail "pmio-perf --verify across the disconnect exited $rc"
grep -q "verify mismatch on" /tmp/perf.out && fail "verify mismatches across the disconnect"
echo "nvmet-host-in-guest: all checks passed"
