#!/bin/bash
# ferry_bench_real.sh FERRY_BENCH: Ferry's engine on real verbs. In ONE
# Soft-RoCE VM boot, scripts/softroce/ferry-bench-real runs a ferry-bench
# target on rxe0 and an initiator on rxe1 (--mode real, threaded runtime,
# libibverbs, TCP control over 127.0.0.1) through a sweep of WRITE and READ
# points with --verify. Passes only if every point ran, every batch ended
# COMPLETED, every byte verified and both engines shut down cleanly. In the
# same boot the script measures ferry-bench beside ib_write_bw / ib_read_bw
# (4 KiB, 64 KiB, 1 MiB) and ib_write_lat / ib_read_lat (4 KiB, batch 1),
# and the raw HAL's time to the CQE (bench/hal_probe --latency=1, where it
# is built), median of 3: the test requires those lines (a measurement, never a gate
# on their values: docs/operations.md has the figures).
#
# Must stay true: the VM is bounded (--timeout); the whole output reaches the
# test log; the verdict comes from the bench's own totals line, not only from
# exit codes.

bin=$(realpath -m -- "${1:-}")
. "$(dirname "$0")/lib.sh"

[[ -x $bin ]] || fail "usage: ferry_bench_real.sh FERRY_BENCH_BINARY (not executable: $bin)"
script="$TEST_DIR/../../scripts/softroce/ferry-bench-real"
[[ -x $script ]] || fail "not found: $script"

export FERRY_BENCH_REAL_PERFTEST=${FERRY_BENCH_REAL_PERFTEST:-1}
run_vm out err --timeout "${FERRY_BENCH_REAL_VM_TIMEOUT:-1500}" bash "$script" "$bin"
cat out
grep '^run-in-vm: phase vm\|^run-in-vm: total' err >&2 || true
note "VM run: $((ELAPSED_US / 1000)) ms wall (runner exit $RC)"
if [[ $RC != 0 ]]; then
  show err
  fail "ferry-bench-real in the VM: exit $RC"
fi
line=$(grep '^totals:' out) || fail "no totals line from the initiator"
[[ $line =~ ^totals:\ points=([0-9]+)/([0-9]+)\ completed_batches=([0-9]+)\ failed_batches=0\ verify=on\ verify_errors=0$ ]] ||
  fail "not every batch completed and verified: $line"
[[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] || fail "points not all run: $line"
((BASH_REMATCH[3] > 0)) || fail "no batch completed: $line"
# Both ops ran: at least one WRITE and one READ point, all "ok".
grep -q '^WRITE .* ok$' out || fail "no WRITE point ok"
grep -q '^READ .* ok$' out || fail "no READ point ok"
! grep -q 'FAILED' out || fail "a point FAILED"
grep -q '^initiator shutdown: OK$' out || fail "initiator shutdown not OK"
grep -q '(target shutdown: OK)$' out || fail "target shutdown not OK"
grep -q '^ferry-bench-real: verified run PASS' out || fail "the script did not report PASS"
if [[ $FERRY_BENCH_REAL_PERFTEST != 0 ]]; then
  grep '^ferry-bench-real: \(ratio\|latency\|comparison\)' out >&2
  n_bw=$(grep -c '^ferry-bench-real: ratio \(WRITE\|READ\) [0-9]* ferry=' out || true)
  n_lat=$(grep -c '^ferry-bench-real: latency \(WRITE\|READ\) 4096 p50 ferry=' out || true)
  ((n_bw == 6 && n_lat == 2)) || fail "want 6 bandwidth and 2 latency comparisons, got $n_bw and $n_lat"
  # The raw HAL's latency to the CQE, where bench/hal_probe is built.
  if [[ -x $(dirname "$bin")/../hal_probe/hal_probe ]]; then
    n_cqe=$(grep -c '^ferry-bench-real: latency \(WRITE\|READ\) 4096 to CQE p50 ferry=[0-9.]* hal_probe=[0-9]' out || true)
    ((n_cqe == 2)) || fail "want 2 latency-to-CQE comparisons with hal_probe figures, got $n_cqe"
  fi
  grep -q '^ferry-bench-real: \(ratio\|latency\) .* ratio=[0-9]' out ||
    fail "no comparison produced a number (perftest or ferry-bench broken in the VM)"
fi
if [[ ${FERRY_BENCH_REAL_NOTIFY:-1} != 0 ]]; then
  # Notifications through two engines on rxe: the round trips must have run
  # (a number, not n/a) in every round's median.
  grep '^ferry-bench-real: notify' out >&2
  grep -q '^ferry-bench-real: notify alone round trip p50=[0-9]' out ||
    fail "no notification round trip on rxe (ferry-bench --notify failed in the VM)"
  grep -q '^ferry-bench-real: notify behind a 4 KiB WRITE round trip p50=[0-9]' out ||
    fail "no notification behind a WRITE on rxe"
fi
echo "PASS ferry-bench real on rxe0/rxe1 ($line; $((ELAPSED_US / 1000000)) s)"
