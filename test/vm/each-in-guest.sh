#!/bin/sh
# Runs guest scripts one after another in one guest (test/vm/guest-612.sh): each in a session
# of its own, so that whatever it leaves running when it ends (a pmio-tgt after a failed check)
# is killed with its process group before the next starts; a failure is named and the others
# still run. Exits 1 if any script failed, after a summary line per script.
cd /job
summary= failed=
for s in "$@"; do
    echo "=== $s"
    start=$(cut -d. -f1 /proc/uptime)
    setsid sh "./$s" </dev/null &
    pid=$!
    wait $pid
    rc=$?
    kill -KILL -$pid 2>/dev/null
    secs=$(($(cut -d. -f1 /proc/uptime) - start))
    if [ $rc = 0 ]; then
        summary="$summary
$s: passed ($secs s)"
    else
        summary="$summary
$s: FAILED, exit $rc ($secs s)"
        failed="$failed $s"
    fi
done
echo "=== summary$summary"
if [ -n "$failed" ]; then
    echo "FAILED:$failed"
    exit 1
fi
echo "all $# passed"
