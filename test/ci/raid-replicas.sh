#!/usr/bin/env bash
# `make raid-replicas` (issue 29): a replicated volume across three "machines" on the
# loopback. Two replica pmio-tgts each serve a file (uring bdev, fixed uuid) over NVMe/TCP; the
# head pmio-tgt attaches both, builds a raid1 with a superblock over them and serves it over
# NVMe/TCP to pmio-perf --verify. Checks, each a failure of the script when it does not hold:
#  1. replica B killed -9 under verified I/O: the run ends with no error and no mismatch, the
#     array is degraded (one operational member);
#  2. B restarted and added back: its superblock is behind, so examine refuses it, and
#     bdev_raid_add_base_bdev rebuilds it from the write-intent bitmap: only the regions
#     written while it was away are copied (the head's log says how many blocks: fewer than
#     the array has), under verified I/O; the two replica files are then identical behind the
#     superblock;
#  3. replica A killed -9: I/O goes on from the rebuilt copy alone, verify clean; a fresh
#     replica C (new file, new uuid) added gets a full rebuild, and B and C are identical;
#  4. the head killed -9 and restarted with A back too: the array assembles from B and C's
#     superblocks and refuses A, whose superblock is stale.
# About a minute after the build. Two cores: the replicas and the head share core 0,
# pmio-perf runs on core 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/ci/release-bins.sh

DIR=$(mktemp -d /tmp/pmio-raid-rep.XXXXXX)
HNQN=nqn.2016-06.io.pmio:mirror
. test/ci/script-lib.sh
kill9() { local pid_var="${1}_PID"; kill -9 "${!pid_var}"; wait "${!pid_var}" 2>/dev/null || true; }

declare -A PORT UUID
for r in a b c; do PORT[$r]=$(free_port); done
PORT[head]=$(free_port)
UUID[a]=5d0c1a2e-0000-4000-8000-0000000000aa
UUID[b]=5d0c1a2e-0000-4000-8000-0000000000bb
UUID[c]=5d0c1a2e-0000-4000-8000-0000000000cc

# replica NAME: pmio-tgt NAME serving $DIR/NAME.img (64 MiB) as nqn...:NAME.
replica() {
    local r=$1
    [ -f "$DIR/$r.img" ] || truncate -s 64M "$DIR/$r.img"
    start_tgt "$r" 0x1
    rpc "$r" bdev_uring_create "$DIR/$r.img" "U$r" 512 -u "${UUID[$r]}" >/dev/null
    rpc "$r" nvmf_create_transport -t TCP >/dev/null
    rpc "$r" nvmf_create_subsystem "nqn.2016-06.io.pmio:$r" -a -s "REP$r" >/dev/null
    rpc "$r" nvmf_subsystem_add_ns "nqn.2016-06.io.pmio:$r" "U$r" >/dev/null
    rpc "$r" nvmf_subsystem_add_listener "nqn.2016-06.io.pmio:$r" -t tcp -a 127.0.0.1 \
        -s "${PORT[$r]}" >/dev/null
}
# attach NAME: the head attaches replica NAME as controller R<NAME>, bdev R<NAME>n1; a lost
# replica fails its I/O after 2 s, so the array takes it out.
attach() {
    local r=$1
    rpc head bdev_nvme_attach_controller -b "R$r" -t tcp -a 127.0.0.1 -f ipv4 \
        -s "${PORT[$r]}" -n "nqn.2016-06.io.pmio:$r" -l 2 -o 1 >/dev/null
}
serve_head() {
    rpc head nvmf_create_transport -t TCP >/dev/null
    rpc head nvmf_create_subsystem $HNQN -a -s HEAD0001 >/dev/null
    rpc head nvmf_subsystem_add_ns $HNQN Mirror >/dev/null
    rpc head nvmf_subsystem_add_listener $HNQN -t tcp -a 127.0.0.1 -s "${PORT[head]}" >/dev/null
}
HDEV="nvmf:traddr=127.0.0.1,trsvcid=${PORT[head]},subnqn=$HNQN,ctrlr_loss_timeout_sec=30,reconnect_delay_sec=1"
# verify LOG SECS: pmio-perf --verify on core 1 against the head, background; pid in PERF.
verify() {
    "$BIN/pmio-perf" -m '[1]' --dev "$HDEV" -b 16k -w randrw -M 50 -d 16 -s 8 -c 8 -t "$2" --verify \
        --json >"$DIR/$1.json" 2>"$DIR/$1.log" &
    PERF=$!
}
# verify_ok LOG: the run exited 0, did I/O, with no error and no mismatch. The count is a
# liveness check only: a run that meets a kill stalls for the 2 s loss timeout, and every
# first write to a region after a member left waits for the write-intent bitmap.
verify_ok() {
    wait "$PERF" || fail "pmio-perf ($1) exited $?: $(tail -3 "$DIR/$1.log")"
    python3 - "$DIR/$1.json" "$1" <<'PY' || fail "pmio-perf ($1) was not clean"
import json, sys
j = json.load(open(sys.argv[1]))
ok = j["verify_mismatches"] == 0 and j["errors"] == 0 and j["ios"] > 20
print(f"   {sys.argv[2]}: {j['ios']} I/Os, {j['errors']} errors, {j['verify_mismatches']} mismatches")
sys.exit(0 if ok else 1)
PY
}
raid() { rpc head bdev_raid_get_bdevs all; }
wait_rebuilt() { # until no process runs on the array (60 s)
    for _ in $(seq 600); do
        out=$(raid)
        printf '%s' "$out" | grep -q '"process"' || return 0
        sleep 0.1
    done
    fail "rebuild did not finish: $out"
}
# same_data X Y: replica files X and Y equal behind the 1 MiB superblock area.
same_data() {
    cmp <(tail -c +1048577 "$DIR/$1.img") <(tail -c +1048577 "$DIR/$2.img") >/dev/null ||
        fail "replicas $1 and $2 differ behind the superblock"
}

