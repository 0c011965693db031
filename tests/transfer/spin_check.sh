#!/usr/bin/env bash
# Model-checks the handoff protocol (handoff_protocol.pml) with spin: the
# protocol as built must verify with no error, and each broken variant must
# be caught (the checker must be able to fail). Usage: spin_check.sh MODEL.pml
set -euo pipefail
model=$(readlink -f "$1")
command -v spin > /dev/null || { echo "spin is not installed (apt-get install spin; scripts/install-deps.sh does)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
check() {  # check VARIANT_FLAG EXPECTED_ERRORS(0 or 1)
  rm -f pan pan.*
  spin $1 -a "$model" > spin.log 2>&1 || { cat spin.log; exit 1; }
  gcc -O2 -DSAFETY -w -o pan pan.c
  timeout 300 ./pan -m1000000 > pan.log 2>&1 || true
  local errors
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | tail -n 1)
  local states
  states=$(sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1/p' pan.log | head -n 1)
  local what
  what=$(grep -m1 -E "^pan:[0-9]+:" pan.log || true)
  echo "${1:-as built}: errors ${errors:-?}, ${states:-?} states${what:+, first: $what}"
  if [ "$2" = 0 ] && [ "${errors:-x}" != 0 ]; then cat pan.log; exit 1; fi
  if [ "$2" = 1 ] && { [ -z "$errors" ] || [ "$errors" = 0 ]; }; then
    echo "the broken variant $1 was NOT caught"; cat pan.log; exit 1
  fi
  if [ "$2" = 0 ] && [ "${states:-0}" -lt 1000 ]; then echo "suspiciously few states"; exit 1; fi
}
check "" 0
check -DBROKEN_ACK_AFTER_FAILED_FLUSH 1
check -DBROKEN_EARLY_COMMIT 1
check -DBROKEN_FREE_ON_OWN_CLOSE 1
echo "the protocol verifies and every broken variant is caught"
