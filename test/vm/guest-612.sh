#!/bin/bash
# The guest scripts that need Debian 13's 6.12 kernel, in one boot (`make vm-test-612`) or one
# at a time (`make vm-test-auth`, ...): `test/vm/guest-612.sh [NAME...]` boots one 6.12 guest
# with the modules of the named tests (default: every one in TESTS), copies in their files and
# runs their scripts in turn through test/vm/each-in-guest.sh, which names each failure, runs
# the rest anyway and exits non-zero if any failed. Booting a 6.12 guest under software
# emulation costs tens of seconds on a loaded 2-core machine; one boot for all saves it per test.
#
# Adding a script to the one boot is one line in TESTS: its make name (vm-test-NAME), the
# script in test/vm, the guest seconds it may take alone (the guest's timeout is their sum) and
# the modules it needs, comma-separated. Every test gets the same files (FILES); each script
# cleans up what it made (processes, configfs, controllers, disks) so the next finds the guest
# as it was, and each-in-guest.sh kills whatever a script's process group left running.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN_IN_VM=${RUN_IN_VM:-../shared/vm/run-in-vm}
RELEASE=${RELEASE:-target/release}

#     name        script                        seconds modules
TESTS="
      auth        auth-in-guest.sh              500     nvme-tcp,crc32c_generic
      nvmet-auth  nvmet-auth-host-in-guest.sh   300     nvmet-tcp,crc32c_generic
      ublk        ublk-in-guest.sh              600     ublk_drv,crc32c_generic,ext4
"
FILES=("$RELEASE/pmio-tgt" "$RELEASE/pmio-rpc" "$RELEASE/pmio-perf" /usr/sbin/mke2fs)

want=("$@")
scripts=() modules=() timeout=0
while read -r name script secs mods; do
    [[ -n $name ]] || continue
    if ((${#want[@]})); then
        hit=0
        for w in "${want[@]}"; do [[ $w == "$name" ]] && hit=1; done
        ((hit)) || continue
    fi
    scripts+=("$script")
    timeout=$((timeout + secs))
    IFS=, read -ra m <<<"$mods"
    for x in "${m[@]}"; do
        [[ " ${modules[*]} " == *" $x "* ]] || modules+=("$x")
    done
done <<<"$TESTS"
((${#scripts[@]})) || { echo "guest-612.sh: no test named ${want[*]}" >&2; exit 2; }

args=(--kernel 6.12 --quiet --cpus 2 --timeout "$timeout")
for m in "${modules[@]}"; do args+=(--module "$m"); done
for f in "${FILES[@]}"; do args+=(--file "$f"); done
for s in "${scripts[@]}"; do args+=(--file "test/vm/$s"); done
echo "guest-612: ${scripts[*]} in one 6.12 guest (modules ${modules[*]}; timeout ${timeout} s)"
exec "$RUN_IN_VM" "${args[@]}" -- test/vm/each-in-guest.sh "${scripts[@]}"
