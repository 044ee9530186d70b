#!/usr/bin/env bash
# A one-node Ceph cluster for the rbd tests (issue 30), from Debian 12's Ceph 16.2 packages
# (test/ci/host-deps.sh installs them):
#   test/ci/ceph.sh start    bring it up (nothing to do when it is already up and healthy)
#   test/ci/ceph.sh stop     stop its daemons and remove its directory
#   test/ci/ceph.sh status   exit 0 when its OSD is up and a write to its rbd pool is answered
#   test/ci/ceph.sh env      print the shell variables the tests use (CEPH_CONF=..., ...)
# One monitor and one OSD on memstore (its data lives in the OSD's memory: a restarted OSD
# starts empty, so `start` on a half-dead cluster recreates it), pool size 1, no manager (the
# monitor alone serves what librbd and the rbd/rados CLIs need). Everything is under
# $PMIO_CEPH_DIR (default /tmp/pmio-ceph), with its own fsid, its own cluster name (pmio),
# and its own loopback ports ($PMIO_CEPH_PORT, default 46789, and the port after it for
# msgr2; the OSD binds ports from 46800 up), so a cluster the machine already has is never
# touched: nothing reads or writes /etc/ceph or /var/lib/ceph.
# The tests' client is client.pmio with rbd's caps on pool rbd; its keyring is
# $PMIO_CEPH_DIR/client.pmio.keyring (client.admin's is $PMIO_CEPH_DIR/keyring).
# Start-up: 7 s on the 2-core dev machine; memory: ~35 MB resident for the monitor, ~35 MB for the
# OSD plus what is written (memstore keeps it, up to memstore_device_bytes = 4 GiB).
set -euo pipefail

DIR=${PMIO_CEPH_DIR:-/tmp/pmio-ceph}
PORT=${PMIO_CEPH_PORT:-46789}
CLUSTER=pmio
POOL=rbd
CONF=$DIR/ceph.conf

log() { echo "ceph.sh: $*" >&2; }
fail() {
    log "$*"
    for f in "$DIR"/log/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -15 "$f" >&2; }; done
    exit 1
}
# ceph ARGS...: the admin CLI on this cluster, never waiting more than 10 s for an answer.
cephc() { timeout 15 ceph --cluster "$CLUSTER" -c "$CONF" --connect-timeout 10 "$@"; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

healthy() {
    [ -f "$CONF" ] && pid_alive "$DIR/run/mon.a.pid" && pid_alive "$DIR/run/osd.0.pid" || return 1
    # Without a manager there are no PG states to ask for: the OSD up and a write to the
    # pool answered are what the tests need.
    cephc osd stat -f json 2>/dev/null | grep -q '"num_up_osds":1' || return 1
    echo ok | timeout 15 rados --cluster "$CLUSTER" -c "$CONF" -p "$POOL" put pmio-ceph-probe - \
        >/dev/null 2>&1
}

stop() {
    local f
    for f in "$DIR"/run/osd.0.pid "$DIR"/run/mon.a.pid; do
        if pid_alive "$f"; then
            local p
            p=$(cat "$f")
            kill "$p" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$p" 2>/dev/null || true
        fi
    done
    rm -rf "$DIR"
}

write_conf() {
    local fsid=$1
    cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon_initial_members = a
mon_host = [v2:127.0.0.1:$((PORT + 1)),v1:127.0.0.1:$PORT]
public_network = 127.0.0.0/8
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $DIR/keyring
run_dir = $DIR/run
pid_file = $DIR/run/\$name.pid
log_file = $DIR/log/\$name.log
mon_cluster_log_file = $DIR/log/cluster.log
ms_bind_port_min = $((PORT + 11))
ms_bind_port_max = $((PORT + 60))
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
auth_allow_insecure_global_id_reclaim = false

[mon]
admin_socket = $DIR/run/\$cluster-\$name.asok
mon_data = $DIR/mon.\$id
mon_osd_full_ratio = .99
mon_osd_nearfull_ratio = .98
mon_osd_backfillfull_ratio = .985

[osd]
admin_socket = $DIR/run/\$cluster-\$name.asok
osd_data = $DIR/osd.\$id
osd_objectstore = memstore
memstore_device_bytes = 4294967296
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
keyring = $DIR/osd.\$id/keyring
EOF
}

start() {
    if healthy; then
        log "up ($CONF)"
        return 0
    fi
    command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v ceph >/dev/null ||
        fail "ceph-mon, ceph-osd or ceph missing: run test/ci/host-deps.sh as root"
    stop
    local t0=$SECONDS fsid osd_uuid
    mkdir -p "$DIR"/run "$DIR"/log "$DIR"/mon.a "$DIR"/osd.0
    fsid=$(cat /proc/sys/kernel/random/uuid)
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    write_conf "$fsid"

    # 1. Keys: the monitors' own, client.admin's (both in the monitor's initial keyring).
    ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/keyring" >/dev/null

    # 2. The monitor.
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$((PORT + 1)),v1:127.0.0.1:$PORT]" \
        "$DIR/monmap" >/dev/null
    ceph-mon --cluster "$CLUSTER" -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" \
        --keyring "$DIR/mon.keyring" || fail "ceph-mon --mkfs failed"
    ceph-mon --cluster "$CLUSTER" -c "$CONF" -i a </dev/null >/dev/null 2>&1 || fail "ceph-mon did not start"
    for _ in $(seq 100); do cephc mon stat >/dev/null 2>&1 && break; sleep 0.2; done
    cephc mon stat >/dev/null 2>&1 || fail "the monitor does not answer on 127.0.0.1:$PORT"

    # 3. The OSD on memstore.
    local id
    id=$(cephc osd new "$osd_uuid") || fail "ceph osd new failed"
    [ "$id" = 0 ] || fail "the new OSD is osd.$id, expected osd.0"
    ceph-authtool --create-keyring "$DIR/osd.0/keyring" --gen-key -n osd.0 >/dev/null
    cephc auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$DIR/osd.0/keyring" \
        >/dev/null 2>&1 || fail "ceph auth add osd.0 failed"
    ceph-osd --cluster "$CLUSTER" -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
        >"$DIR/log/osd-mkfs.log" 2>&1 || fail "ceph-osd --mkfs failed"
    ceph-osd --cluster "$CLUSTER" -c "$CONF" -i 0 </dev/null >/dev/null 2>&1 || fail "ceph-osd did not start"

    # 4. The rbd pool and the tests' client.
    cephc osd pool create "$POOL" 8 8 >/dev/null 2>&1 || fail "ceph osd pool create failed"
    cephc osd pool set "$POOL" size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
    cephc osd pool application enable "$POOL" rbd >/dev/null 2>&1 || fail "pool application enable failed"
    cephc auth get-or-create client.pmio mon 'profile rbd' osd "profile rbd pool=$POOL" \
        -o "$DIR/client.pmio.keyring" >/dev/null 2>&1 || fail "creating client.pmio failed"
    for _ in $(seq 300); do healthy && break; sleep 0.2; done
    healthy || fail "pool $POOL did not become active+clean"
    log "up in $((SECONDS - t0)) s ($CONF)"
}

case ${1:-} in
start) start ;;
stop) stop ;;
status)
    if healthy; then
        cephc -s
    else
        log "not up ($DIR)"
        exit 1
    fi
    ;;
env)
    echo "CEPH_CONF=$CONF"
    echo "CEPH_CLUSTER=$CLUSTER"
    echo "CEPH_POOL=$POOL"
    echo "CEPH_KEYRING=$DIR/client.pmio.keyring"
    echo "CEPH_USER=pmio"
    ;;
*)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
