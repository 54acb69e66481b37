#!/bin/sh
# An exec: signer for ferry's tests (docs/keys.md, "The exec protocol"), standing in for a KMS
# CLI: `openssl-p256.sh KEY.pem public-key` prints the public key as PEM; `openssl-p256.sh
# KEY.pem sign` signs standard input with ECDSA P-256 / SHA-256 and prints the DER signature
# in base64. Any other verb, or a missing key, exits non-zero.
set -eu
key=$1
case "${2:-}" in
  public-key) exec openssl pkey -in "$key" -pubout ;;
  sign) openssl dgst -sha256 -sign "$key" | base64 | tr -d '\n'; echo ;;
  *) echo "usage: $0 KEY.pem public-key|sign" >&2; exit 64 ;;
esac
