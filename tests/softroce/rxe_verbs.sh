#!/bin/bash
# rxe_verbs.sh: inside the VM ibv_devices lists rxe0 and rxe1, ibv_rc_pingpong
# and ib_write_bw work between them over the veth pair (rxe_guest.sh checks,
# in one VM boot).

. "$(dirname "$0")/lib.sh"

run_vm out err --timeout 600 bash "$TEST_DIR/rxe_guest.sh"
cat out >&2
if [[ $RC != 0 ]]; then
  show err ./*.log
  fail "rxe checks in the VM: exit $RC"
fi
grep -q 'rxe checks passed' out || { show out err; fail "the guest script did not finish"; }
echo "PASS rxe_verbs"
