#!/bin/sh
# Linux's NVMe/TCP host (Debian 13's 6.12 kernel, in-band authentication built in) against
# pmio-tgt with DH-HMAC-CHAP (`make vm-test-auth`): keys from owner-only files
# (keyring_file_add_key), a host added with --dhchap-key and --dhchap-ctrlr-key; the kernel
# connects through /dev/nvme-fabrics with dhchap_secret= (host only) and with
# dhchap_ctrl_secret= too (bidirectional), under three target policies (SPDK's default, which
# picks SHA-512 and ffdhe8192 from what Linux offers; SHA-256 with the null group; SHA-384 with
# ffdhe2048, set by nvmf_set_config in a -c configuration); dd and pmio-perf --verify on the
# namespace; a wrong secret and a wrong controller secret refused; pmio-tgt counts and logs the
# failures without the secret. Any failed check exits non-zero.
set -eu
cd /job
# Everything this script makes is under $T, removed when it ends (another script may follow in
# the same guest: test/vm/each-in-guest.sh).
T=/tmp/auth-in-guest
rm -rf $T && mkdir -p $T
S=$T/pmio.sock
R="./pmio-rpc -s $S"
NQN=nqn.2016-06.io.pmio:auth1
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-1111-2222-3333-444444444444
# nvme-cli's gen-dhchap-key shapes: a SHA-256-transformed 32-byte key, a 48-byte plain one.
HOST_KEY='DHHC-1:01:MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIenHzQ:'
CTRL_KEY='DHHC-1:00:YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWasFayR:'
WRONG_KEY='DHHC-1:01:MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDHX0whE:'
fail() { echo "FAIL: $*" >&2; tail -20 $T/tgt.log >&2; dmesg | tail -20 >&2; exit 1; }
wait_sock() { for _ in $(seq 300); do [ -S $S ] && return 0; sleep 0.1; done; fail "no socket"; }
# connect OPTS: prints the controller instance (nvmeN); fails when the kernel refuses. The
# emulated guest takes seconds for one ffdhe8192 exchange, which pmio-tgt computes on the
# reactor of the queue's connection: a keep-alive timeout of 30 s (not Linux's 5) keeps the
# admin queue's Keep Alive from timing out behind the I/O queues' exchanges.
connect() {
    exec 3<>/dev/nvme-fabrics
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN,hostnqn=$HOSTNQN,hostid=${HOSTNQN##*uuid:},nr_io_queues=2,queue_size=64,keep_alive_tmo=30,$1" >&3 || { exec 3>&-; return 1; }
    line=$(cat <&3)
    exec 3>&-
    echo "nvme${line#instance=}" | cut -d, -f1
}
disconnect() { echo 1 > /sys/class/nvme/$1/delete_controller; }
TGT=
# On any exit: the controllers of $NQN disconnected (a failed check may leave one, which would
# go on reconnecting), pmio-tgt stopped, $T removed.
cleanup() {
    set +e
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat $c/subsysnqn 2>/dev/null)" = $NQN ] && echo 1 > $c/delete_controller 2>/dev/null
    done
    [ -n "$TGT" ] && kill $TGT 2>/dev/null && wait $TGT 2>/dev/null
    rm -rf $T
    return 0
}
trap cleanup EXIT
wait_dev() { # wait_dev CTRL: its namespace's block device
    for _ in $(seq 200); do
        for b in /sys/class/nvme/$1/nvme*n1 /sys/block/nvme*n1; do
            [ -e "$b" ] || continue
            [ "$(cat $b/device/subsysnqn 2>/dev/null)" = $NQN ] || continue
            [ -b /dev/${b##*/} ] && { echo /dev/${b##*/}; return 0; }
        done
        sleep 0.1
    done
    fail "no block device of $1"
}

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
mkdir -p $T/keys && chmod 700 $T/keys
printf '%s\n' "$HOST_KEY" > $T/keys/host && chmod 600 $T/keys/host
printf '%s\n' "$CTRL_KEY" > $T/keys/ctrl && chmod 600 $T/keys/ctrl

# start_tgt [CONFIG]: pmio-tgt serving a malloc bdev to $HOSTNQN, who must authenticate.
start_tgt() {
    rm -f $S
    RUST_LOG=info ./pmio-tgt -r $S -m 0x3 "$@" 2>$T/tgt.log &
    TGT=$!
    wait_sock
    $R keyring_file_add_key key0 $T/keys/host >/dev/null
    $R keyring_file_add_key ckey0 $T/keys/ctrl >/dev/null
    $R bdev_malloc_create -b Malloc0 32 512 >/dev/null
    $R nvmf_create_transport -t TCP >/dev/null
    $R nvmf_create_subsystem $NQN -s PMIOAUTH01 >/dev/null
    $R nvmf_subsystem_add_ns $NQN Malloc0 >/dev/null
    $R nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s 4420 >/dev/null
    $R nvmf_subsystem_add_host $NQN $HOSTNQN --dhchap-key key0 --dhchap-ctrlr-key ckey0 >/dev/null
}
stop_tgt() { kill $TGT; wait $TGT || true; TGT=; }

# io DEV: dd of a pattern read back, then pmio-perf --verify
io() {
    head -c 1048576 /dev/urandom > $T/pat
    dd if=$T/pat of=$1 bs=64k oflag=direct 2>/dev/null || fail "dd write"
    dd if=$1 of=$T/back bs=64k count=16 iflag=direct 2>/dev/null || fail "dd read"
    cmp $T/pat $T/back || fail "data read back differs"
    ./pmio-perf --dev uring:path=$1 -w randrw -M 50 -b 4096 -d 32 -t 2 --verify \
        > $T/perf.out 2>&1 || { cat $T/perf.out; fail "pmio-perf --verify"; }
    tail -1 $T/perf.out
}

# round LABEL WANT_HASH WANT_GROUP: host-only and bidirectional connects with I/O
round() {
    for bidi in no yes; do
        opts="dhchap_secret=$HOST_KEY"
        [ $bidi = yes ] && opts="$opts,dhchap_ctrl_secret=$CTRL_KEY"
        before=$(grep -c "queue [0-9]* authenticated ($2, $3)" $T/tgt.log || true)
        C=$(connect "$opts") || fail "$1: connect (bidirectional $bidi)"
        D=$(wait_dev $C)
        echo "$1: $C $D authenticated (bidirectional $bidi)"
        # The admin queue and both I/O queues, each with the policy's hash and group.
        after=$(grep -c "queue [0-9]* authenticated ($2, $3)" $T/tgt.log || true)
        [ $((after - before)) -ge 3 ] || fail "$1: $((after - before)) queues authenticated with $2 $3"
        io $D
        disconnect $C
        sleep 0.5
    done
}

echo "== SPDK's default policy: Linux offers everything, the strongest is chosen"
start_tgt
round default sha512 ffdhe8192

echo "== a wrong secret, a wrong controller secret"
if connect "dhchap_secret=$WRONG_KEY" >/dev/null 2>&1; then fail "a wrong secret connected"; fi
grep -q "authentication failed: the host's response does not match" $T/tgt.log \
    || fail "the target did not log the refusal"
if connect "dhchap_secret=$HOST_KEY,dhchap_ctrl_secret=$WRONG_KEY" >/dev/null 2>&1; then
    fail "a controller the host cannot verify was accepted"
fi
grep -q "failures since start" $T/tgt.log || fail "failures not counted"
if grep -q "MTIzNDU2Nzg5MDEy\|YWJjZGVmZ2hp" $T/tgt.log; then fail "a secret in the log"; fi
# Without a secret at all, the kernel cannot answer the target's demand.
if connect "" >/dev/null 2>&1; then fail "connected without a secret"; fi
stop_tgt

for policy in "sha256 null" "sha384 ffdhe2048"; do
    set -- $policy
    echo "== nvmf_set_config: $1 with $2"
    cat > $T/cfg.json <<CFG
{"subsystems": [{"subsystem": "nvmf", "config": [{"method": "nvmf_set_config",
  "params": {"dhchap_digests": ["$1"], "dhchap_dhgroups": ["$2"]}}]}]}
CFG
    start_tgt -c $T/cfg.json
    round "$1/$2" $1 $2
    stop_tgt
done
echo "auth-in-guest: all checks passed"
