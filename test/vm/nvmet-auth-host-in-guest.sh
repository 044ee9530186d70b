#!/bin/sh
# pmio's NVMe/TCP host against Linux's nvmet-tcp with in-band authentication (`make
# vm-test-nvmet-auth`, issue 31): Debian 13's 6.12 kernel target, a host entry in configfs with
# dhchap_key (and dhchap_ctrl_key), its hash and DH group chosen per round; pmio-perf --verify
# with dhchap_key= (and dhchap_ctrlr_key=) key files; a wrong key and a wrong controller key
# refused. The guest is emulated (TCG): runs are short. Any failed check exits non-zero.
set -eu
cd /job
# Everything this script makes is under $T and in nvmet's configfs, both undone when it ends
# (another script may follow in the same guest: test/vm/each-in-guest.sh).
T=/tmp/nvmet-auth
rm -rf $T && mkdir -p $T
NQN=nqn.2016-06.io.linux:nvmet-auth
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:7b7b7b7b-1111-2222-3333-444444444444
PORT=4422
HOST_KEY='DHHC-1:01:MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIenHzQ:'
CTRL_KEY='DHHC-1:00:YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWasFayR:'
WRONG_KEY='DHHC-1:01:MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDHX0whE:'
fail() { echo "FAIL: $*" >&2; dmesg | tail -20 >&2; exit 1; }
C=/sys/kernel/config/nvmet
# On any exit: the port, subsystem and host taken out of configfs in the reverse order of
# their making (each step only if it was made), $T removed.
cleanup() {
    set +e
    rm -f $C/ports/1/subsystems/$NQN 2>/dev/null
    rmdir $C/ports/1 2>/dev/null
    echo 0 > $C/subsystems/$NQN/namespaces/1/enable 2>/dev/null
    rmdir $C/subsystems/$NQN/namespaces/1 2>/dev/null
    rm -f $C/subsystems/$NQN/allowed_hosts/$HOSTNQN 2>/dev/null
    rmdir $C/subsystems/$NQN 2>/dev/null
    rmdir $C/hosts/$HOSTNQN 2>/dev/null
    rm -rf $T
    return 0
}
trap cleanup EXIT
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
mkdir -p $T/keys && chmod 700 $T/keys
for k in host:$HOST_KEY ctrl:$CTRL_KEY wrong:$WRONG_KEY; do
    printf '%s\n' "${k#*:}" > $T/keys/${k%%:*}
    chmod 600 $T/keys/${k%%:*}
done

echo "== nvmet-tcp: $NQN on 127.0.0.1:$PORT, only $HOSTNQN, with DH-HMAC-CHAP keys"
truncate -s 16M $T/back.img
mount -t configfs none /sys/kernel/config 2>/dev/null || true
[ -d $C ] || fail "no nvmet configfs"
[ -e $C/ports/1 ] && fail "nvmet port 1 exists already (left by another script?)"
mkdir $C/hosts/$HOSTNQN
H=$C/hosts/$HOSTNQN
echo -n "$HOST_KEY" > $H/dhchap_key
mkdir $C/subsystems/$NQN
echo 0 > $C/subsystems/$NQN/attr_allow_any_host
ln -s $H $C/subsystems/$NQN/allowed_hosts/$HOSTNQN
mkdir $C/subsystems/$NQN/namespaces/1
echo -n $T/back.img > $C/subsystems/$NQN/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN/namespaces/1/buffered_io
echo 1 > $C/subsystems/$NQN/namespaces/1/enable
mkdir $C/ports/1
echo tcp > $C/ports/1/addr_trtype
echo ipv4 > $C/ports/1/addr_adrfam
echo 127.0.0.1 > $C/ports/1/addr_traddr
echo $PORT > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
DEV="nvmf:traddr=127.0.0.1,trsvcid=$PORT,subnqn=$NQN,hostnqn=$HOSTNQN,dhchap_key=$T/keys/host"

# perf LABEL EXTRA: pmio-perf --verify through the authenticated connection
perf() {
    ./pmio-perf -m '[1]' --dev "$DEV$2" -w randrw -M 50 -b 4096 -d 32 -t 2 --verify \
        > $T/perf.out 2>&1 || { cat $T/perf.out; fail "$1: pmio-perf --verify"; }
    echo "$1: $(grep -m1 '^Total' $T/perf.out || tail -1 $T/perf.out)"
}

for round in "hmac(sha256) null" "hmac(sha384) ffdhe2048" "hmac(sha512) ffdhe3072"; do
    set -- $round
    echo "$1" > $H/dhchap_hash
    echo "$2" > $H/dhchap_dhgroup
    echo -n "" > $H/dhchap_ctrl_key 2>/dev/null || true
    perf "$1 $2 host only" ""
    dmesg | grep -q "authenticated" || true
    echo -n "$CTRL_KEY" > $H/dhchap_ctrl_key
    perf "$1 $2 bidirectional" ",dhchap_ctrlr_key=$T/keys/ctrl"
done

echo "== a wrong key, a wrong controller key"
if ./pmio-perf -m '[1]' --dev "nvmf:traddr=127.0.0.1,trsvcid=$PORT,subnqn=$NQN,hostnqn=$HOSTNQN,dhchap_key=$T/keys/wrong" \
    -w randread -b 4096 -d 32 -t 1 > $T/perf.out 2>&1; then
    fail "a wrong key connected"
fi
grep -q "AUTH_Failure1" $T/perf.out || { cat $T/perf.out; fail "the refusal is not AUTH_Failure1"; }
tail -1 $T/perf.out
if ./pmio-perf -m '[1]' --dev "$DEV,dhchap_ctrlr_key=$T/keys/wrong" -w randread -b 4096 -d 32 \
    -t 1 > $T/perf.out 2>&1; then
    fail "a controller with another key was accepted"
fi
grep -q "controller's response does not match" $T/perf.out || { cat $T/perf.out; fail "no mismatch"; }
tail -1 $T/perf.out
echo "nvmet-auth-host-in-guest: all checks passed"
