#!/bin/sh
# A lying exec: signer for ferry's tests: `liar.sh A.pem B.pem public-key` prints A's public
# key, `liar.sh A.pem B.pem sign` signs with B. ferry must refuse what it signs.
set -eu
case "$3" in
  public-key) exec openssl pkey -in "$1" -pubout ;;
  sign) openssl dgst -sha256 -sign "$2" | base64 | tr -d '\n'; echo ;;
esac
