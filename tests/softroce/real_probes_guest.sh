#!/bin/bash
# real_probes_guest.sh PROBE PROBE_MUT: runs INSIDE the Soft-RoCE VM (started
# by real_probes.sh through run-in-vm).
#   1. PROBE (production engine): every test must pass, none may skip: the
#      buffer-safety probe (its table must read 0, 0, 20, 20), reconnect
#      after either side retired its endpoint, an initiator process killed
#      and restarted on the same port, and 5 link down/up cycles under load
#      at two task timeouts.
#   2. PROBE_MUT --gtest_filter=BufferSafetyProbe.* under
#      FERRY_MUTATION=engine_c1_early_publish: it must FAIL, and fail on the
#      first two rows (TIMEOUT while RTS, reused memory touched), each
#      non-zero.
#   3. PROBE_MUT --gtest_filter=Windows.* under
#      FERRY_MUTATION=engine_mw_reuse_across_endpoints: it must FAIL, with
#      rxe refusing the old window rkeys on the new QP (REM_ACCESS_ERR).
# Prints a summary line per run and "real_probes: all passed" only if both
# verdicts hold.
#
# Must stay true: each run is bounded by `timeout` (FERRY_REAL_PROBES_BIN_TIMEOUT,
# default 900 s); both runs happen even after the first fails.

set -uo pipefail

[[ ${FERRY_SOFTROCE:-} == 1 ]] || {
  echo "FAIL (in VM): not inside the Soft-RoCE VM" >&2
  exit 1
}
per_bin_s=${FERRY_REAL_PROBES_BIN_TIMEOUT:-900}
probe=$1 probe_mut=$2
log=$(mktemp /tmp/real_probes.XXXXXX)
failed=0
summary=()

# run NAME CMD...: runs CMD bounded, its output to stdout and $log; sets RC.
run() {
  local name=$1 t0 t1
  shift
  echo "=== $name (devices: $FERRY_RXE_DEVICES)"
  t0=${EPOCHREALTIME/./}
  RC=0
  timeout --kill-after=10 "$per_bin_s" "$@" 2>&1 | tee "$log" || RC=${PIPESTATUS[0]}
  t1=${EPOCHREALTIME/./}
  MS=$(((t1 - t0) / 1000))
}

# row NAME: the total column of the probe table's row NAME in $log.
row() { sed -n "s/^$1 *[0-9]* *[0-9]* *\([0-9]*\)\$/\1/p" "$log" | tail -n 1; }

run "probe, production engine" "$probe"
verdict=ok
if ((RC != 0)); then
  verdict="FAILED (exit $RC)"
elif grep -q '^\[  SKIPPED \]' "$log"; then
  verdict="FAILED (a test skipped)"
elif [[ "$(row 'TIMEOUT seen while the QP was still RTS') $(row 'reused memory overwritten') $(row 'flush handled before TIMEOUT') $(row 'next transfer succeeded')" != "0 0 20 20" ]]; then
  verdict="FAILED (table is not 0 0 20 20)"
fi
[[ $verdict == ok ]] || failed=1
summary+=("$(printf '%-44s %8d ms  %s' "probes, production engine" "$MS" "$verdict")")
# The figures the issue asks for, gathered below the summary.
figures=$(grep -A6 '^probe table' "$log"; grep '^reconnect (\|done rounds=\|killed (SIGKILL)' "$log";
  grep -A9 '^link faults' "$log"; grep '^windows: ' "$log")

run "probe, engine_c1_early_publish" env FERRY_MUTATION=engine_c1_early_publish \
  "$probe_mut" --gtest_filter='BufferSafetyProbe.*'
verdict="ok (failed as it must)"
if ((RC == 0)); then
  verdict="FAILED (the probe passed under the switch)"
elif ! grep -q 'C1 broken on real verbs: [1-9][0-9]* of 20 cases saw TIMEOUT while the QP was still RTS' "$log"; then
  verdict="FAILED (no 'TIMEOUT while the QP was still RTS' failure)"
elif ! grep -q 'C1 broken on real verbs: the RNIC touched reused memory after TIMEOUT in [1-9][0-9]* of 20 cases' "$log"; then
  verdict="FAILED (no 'touched reused memory' failure)"
fi
[[ $verdict == ok* ]] || failed=1
summary+=("$(printf '%-44s %8d ms  %s' "probe, engine_c1_early_publish" "$MS" "$verdict")")

run "probe, engine_mw_reuse_across_endpoints" env FERRY_MUTATION=engine_mw_reuse_across_endpoints \
  "$probe_mut" --gtest_filter='Windows.*'
verdict="ok (failed as it must)"
if ((RC == 0)); then
  verdict="FAILED (the probe passed under the switch)"
elif ! grep -q '^windows: after the target retired .* I1 errors: .*REM_ACCESS_ERR=[1-9]' "$log"; then
  verdict="FAILED (rxe did not refuse the old window rkeys with REM_ACCESS_ERR)"
fi
[[ $verdict == ok* ]] || failed=1
summary+=("$(printf '%-44s %8d ms  %s' "probe, engine_mw_reuse_across_endpoints" "$MS" "$verdict")")
figures+=$'\n'"$(grep '^windows: ' "$log" | sed 's/^/(mutated) /')"

rm -f "$log"
echo "=== real_probes figures (production engine)"
echo "$figures"
echo "=== real_probes summary"
printf '%s\n' "${summary[@]}"
if ((failed)); then
  echo "real_probes: FAILED"
  exit 1
fi
echo "real_probes: all passed"
