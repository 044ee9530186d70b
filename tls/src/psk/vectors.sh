#!/bin/bash
# Recomputes the known answers of tests.rs with the openssl command line (not with pmio-tls):
# each HKDF-Expand-Label info built here by hand, HKDF by `openssl kdf`, digests by `openssl mac`.
set -e
hex() { printf %s "$1" | xxd -p | tr -d '\n'; }
info() { # len label context
  local l=$(printf "tls13 %s" "$2"); printf '%04x%02x%s%02x%s' $1 ${#l} $(hex "$l") ${#3} $(hex "$3"); }
kdf() { # digest len keyhex infohex
  openssl kdf -keylen $2 -kdfopt digest:$1 -kdfopt hexkey:$3 -kdfopt hexinfo:$4 HKDF | tr -d ':' | tr 'A-F' 'a-f'; }
H=nqn.2016-06.io.spdk:host1; S=nqn.2016-06.io.spdk:cnode1
run() { # digest len keyhex id
  R=$(kdf $1 $2 $3 $(info $2 HostNQN $H)); echo "retained $R"
  ID0="NVMe0R$4 $H $S"; T0=$(kdf $1 $2 $R $(info $2 nvme-tls-psk "$ID0")); echo "tls v0 $T0"
  D=$(printf '%s' "$H $S NVMe-over-Fabrics" | openssl mac -digest $1 -macopt hexkey:$R -binary HMAC | base64 -w0); echo "digest $D"
  T1=$(kdf $1 $2 $R $(info $2 nvme-tls-psk "$4 $D")); echo "tls v1 $T1"
}
run SHA256 32 $(hex 00112233445566778899aabbccddeeff) 01
run SHA384 48 $(python3 -c 'print(bytes(range(48)).hex())') 02
