#!/bin/bash
# real_probes.sh PROBE PROBE_MUT: Ferry's engine on real verbs where the
# contract matters (issue 10), in ONE Soft-RoCE VM boot through
# real_probes_guest.sh: the buffer-safety probe on the production engine
# (its table must read 0, 0, 20, 20), the same probe under
# FERRY_MUTATION=engine_c1_early_publish (it must fail, naming the first two
# rows), with the reconnect, restart and link-fault probes in the first run
# (tests/softroce/probe).
#
# Must stay true: the VM is bounded (--timeout), each binary is bounded in
# the guest, the whole output reaches the test log; a probe that skipped for
# want of devices counts as a failure here (the VM has rxe0 and rxe1).

bins=()
for b in "$@"; do
  bins+=("$(realpath -m -- "$b")")
done

. "$(dirname "$0")/lib.sh"

((${#bins[@]} == 2)) || fail "usage: real_probes.sh PROBE PROBE_MUT"
for b in "${bins[@]}"; do
  [[ -x $b ]] || fail "not an executable: $b"
done

run_guest "${FERRY_REAL_PROBES_VM_TIMEOUT:-1500}" "real probes" '^real_probes: all passed' \
  real_probes_guest.sh "${bins[@]}"
