#!/bin/sh
# An exec: signer for ferry's tests whose key is readable but which may not sign (a KMS key the
# caller may only describe): `public-key` prints the key in $1, `sign` exits 5.
set -eu
case "$2" in
  public-key) exec openssl pkey -in "$1" -pubout ;;
  sign) cat >/dev/null; echo "AccessDenied: kms:Sign" >&2; exit 5 ;;
esac
