#!/usr/bin/env bash
# `make readme` (issue 27): every command README.md shows, run as written, as a newcomer would.
#
# Each ```sh block of README.md runs in README order, line by line as a script, in one shell:
#  - its working directory is a scratch directory in the workspace whose ./target is the
#    build's target directory (CARGO_TARGET_DIR honoured), so ./target/release/... and cargo
#    work as in a clone, and the files the commands write (cfg.json, disk.img) stay out of the
#    tree; spdk.json, which "Moving from SPDK" checks, is an SPDK v25.09 save_config from
#    config/tests/fixtures;
#  - in private namespaces (mount, network, pid): /var/tmp is a fresh tmpfs, so the daemon's
#    default socket /var/tmp/pmio.sock is this run's alone; the loopback also carries 10.0.0.1,
#    the NVMe/TCP target's address in the README; whatever the run leaves is gone when it ends;
#  - the blocks of the NVMe/TCP host's section run as on another machine: /var/tmp is another
#    tmpfs while they run, with a pmio-tgt of their own (core 1) where they call pmio-rpc.
# A command that fails fails the run, naming its README line. After a command that starts
# pmio-tgt in the background the next one waits until it answers (SPDK's waitforlisten), and
# after spdk_kill_instance until that daemon (the one on the socket the call names) has exited:
# a person typing the commands gives it that time.
#
# Commands that need a VM, root on the host or hardware are listed in COVERED below with the
# make target that runs them; any other command the README gains is run here. Also checked: the
# Rust block is runtime/examples/hello_bdev.rs verbatim, and each `make TARGET` the README names
# is a Makefile target. About a minute after the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
README=$ROOT/README.md

# covered KIND REGEX TARGET WHY: a README line (KIND line) or a whole block (KIND block, where a
# line of it matches) that runs elsewhere, in make TARGET.
C_KIND=() C_RE=() C_TARGET=() C_WHY=()
covered() { C_KIND+=("$1") C_RE+=("$2") C_TARGET+=("$3") C_WHY+=("$4"); }
covered line '^make test( |$)' 'make test' 'all of CI, this run among it'
covered line '^make examples( |$)' 'make examples' 'part of make test (the three cargo run lines before it run here)'
covered line '^cargo run -p pmio-nvmf --example malloc_tgt ' 'make unit' 'a daemon that serves until a signal: test/tests/nvmf_malloc_tgt.rs starts it, configures it with pmio-rpc, checks pmio-perf --verify over NVMe/TCP against it and stops it'
covered block '^qemu-system-x86_64 ' 'make vm-test-vhost' 'a QEMU guest whose disk pmio-tgt serves over vhost-user-blk'
covered block '--dhchap-secret' 'make vm-test-auth' "Linux's NVMe/TCP host with in-band authentication (kernel 6.12): the guest connects with dhchap_secret= through /dev/nvme-fabrics as nvme connect --dhchap-secret does"
covered block '^nvme connect .*io\.pmio:gw' 'make vm-test-ana' "the host kernel's native NVMe multipath over two gateways: the guest connects to both through /dev/nvme-fabrics as nvme connect does, and reads each path's ana_state"
covered block '^nvme connect ' 'make vm-test-nvmf' "the host kernel's NVMe/TCP initiator: root, nvme-tcp, nvme-cli; the guest connects through /dev/nvme-fabrics as nvme connect does"
covered block '^test/ci/ceph.sh start' 'make rbd' 'a Ceph cluster: make rbd starts test/ci/ceph.sh and test/ci/rbd-tgt.sh runs these methods against it'
covered block 'ublk_start_disk' 'make vm-test-ublk' "the kernel's ublk_drv, which Debian 12's kernel lacks: the guest with Debian 13's kernel runs these steps"
covered block '/dev/nvme-fabrics' 'make vm-test-nvmf' "the kernel's NVMe/TCP initiator in a busybox guest: what the VM test does"
# The README section whose blocks run as on the NVMe/TCP host.
HOST_SECTION='(the host)'

fail() {
    echo "readme: FAIL: $*" >&2
    exit 1
}

# ---------------------------------------------------------------- inside the namespaces

