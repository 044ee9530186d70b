#!/usr/bin/env bash
# The host tools the tests need, installed where missing without touching what is there
# (issue 27):
#   test/ci/host-deps.sh [all]   everything .ci/run provides before `make test`
#   test/ci/host-deps.sh qemu    QEMU alone: the Makefile's VM targets call this first, so that
#                                ../shared/vm/run-in-vm never installs QEMU itself (it would,
#                                as root, with a plain apt-get install)
# A tool already on the machine is used as it is, whatever its version or origin, except that
# QEMU must be 7.2 or newer (Debian 12's, which the VM tests are written against);
# RUN_IN_VM_QEMU names another QEMU binary, as for run-in-vm. Missing tools are installed, as
# root, with `apt-get install --no-remove --no-install-recommends`, after a simulation of the
# same install that must neither remove nor downgrade a package: where apt would (Debian's
# qemu-system-x86 beside a newer QEMU's qemu-utils, say), nothing is installed and the script
# exits 1 saying what to do. QEMU's packages must be of one version: beside a qemu-utils from
# bookworm-backports (this machine kind's image has 10.0's), qemu-system-x86 is installed from
# bookworm-backports too (its source added to apt, for that install only), in an install of its
# own so that the others do not depend on it. Not root, with tools missing: `all` says which
# and exits 0 (the tests that need them fail with their own messages), `qemu` exits 1.
set -euo pipefail

MODE=${1:-all}
QEMU=${RUN_IN_VM_QEMU:-qemu-system-x86_64}
QEMU_MIN=7.2 # the VM tests' QEMU (Debian 12); older ones are untested

fail() {
    echo "host-deps: $*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# version_at_least HAVE WANT: whether version HAVE >= WANT (dotted numbers).
version_at_least() { [ "$(printf '%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }

# The QEMU there is, if any: nothing to install when it is new enough, else an error (it is
# never replaced). Prints the package to install when there is none.
need_qemu() {
    if ! have "$QEMU"; then
        [ "$QEMU" = qemu-system-x86_64 ] || fail "RUN_IN_VM_QEMU=$QEMU: not found"
        echo qemu-system-x86
        return
    fi
    local v
    v=$("$QEMU" --version | sed -n 's/^QEMU emulator version \([0-9][0-9.]*\).*/\1/p')
    [ -n "$v" ] || fail "$(command -v "$QEMU") --version does not say which QEMU it is"
    version_at_least "$v" "$QEMU_MIN" || fail "QEMU $v ($(command -v "$QEMU")) is older than" \
        "$QEMU_MIN, which the VM tests need; it is left as it is: install a newer QEMU, or name" \
        "one with RUN_IN_VM_QEMU"
    echo "host-deps: using QEMU $v ($(command -v "$QEMU"))" >&2
}

# The packages of the tools that are missing, one per line.
missing() {
    need_qemu
    [ "$MODE" = qemu ] && return
    have losetup || echo mount
    have cpio || echo cpio
    have xz || echo xz-utils
    # The sock options test reads the target's socket buffers with ss; make readme puts
    # 10.0.0.1 on a namespace's loopback with ip and enters the namespace with unshare.
    have ss || echo iproute2
    have ip || echo iproute2
    # make readme scrapes pmio-tgt's /metrics with curl.
    have curl || echo curl
    have unshare || echo util-linux
    # The histogram tests read bdev_get_histogram's reply with test/ci/histogram-rows.py.
    have python3 || echo python3
    # The metrics test scrapes pmio-tgt with a real Prometheus and queries its HTTP API.
    have prometheus || echo prometheus
    # make vm-test links its guest binary statically (crt-static): glibc's libc.a.
    [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || echo libc6-dev
    # The rbd tests (issue 30): a one-node Ceph cluster (test/ci/ceph.sh), pmio-rbd's link
    # libraries, the rbd/rados CLIs that check what pmio wrote, fio's rbd engine (the peer in
    # BENCHMARKS.md). Debian 12's Ceph 16.2.
    have ceph-mon || echo ceph-mon
    have ceph-osd || echo ceph-osd
    have ceph || echo ceph-common
    [ -e /usr/include/rbd/librbd.h ] || echo librbd-dev
    [ -e /usr/include/rados/librados.h ] || echo librados-dev
    have fio || echo fio
}

# refuse WHY APT_OUTPUT: stop before installing anything.
refuse() {
    echo "host-deps: not installing ${asked[*]}: $1; nothing was changed. apt-get said:" >&2
    printf '%s\n' "$2" | grep -v '^NOTE\|^  *$' | tail -30 >&2
    fail "install ${asked[*]} (or what provides them) yourself, keeping what you have, and rerun"
}

# install [-t SUITE] PKG...: apt-get install, only if its simulation removes and downgrades
# nothing.
install() {
    export DEBIAN_FRONTEND=noninteractive
    local opts=(--no-remove --no-install-recommends) sim pkg old new
    if [ "$1" = -t ]; then
        opts+=(-t "$2")
        shift 2
    fi
    asked=("$@")
    apt-get update -qq || fail "apt-get update failed (is Debian's package registry reachable?)"
    sim=$(apt-get install -s "${opts[@]}" "$@" 2>&1) || refuse "apt would have to remove packages" "$sim"
    if grep -q '^Remv ' <<<"$sim"; then refuse "apt would remove packages" "$sim"; fi
    # "Inst PKG [INSTALLED] (CANDIDATE ...)": an installed package apt would change.
    while read -r pkg old new; do
        if dpkg --compare-versions "$new" lt "$old"; then
            refuse "apt would downgrade $pkg from $old to $new" "$sim"
        fi
    done < <(sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\) .*/\1 \2 \3/p' <<<"$sim")
    echo "host-deps: installing $* (apt-get install ${opts[*]})" >&2
    apt-get install -y -qq "${opts[@]}" "$@"
}

BACKPORTS_LIST=/etc/apt/sources.list.d/pmio-bookworm-backports.sources

# The suite the installed QEMU packages came from, when it is not the release's own.
qemu_backports() {
    local v
    v=$(dpkg-query -W -f='${Version}' qemu-utils qemu-system-common 2>/dev/null | head -1) || true
    case $v in *~bpo12*) return 0 ;; *) return 1 ;; esac
}

# install_qemu: qemu-system-x86 of the same suite as the QEMU packages already there.
install_qemu() {
    if ! qemu_backports; then
        install qemu-system-x86
        return
    fi
    if [ ! -e "$BACKPORTS_LIST" ]; then
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' \
            'Suites: bookworm-backports' 'Components: main' \
            'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$BACKPORTS_LIST"
        echo "host-deps: added bookworm-backports ($BACKPORTS_LIST): qemu-utils came from it" >&2
    fi
    install -t bookworm-backports qemu-system-x86
}

case $MODE in all | qemu) ;; *) fail "usage: $0 [all|qemu]" ;; esac
list=$(missing) # not in a pipeline: a refusal in it ends the script
mapfile -t pkgs < <(sort -u <<<"$list" | sed '/^$/d')
[ ${#pkgs[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "host-deps: missing ${pkgs[*]} and not root: tests that need them will fail" >&2
    if [ "$MODE" = qemu ]; then exit 1; fi
    exit 0
fi
have apt-get || fail "missing ${pkgs[*]}, and no apt-get to install them with"
others=()
for p in "${pkgs[@]}"; do [ "$p" = qemu-system-x86 ] || others+=("$p"); done
[ ${#others[@]} -eq 0 ] || install "${others[@]}"
if [ ${#others[@]} -ne ${#pkgs[@]} ]; then install_qemu; fi
