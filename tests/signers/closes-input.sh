#!/bin/sh
# An exec: signer for ferry's tests that fails without reading its input, as a KMS CLI whose
# login fails does: `closes-input.sh KEY.pem public-key` prints the key, `sign` closes standard
# input, waits a moment and exits 3.
set -eu
case "$2" in
  public-key) exec openssl pkey -in "$1" -pubout ;;
  sign) exec 0<&-; sleep 0.3; echo "login failed" >&2; exit 3 ;;
esac