echo "== replicas a and b, head with a raid1 over them"
replica a
replica b
start_tgt head 0x1
attach a
attach b
rpc head bdev_raid_create -n Mirror -r 1 -b "Ran1 Rbn1" -s >/dev/null
out=$(raid)
expect '"superblock": true' "$out"
expect '"num_base_bdevs_operational": 2' "$out"
serve_head
verify fill 2
verify_ok fill

echo "== 1. replica b killed -9 under verified I/O"
# Killed near the end of the run: the writes it misses are the few in flight then (held for
# the loss timeout, then completed from a), so the partial rebuild below has little to copy.
verify kill-b 4
sleep 3.5
kill9 b
verify_ok kill-b
out=$(raid)
expect '"num_base_bdevs_operational": 1' "$out"
expect '"state": "online"' "$out"

echo "== 2. b restarted and added back: a partial rebuild"
replica b
rpc head bdev_nvme_detach_controller Rb >/dev/null 2>&1 || true
attach b
grep -q "refused as stale" "$DIR/head.log" || fail "the head did not refuse b's old superblock"
# Paced at 8 MiB/s so the verified I/O started after it meets the copy (started before, its
# first fill of the volume would all be writes b missed).
rpc head bdev_raid_set_options -w 256 -b 8 >/dev/null
rpc head bdev_raid_add_base_bdev Mirror Rbn1 >/dev/null
verify during-partial 3
verify_ok during-partial
wait_rebuilt
out=$(raid)
expect '"num_base_bdevs_operational": 2' "$out"
line=$(grep -o "partial rebuild of [0-9]* blocks" "$DIR/head.log" | tail -1)
copied=${line//[^0-9]/}
total=$(rpc head bdev_get_bdevs -b Mirror | sed -n 's/.*"num_blocks": \([0-9]*\).*/\1/p')
[ -n "$copied" ] || fail "no partial rebuild in the head's log"
# How much b missed depends on how far the killed run's first fill of the volume had got; it
# is never the whole array.
[ "$copied" -lt "$total" ] || fail "the partial rebuild copied $copied of $total blocks"
echo "   partial rebuild copied $copied of $total blocks"
rpc head bdev_raid_set_options -b 0 >/dev/null
same_data a b

echo "== 3. replica a killed -9: the rebuilt copy serves alone; then a full rebuild onto c"
verify kill-a 5
sleep 1.5
kill9 a
verify_ok kill-a
out=$(raid)
expect '"num_base_bdevs_operational": 1' "$out"
rpc head bdev_raid_remove_base_bdev Ran1 >/dev/null
rpc head bdev_nvme_detach_controller Ra >/dev/null 2>&1 || true
replica c
attach c
rpc head bdev_raid_add_base_bdev Mirror Rcn1 >/dev/null
wait_rebuilt
grep -q "rebuild of Rcn1 done ($total blocks copied)" "$DIR/head.log" ||
    fail "c did not get a full rebuild"
same_data b c

echo "== 4. the head killed -9 and restarted: assembled from b and c, a refused"
refused_before=$(grep -c "refused as stale" "$DIR/head.log" || true)
kill9 head
replica a
start_tgt head 0x1
attach a
attach b
attach c
out=$(raid)
expect '"state": "online"' "$out"
expect '"num_base_bdevs_operational": 2' "$out"
expect '"name": "Rbn1"' "$out"
expect '"name": "Rcn1"' "$out"
printf '%s' "$out" | grep -q '"name": "Ran1"' && fail "the stale replica a is in the array: $out"
refused_after=$(grep -c "refused as stale" "$DIR/head.log" || true)
[ "$refused_after" -gt "$refused_before" ] || fail "the restarted head did not refuse a"
serve_head
verify after-restart 2
verify_ok after-restart
echo "raid-replicas: all checks passed"
