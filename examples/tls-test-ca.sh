#!/usr/bin/env bash
# Makes a throwaway certificate authority and peer certificates signed by it, to try TLS between
# peers (docs/security.md explains each command). For tests and experiments, not production:
# the keys are unencrypted and expire in 30 days.
#
# Usage: examples/tls-test-ca.sh DIR NAME [NAME...]
# Writes DIR/ca.crt and DIR/ca.key (made once; reused if present), and DIR/NAME.crt and
# DIR/NAME.key for each NAME. Then run each peer with
#   --tls-cert DIR/NAME.crt --tls-key DIR/NAME.key --tls-ca DIR/ca.crt
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NAME [NAME...]" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "error: openssl not found (apt-get install openssl)" >&2; exit 1; }
dir="$1"
shift
mkdir -p "$dir"
cd "$dir"
umask 077
# EC P-256 keys: quick to make, quick to use.
key_args=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [ ! -f ca.key ] || [ ! -f ca.crt ]; then
  openssl req -x509 "${key_args[@]}" -keyout ca.key -out ca.crt -days 30 -subj "/CN=rumor test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth,clientAuth" > peer.ext
for name in "$@"; do
  openssl req "${key_args[@]}" -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile peer.ext -out "$name.crt" 2>/dev/null
  rm -f "$name.csr"
done
rm -f peer.ext
