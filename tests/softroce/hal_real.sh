#!/bin/bash
# hal_real.sh BINARY...: runs every hal_real test binary (passed by meson,
# relative to the build directory) inside ONE Soft-RoCE VM boot, through
# hal_real_guest.sh, and fails if any of them fails. The binaries run directly, not through
# `meson test`, so the outer meson's testlog is never touched.
#
# Must stay true: the VM is bounded (--timeout), each binary is bounded in the
# guest, the whole output reaches the test log, and a binary that skipped for
# want of devices counts as a failure here (the VM always has rxe0 and rxe1).

# meson passes paths relative to the build directory; lib.sh changes into a
# scratch directory, so make them absolute first.
bins=()
for b in "$@"; do
  bins+=("$(realpath -m -- "$b")")
done

. "$(dirname "$0")/lib.sh"

((${#bins[@]} > 0)) || fail "usage: hal_real.sh BINARY..."
for b in "${bins[@]}"; do
  [[ -x $b ]] || fail "not an executable: $b"
done

run_guest "${FERRY_HAL_REAL_VM_TIMEOUT:-2400}" "hal_real" '^hal_real: all passed' \
  hal_real_guest.sh "${bins[@]}"
