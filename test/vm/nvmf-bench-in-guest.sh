#!/bin/sh
# pmio-tgt against Linux's own NVMe/TCP target (nvmet-tcp), in the guest, side by side: each
# serves a null device over 127.0.0.1 and the same initiator load drives it (pmio-perf over
# io_uring on the connected namespace, 4 KiB random reads, QD 128, one core). Prints IOPS and
# the CPU time per I/O of the whole guest (both targets run beside the same initiator, so the
# difference is the target's). `make bench-nvmf`; the guest is software-emulated: compare ratios.
set -eu
[ -n "${BENCH_TRACE:-}" ] && set -x
cd /job
S=/tmp/pmio.sock
R="./pmio-rpc -s $S"
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-444444444444
SECS=${BENCH_SECS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
fail() { echo "FAIL: $*" >&2; exit 1; }
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
connect() { # connect NQN PORT -> nvmeN
    exec 3<>/dev/nvme-fabrics
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=$2,nqn=$1,hostnqn=$HOSTNQN,nr_io_queues=1,queue_size=128" >&3
    line=$(cat <&3); exec 3>&-
    echo "nvme${line#instance=}" | cut -d, -f1
}
dev_of() { for b in /sys/block/nvme*; do case ${b##*/} in *c*) continue;; esac
    [ "$(cat $b/device/subsysnqn)" = "$1" ] && echo /dev/${b##*/}; done; return 0; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
tgt_ticks() { awk '{print $14+$15}' /proc/$TGT/stat; }
run() { # run DEV LABEL
    t0=$(busy_ticks); p0=$(tgt_ticks)
    ./pmio-perf --dev uring:path=$1 -m '[1]' -w randread -b 4096 -d 128 -t $SECS --json > /tmp/r.json
    t1=$(busy_ticks); p1=$(tgt_ticks)
    iops=$(sed -n 's/.*"iops": *\([0-9.]*\).*/\1/p' /tmp/r.json | head -1)
    hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
    # pmio-tgt's own CPU (its process) per I/O during its runs; nvmet-tcp's work is kernel
    # threads and softirqs, seen only in the guest's total.
    own=""
    [ "$2" = pmio-tgt ] && own=$(awk -v p=$((p1 - p0)) -v hz=$hz -v i="$iops" -v s=$SECS \
        'BEGIN { printf "   pmio-tgt process CPU per I/O %6.2f us", p / hz * 1e6 / (i * s) }')
    awk -v l="$2" -v i="$iops" -v t=$((t1 - t0)) -v hz=$hz -v s=$SECS -v own="$own" \
        'BEGIN { printf "%-10s IOPS %10.0f   guest CPU per I/O %7.2f us%s\n", l, i, t / hz * 1e6 / (i * s), own }'
}

# pmio-tgt on core 0 (one reactor), null bdev.
RUST_LOG=warn ./pmio-tgt -r $S -m 0x1 2>/tmp/tgt.log &
TGT=$!
for _ in $(seq 100); do [ -S $S ] && break; sleep 0.1; done
$R bdev_null_create Null0 1024 512 >/dev/null
$R nvmf_create_transport -t TCP >/dev/null
$R nvmf_create_subsystem nqn.2016-06.io.pmio:bench -a >/dev/null
$R nvmf_subsystem_add_ns nqn.2016-06.io.pmio:bench Null0 >/dev/null
$R nvmf_subsystem_add_listener nqn.2016-06.io.pmio:bench -t tcp -a 127.0.0.1 -s 4420 >/dev/null
C1=$(connect nqn.2016-06.io.pmio:bench 4420)

# nvmet-tcp on null_blk.
NQN2=nqn.2016-06.io.linux:bench
mount -t configfs none /sys/kernel/config 2>/dev/null || true
C=/sys/kernel/config/nvmet
mkdir $C/subsystems/$NQN2
echo 1 > $C/subsystems/$NQN2/attr_allow_any_host
mkdir $C/subsystems/$NQN2/namespaces/1
echo -n /dev/nullb0 > $C/subsystems/$NQN2/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN2/namespaces/1/enable
mkdir $C/ports/1
echo tcp > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo 127.0.0.1 > $C/ports/1/addr_traddr; echo 4421 > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN2 $C/ports/1/subsystems/$NQN2
C2=$(connect $NQN2 4421)
sleep 1
D1=$(dev_of nqn.2016-06.io.pmio:bench); D2=$(dev_of $NQN2)
[ -b "$D1" ] && [ -b "$D2" ] || fail "devices: '$D1' '$D2'"
echo "pmio-tgt: $D1 ($C1)   nvmet-tcp: $D2 ($C2)   ${SECS}s x $ROUNDS rounds, alternating"
for i in $(seq $ROUNDS); do
    run $D1 pmio-tgt
    run $D2 nvmet-tcp
done
echo "pmio-tgt CPU: $(awk '{print ($14+$15)}' /proc/$TGT/stat) ticks in all"
echo 1 > /sys/class/nvme/$C1/delete_controller
echo 1 > /sys/class/nvme/$C2/delete_controller
kill $TGT
