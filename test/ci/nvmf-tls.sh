#!/usr/bin/env bash
# `make nvmf-tls` (issue 31): pmio's NVMe/TCP host against pmio's target over TLS 1.3 with
# pre-shared keys on 127.0.0.1, configured through pmio-rpc. Checks, each a failure of the
# script when it does not hold:
#  1. a secure-channel listener and two hosts with PSKs (an NVMeTLSkey-1:01: SHA-256 key, a 02:
#     SHA-384 one): pmio-perf --verify (random read/write, 4 KiB and 128 KiB) for each host;
#  2. while a good host runs pmio-perf --verify, a wrong key, another host's key, no key and a
#     host without a PSK are refused (pmio-perf fails, saying TLS) and the good run finishes
#     without error; the target logged the refusals without any key text;
#  3. nvmf_get_subsystems lists the PSKs by name; save_config writes secure_channel true and
#     the names, never a key; pmio-tgt restarted from it serves TLS again;
#  4. pmio-tgt as the host: bdev_nvme_attach_controller --psk (a keyring name) attaches over
#     TLS, perform_tests runs on it, its save_config keeps --psk; a wrong --psk fails the attach.
# About half a minute after the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh

DIR=$(mktemp -d /tmp/pmio-nvmf-tls.XXXXXX)
NQN=nqn.2016-06.io.pmio:tls1
H1=nqn.2014-08.org.nvmexpress:uuid:31313131-0000-4000-8000-000000000001
H2=nqn.2014-08.org.nvmexpress:uuid:31313131-0000-4000-8000-000000000002
H3=nqn.2014-08.org.nvmexpress:uuid:31313131-0000-4000-8000-000000000003
. test/ci/script-lib.sh
PORT=$(free_port)
DEV="nvmf:traddr=127.0.0.1,trsvcid=$PORT,subnqn=$NQN"

# The keys, in the interchange format (base64 of the PSK and its CRC-32), in owner-only files.
mkdir -m 700 "$DIR/keys"
K1='NVMeTLSkey-1:01:cG1pby10bHMtbG9vcGJhY2sta2V5LTAxMjM0NTY3ODklaiGz:'
K2='NVMeTLSkey-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:'
KW='NVMeTLSkey-1:01:cG1pby10bHMtbG9vcGJhY2sta2V5LTAxMjM0NTY3OFjrO5SJ:'
for k in K1 K2 KW; do echo "${!k}" >"$DIR/keys/$k"; chmod 600 "$DIR/keys/$k"; done

echo "== 1. a secure channel on 127.0.0.1:$PORT, hosts with SHA-256 and SHA-384 PSKs"
start_tgt tgt 0x1
rpc tgt keyring_file_add_key key1 "$DIR/keys/K1"
rpc tgt keyring_file_add_key key2 "$DIR/keys/K2"
rpc tgt bdev_malloc_create -b Malloc0 64 512 >/dev/null
rpc tgt nvmf_create_transport -t TCP >/dev/null
rpc tgt nvmf_create_subsystem $NQN -s PMIO0031 >/dev/null
rpc tgt nvmf_subsystem_add_ns $NQN Malloc0 >/dev/null
rpc tgt nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s "$PORT" --secure-channel
rpc tgt nvmf_subsystem_add_host $NQN $H1 --psk key1
rpc tgt nvmf_subsystem_add_host $NQN $H2 --psk key2
rpc tgt nvmf_subsystem_add_host $NQN $H3
for h in "$H1 K1" "$H2 K2"; do
    set -- $h
    for bs in 4096 131072; do
        perf verify -w randrw -M 50 -b $bs -d 32 -t 2 --verify \
            --dev "$DEV,hostnqn=$1,psk=$DIR/keys/$2" ||
            fail "pmio-perf --verify -b $bs with $2: $(tail -3 "$DIR/verify.log")"
        echo "  ${1##*-} $2 -b $bs: $(grep -m1 '^Total' "$DIR/verify.log" || tail -1 "$DIR/verify.log")"
    done
done
grep -q "handshake\|TLS" "$DIR/tgt.log" || fail "the target logged no TLS connection"

