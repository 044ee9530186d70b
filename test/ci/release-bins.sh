# Sourced by the host-side NVMe/TCP scripts (nvmf-loopback*.sh) from the workspace root:
# builds the release pmio-tgt, pmio-rpc and pmio-perf and sets BIN to their directory
# (CARGO_TARGET_DIR honoured, relative or absolute; BIN given wins).
"${CARGO:-cargo}" build --release -q -p pmio-tgt -p pmio-rpc -p pmio-perf
TD=${CARGO_TARGET_DIR:-target}
case $TD in /*) ;; *) TD=$PWD/$TD ;; esac
BIN=${BIN:-$TD/release}
