#!/bin/bash
# hal_real_guest.sh BINARY...: runs INSIDE the Soft-RoCE VM (started by
# hal_real.sh through run-in-vm). Runs each hal_real gtest binary in turn,
# streams its output, prints one summary line per binary, and exits 0 only if
# every binary exited 0 and none skipped for want of RDMA devices.
#
# Must stay true: each binary is bounded by `timeout` (default 900 s, env
# FERRY_HAL_REAL_BIN_TIMEOUT); every binary runs even after one fails.

set -uo pipefail

[[ ${FERRY_SOFTROCE:-} == 1 ]] || {
  echo "FAIL (in VM): not inside the Soft-RoCE VM" >&2
  exit 1
}
per_bin_s=${FERRY_HAL_REAL_BIN_TIMEOUT:-900}
log=$(mktemp /tmp/hal_real.XXXXXX)
failed=0
summary=()
for bin in "$@"; do
  name=$(basename "$bin")
  echo "=== $name (devices: $FERRY_RXE_DEVICES, GID index $FERRY_RXE_GID_INDEX)"
  t0=${EPOCHREALTIME/./}
  rc=0
  timeout --kill-after=10 "$per_bin_s" "$bin" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  t1=${EPOCHREALTIME/./}
  ms=$(((t1 - t0) / 1000))
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log")
  verdict=ok
  if ((rc != 0)); then
    verdict="FAILED (exit $rc$( ((rc == 124)) && echo ', timed out'))"
    failed=1
  elif grep -q 'needs two RDMA devices\|cannot open\|no RoCEv2 IPv4 GID\|no RDMA device' "$log"; then
    verdict="FAILED (skipped for want of devices)"
    failed=1
  fi
  summary+=("$(printf '%-28s %8d ms  passed %3s  skipped %3s  %s' "$name" "$ms" \
    "${passed:-0}" "${skipped:-0}" "$verdict")")
done
rm -f "$log"
echo "=== hal_real summary"
printf '%s\n' "${summary[@]}"
if ((failed)); then
  echo "hal_real: FAILED"
  exit 1
fi
echo "hal_real: all passed"
