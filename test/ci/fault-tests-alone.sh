#!/usr/bin/env bash
# The NVMe driver's fault tests, each in a process of its own, in debug and release, over
# several fault seeds. Inside `cargo test --workspace` other tests change their timing, which
# can hide what a test does alone (issue 15: fault_mixed failed alone on a quiet machine and
# passed in the full run for months).
#
# PMIO_FAULT_SEEDS (comma-separated) picks the seeds of the random-fault tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

CARGO=${CARGO:-cargo}
export PMIO_FAULT_SEEDS=${PMIO_FAULT_SEEDS:-1234,1,2,3,4,5,6,7}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
ran=0
for profile in dev release; do
    args=(-p pmio-nvme --lib --features emulator)
    [ "$profile" = release ] && args+=(--release)
    "$CARGO" test -q "${args[@]}" --no-run
    mapfile -t names < <("$CARGO" test -q "${args[@]}" -- --list 2>/dev/null |
        sed -n 's/^\(.*fault_[^:]*\): test$/\1/p')
    if [ ${#names[@]} -eq 0 ]; then
        echo "fault-tests-alone: no fault_ test found ($profile)" >&2
        exit 1
    fi
    for name in "${names[@]}"; do
        ran=$((ran + 1))
        if ! "$CARGO" test -q "${args[@]}" -- --exact "$name" >"$log" 2>&1; then
            echo "FAILED ($profile, alone): $name" >&2
            cat "$log" >&2
            failed+=("$profile $name")
        fi
    done
done
echo "fault tests alone: $((ran - ${#failed[@]})) passed, ${#failed[@]} failed (seeds $PMIO_FAULT_SEEDS)"
[ ${#failed[@]} -eq 0 ]