# The steps README blocks take between commands, inside the namespaces (see the top).
if [ "${1:-}" = --inside ]; then
    S=$2
    exec 3>&1 >>"$S/run.log" 2>&1
    mount -t tmpfs -o mode=1777 tmpfs /var/tmp
    ip link set lo up
    ip addr add 10.0.0.1/8 dev lo
    cd "$S"
    readme_daemons=() readme_socks=() # pmio-tgts the README's commands started, their sockets
    readme_bg='' readme_prev='' readme_file='' readme_shown=''

    readme_fail() {
        echo "readme: FAIL: $*" >&3
        exit 1
    }
    # readme_wait_listen PID [WHO]: until the pmio-tgt PID (WHO started it) answers on its
    # socket (-r, or the default).
    readme_wait_listen() {
        local pid=$1 who=${2:-the run} sock
        sock=$(readme_sock "$pid")
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || readme_fail "$who: pmio-tgt (pid $pid) exited before answering on $sock"
            "$BIN/pmio-rpc" -s "$sock" -t 1 rpc_get_methods >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        readme_fail "$who: pmio-tgt (pid $pid) did not answer on $sock in 10 s"
    }
    # readme_argv0 PID: the program PID runs, once the fork has exec'd it (a command started
    # in the background right after another may still be the shell for a moment).
    readme_argv0() {
        local name
        for _ in $(seq 40); do
            name=$(basename "$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -1)")
            [ "$name" = bash ] || break
            sleep 0.05
        done
        echo "$name"
    }
    # readme_sock PID: the socket pmio-tgt PID answers on (-r, or the default).
    readme_sock() {
        local sock=/var/tmp/pmio.sock a prev=''
        while IFS= read -r -d '' a; do
            [ "$prev" = -r ] && sock=$a
            prev=$a
        done <"/proc/$1/cmdline"
        echo "$sock"
    }
    # readme_wait_exit: until the pmio-tgt the spdk_kill_instance just shown was sent to (its
    # -s socket, or the default) has exited; the README's other daemons go on.
    readme_wait_exit() {
        local i pid sock=/var/tmp/pmio.sock w prev='' keep=() keep_socks=()
        for w in $readme_prev; do
            [ "$prev" = -s ] && sock=$w
            prev=$w
        done
        for i in "${!readme_daemons[@]}"; do
            pid=${readme_daemons[$i]}
            if [ "${readme_socks[$i]}" != "$sock" ]; then
                keep+=("$pid") keep_socks+=("${readme_socks[$i]}")
                continue
            fi
            for _ in $(seq 100); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -0 "$pid" 2>/dev/null && readme_fail "$readme_shown: pmio-tgt (pid $pid) still runs 10 s later"
            wait "$pid" 2>/dev/null || true
        done
        readme_daemons=("${keep[@]}") readme_socks=("${keep_socks[@]}")
    }
    # Between two commands of a block (the DEBUG trap): settle what the previous one started or
    # stopped; show the next one.
    readme_step() {
        [ "${BASH_SOURCE[1]}" = "$readme_file" ] || return 0 # this script's own lines
        if [ -n "${!:-}" ] && [ "$!" != "$readme_bg" ]; then
            readme_bg=$!
            if [ "$(readme_argv0 "$!")" = pmio-tgt ]; then
                readme_daemons+=("$!")
                readme_socks+=("$(readme_sock "$!")")
                readme_wait_listen "$!" "$readme_shown"
            fi
        fi
        case $readme_prev in *spdk_kill_instance*) readme_wait_exit ;; esac
        local shown="README.md:$1: $BASH_COMMAND"
        [ "$shown" = "$readme_shown" ] && return 0 # the ERR trap's run of the same command
        readme_prev=$BASH_COMMAND readme_shown=$shown
        echo "$shown"
        echo "$shown" >&3
    }
    # readme_block FILE: runs one block (FILE: the block at its README line numbers).
    readme_block() {
        readme_file=$1 readme_prev=''
        set -eET -o pipefail
        trap 'readme_fail "README.md:$LINENO: exit $?: $BASH_COMMAND (log: $S/run.log)"' ERR
        trap 'readme_step $LINENO' DEBUG
        # shellcheck disable=SC1090
        source "$1"
        trap - DEBUG ERR
        case $readme_prev in *spdk_kill_instance*) readme_wait_exit ;; esac
        set +eET
    }
    # readme_host FILE: runs FILE as on the NVMe/TCP host: its own /var/tmp and, if the block
    # calls pmio-rpc, its own pmio-tgt on core 1.
    readme_host() {
        local pid=''
        mount -t tmpfs -o mode=1777 tmpfs /var/tmp
        if grep -q pmio-rpc "$1"; then
            "$BIN/pmio-tgt" -m 0x2 2>>"$S/host-tgt.log" &
            pid=$!
            readme_bg=$pid
            readme_wait_listen "$pid"
        fi
        readme_block "$1"
        if [ -n "$pid" ]; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" || true
        fi
        umount /var/tmp
    }
    # shellcheck disable=SC1091
    source "$S/plan.sh"
    for pid in "${readme_daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
    exit 0
