#!/bin/bash
# Connection set-up time with and without DH-HMAC-CHAP (issue 31, BENCHMARKS.md): a pmio-tgt
# host daemon attaches (bdev_nvme_attach_controller: TCP connect, ICReq, admin Connect, the
# authentication, controller bring-up and Identify) and detaches a null-bdev subsystem of a
# pmio-tgt target daemon on 127.0.0.1, N times (default 20) per policy, timed around pmio-rpc.
# Needs the release build (B= its directory, default target/release). Not part of make test.
set -eu
B=${B:-$(cd "$(dirname "$0")/../.." && pwd)/target/release}
D=$(mktemp -d)
NQN=nqn.2016-06.io.spdk:bench
HOST=nqn.2014-08.org.nvmexpress:uuid:3c0f6a52-8d1e-4f7a-b2c9-5e8d1a7f3b64
echo 'DHHC-1:01:MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIenHzQ:' > $D/k; chmod 600 $D/k
N=${N:-20}
run() { # label policy-json auth(yes/no)
    echo "{\"subsystems\": [{\"subsystem\": \"nvmf\", \"config\": [{\"method\": \"nvmf_set_config\", \"params\": $2}]}]}" > $D/cfg.json
    $B/pmio-tgt -r $D/t.sock -m 0x1 -c $D/cfg.json 2>$D/t.log & T=$!
    $B/pmio-tgt -r $D/h.sock -m 0x2 2>$D/h.log & H=$!
    for _ in $(seq 100); do [ -S $D/t.sock ] && [ -S $D/h.sock ] && break; sleep 0.05; done
    rt="$B/pmio-rpc -s $D/t.sock"; rh="$B/pmio-rpc -s $D/h.sock"
    $rt keyring_file_add_key k0 $D/k >/dev/null; $rh keyring_file_add_key k0 $D/k >/dev/null
    $rt bdev_null_create N0 64 512 >/dev/null
    $rt nvmf_create_transport -t TCP >/dev/null
    $rt nvmf_create_subsystem $NQN >/dev/null
    $rt nvmf_subsystem_add_ns $NQN N0 >/dev/null
    $rt nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s 4499 >/dev/null
    keyopt=(); [ $3 = yes ] && keyopt=(--dhchap-key k0)
    $rt nvmf_subsystem_add_host $NQN $HOST "${keyopt[@]}" >/dev/null
    total=0; best=999999999
    for i in $(seq $N); do
        s=$(date +%s%N)
        $rh bdev_nvme_attach_controller -b Nv0 -t tcp -a 127.0.0.1 -s 4499 -f ipv4 -n $NQN -q $HOST "${keyopt[@]}" >/dev/null
        e=$(date +%s%N)
        $rh bdev_nvme_detach_controller Nv0 >/dev/null
        us=$(( (e - s) / 1000 )); total=$((total + us)); [ $us -lt $best ] && best=$us
    done
    echo "$1: attach mean $((total / N)) us, best $best us (N=$N)"
    kill $T $H; wait $T $H 2>/dev/null || true
    rm -f $D/t.sock $D/h.sock
}
ALL='{"dhchap_digests": ["sha256","sha384","sha512"], "dhchap_dhgroups": ["null","ffdhe2048","ffdhe3072","ffdhe4096","ffdhe6144","ffdhe8192"]}'
run "no authentication" "$ALL" no
run "DH-HMAC-CHAP sha256 null" '{"dhchap_digests": ["sha256"], "dhchap_dhgroups": ["null"]}' yes
run "DH-HMAC-CHAP sha256 ffdhe2048" '{"dhchap_digests": ["sha256"], "dhchap_dhgroups": ["ffdhe2048"]}' yes
run "DH-HMAC-CHAP sha512 ffdhe8192" "$ALL" yes
rm -rf $D
