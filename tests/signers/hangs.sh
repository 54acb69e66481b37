#!/bin/sh
# An exec: signer for ferry's tests that never answers `sign`: it starts a helper process that
# would outlive it (its pid written to $2) and waits. `public-key` prints the key in $1.
set -eu
case "$3" in
  public-key) exec openssl pkey -in "$1" -pubout ;;
  sign) sleep 100000 & echo $! > "$2"; wait ;;
esac