fi

# ---------------------------------------------------------------- outside

# The Rust block: hello_bdev.rs verbatim (its main's body, indented as there).
rust=$(awk '/^```rust$/ { f = 1; next } /^```/ { f = 0 } f { print ($0 == "" ? "" : "    " $0) }' "$README")
[ -n "$rust" ] || fail "README.md has no Rust block"
[[ $(<runtime/examples/hello_bdev.rs) == *"$rust"* ]] ||
    fail "README.md's Rust block is not runtime/examples/hello_bdev.rs verbatim"

# Every `make TARGET` named in the README is a Makefile target.
for t in $(grep -o '`make [a-z0-9-]*' "$README" | sed 's/`make //' | sort -u); do
    grep -q "^$t:" Makefile || fail "README.md names make $t; the Makefile has no such target"
done

. test/ci/release-bins.sh
"${CARGO:-cargo}" build -q -p pmio-runtime --examples
TD=${BIN%/release}
S=$ROOT/target/readme-test
rm -rf "$S"
mkdir -p "$S"
ln -s "$TD" "$S/target"
ln -s "$ROOT/Makefile" "$S/Makefile"
cp config/tests/fixtures/spdk-v25.09-sample.json "$S/spdk.json"

# The blocks: each ```sh block becomes $S/block-LINE.sh, a script whose line N is README line N
# (the rest blank), without the lines and blocks COVERED lists; $S/plan.sh runs them in order.
# covered_by LINE: the index in COVERED of the first entry LINE matches, or nothing.
covered_by() {
    local i
    for i in "${!C_RE[@]}"; do
        if [[ $1 =~ ${C_RE[$i]} ]]; then
            echo "$i"
            return
        fi
    done
}
n=0 fence='' section='' start=0 lines=() blocks=0 runs=0
skipped=()
: >"$S/plan.sh"
while IFS= read -r line; do
    n=$((n + 1))
    if [ -z "$fence" ]; then
        case $line in
        '```'*) fence=${line#\`\`\`} fence=${fence:-plain} start=$((n + 1)) lines=() ;;
        '#'*) section=$line ;;
        esac
        continue
    fi
    if [ "$line" != '```' ]; then
        lines+=("$line")
        continue
    fi
    if [ "$fence" = sh ]; then
        blocks=$((blocks + 1))
        f=$S/block-$start.sh
        whole=''
        for l in "${lines[@]}"; do
            i=$(covered_by "$l")
            if [ -n "$i" ] && [ "${C_KIND[$i]}" = block ]; then whole=$i; fi
        done
        if [ -n "$whole" ]; then
            skipped+=("README.md:$start: the block (${lines[0]} ...): ${C_TARGET[$whole]}: ${C_WHY[$whole]}")
        else
            for _ in $(seq $((start - 1))); do echo; done >"$f"
            cont=0
            for ((k = 0; k < ${#lines[@]}; k++)); do
                l=${lines[$k]}
                i=$(covered_by "$l")
                if [ "$cont" = 1 ] || [ -n "$i" ]; then
                    [ -n "$i" ] && skipped+=("README.md:$((start + k)): $l: ${C_TARGET[$i]}: ${C_WHY[$i]}")
                    echo >>"$f"
                    case $l in *\\) cont=1 ;; *) cont=0 ;; esac
                    continue
                fi
                printf '%s\n' "$l" >>"$f"
                case $l in '' | '#'*) ;; *) runs=$((runs + 1)) ;; esac
            done
            if [[ $section == *"$HOST_SECTION"* ]]; then
                echo "readme_host $f" >>"$S/plan.sh"
            else
                echo "readme_block $f" >>"$S/plan.sh"
            fi
        fi
    fi
    fence=''
done <"$README"
[ -z "$fence" ] || fail "README.md: a code block from line $start is not closed"
[ "$blocks" -gt 0 ] || fail "README.md has no sh block"

echo "readme: $blocks sh blocks, $runs lines to run (output in $S/run.log)"
ns=(--mount --net --pid --fork --mount-proc)
[ "$(id -u)" -eq 0 ] || ns+=(--user --map-root-user)
CARGO_TARGET_DIR=$TD BIN=$BIN unshare "${ns[@]}" bash "$0" --inside "$S" ||
    { echo "--- last lines of $S/run.log" >&2; tail -40 "$S/run.log" >&2; exit 1; }
echo "readme: not run here, run by the make target named:"
printf '  %s\n' "${skipped[@]}"
echo "readme: OK"
# $S stays for a look at run.log; the next run clears it.