echo "== 2. bad keys refused while a good host runs"
perf good -w randrw -M 50 -b 4096 -d 32 -t 6 --verify --dev "$DEV,hostnqn=$H1,psk=$DIR/keys/K1" &
GOOD=$!
PIDS+=("$GOOD")
sleep 1
for bad in "$H1,psk=$DIR/keys/KW wrong key" "$H1,psk=$DIR/keys/K2 another host's key" \
    "$H1 no key" "$H3,psk=$DIR/keys/K1 a host without a PSK"; do
    dev=${bad%% *}
    rc=0
    perf bad -w randread -b 4096 -d 32 -t 1 --dev "$DEV,hostnqn=$dev" || rc=$?
    [ $rc != 0 ] || fail "${bad#* } was let in"
    why=$(sed 's/ (usage: .*//; s/.*127\.0\.0\.1:[0-9]*: //' "$DIR/bad.log")
    expect "TLS handshake\|closed by the target" "$why"
    echo "  refused: ${bad#* }: $why"
done
rc=0
wait "$GOOD" || rc=$?
[ $rc = 0 ] || fail "the good host's run failed beside the refusals: $(tail -5 "$DIR/good.log")"
grep -q "verify mismatch on" "$DIR/good.log" && fail "verify mismatches"
echo "  the good host: $(grep -m1 '^Total' "$DIR/good.log" || tail -1 "$DIR/good.log")"
for k in K1 K2 KW; do
    key=${!k}
    grep -qF "${key:16:24}" "$DIR/tgt.log" && fail "the target logged key $k"
done
expect "identity NVMe0R01 $H3" "$(cat "$DIR/tgt.log")"

echo "== 3. listed by name, saved without keys, restored by -c"
out=$(rpc tgt nvmf_get_subsystems)
expect '"psk": "key1"' "$out"
expect '"psk": "key2"' "$out"
rpc tgt save_config >"$DIR/tgt.json"
cfg=$(cat "$DIR/tgt.json")
expect '"secure_channel": true' "$cfg"
expect '"psk": "key2"' "$cfg"
printf '%s' "$cfg" | grep -q NVMeTLSkey && fail "save_config wrote a key"
kill "$tgt_PID"
wait "$tgt_PID" || fail "pmio-tgt exited with $? on SIGTERM"
start_tgt tgt 0x1 -c "$DIR/tgt.json"
# Until the restored listener is in the kernel's table of listening sockets.
hex=$(printf ':%04X ' "$PORT")
for _ in $(seq 100); do
    grep -q " 0A " <(grep -h "$hex" /proc/net/tcp 2>/dev/null) && break
    sleep 0.1
done
perf verify -w randrw -M 50 -b 4096 -d 32 -t 1 --verify --dev "$DEV,hostnqn=$H2,psk=$DIR/keys/K2" ||
    fail "pmio-perf over TLS after the restart: $(tail -3 "$DIR/verify.log")"
rc=0
perf bad -w randread -b 4096 -d 32 -t 1 --dev "$DEV,hostnqn=$H2,psk=$DIR/keys/KW" || rc=$?
[ $rc != 0 ] || fail "a wrong key was let in after the restart"
echo "  restored: $(grep -m1 '^Total' "$DIR/verify.log" || tail -1 "$DIR/verify.log")"

echo "== 4. pmio-tgt as the host: bdev_nvme_attach_controller --psk"
start_tgt host 0x2
rpc host keyring_file_add_key hk "$DIR/keys/K1"
rpc host keyring_file_add_key wrong "$DIR/keys/KW"
rc=0
rpc host bdev_nvme_attach_controller -b Bad -t tcp -a 127.0.0.1 -f ipv4 -s "$PORT" -n $NQN \
    -q $H1 --psk wrong >"$DIR/attach.log" 2>&1 || rc=$?
[ $rc != 0 ] || fail "attach with a wrong --psk succeeded"
expect "TLS" "$(cat "$DIR/attach.log")"
names=$(rpc host bdev_nvme_attach_controller -b Nvme0 -t tcp -a 127.0.0.1 -f ipv4 -s "$PORT" \
    -n $NQN -q $H1 --psk hk)
[ "$names" = Nvme0n1 ] || fail "attach answered '$names'"
out=$(rpc host perform_tests -b Nvme0n1 -w randrw -q 16 -o 4096 -t 1)
expect '"status": "finished"' "$out"
out=$(rpc host save_config)
expect '"psk": "hk"' "$out"
rpc host bdev_nvme_detach_controller Nvme0
echo "nvmf-tls: all checks passed"
