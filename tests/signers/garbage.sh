#!/bin/sh
# An exec: signer for ferry's tests that answers `sign` with text that is not a signature (and
# `public-key` with the key in $1).
set -eu
case "$2" in
  public-key) exec openssl pkey -in "$1" -pubout ;;
  sign) cat >/dev/null; echo "signed, trust me" ;;
esac
