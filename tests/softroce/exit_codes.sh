#!/bin/bash
# exit_codes.sh: run-in-vm returns the command's exit code (0, 3, 77, and 127
# for a command that does not exist), rejects bad usage before booting, and
# boots once more when QEMU dies before the guest reports or a TCG guest does
# not report within its boot deadline.
#
# Must stay true: each case boots its own VM (the code must cross the VM
# boundary, not come from the host); 77 must arrive as 77 although meson would
# read it as "skip" if we passed it on, so this script compares and exits 0.

. "$(dirname "$0")/lib.sh"

# Usage errors: no VM needed.
run_vm out err
[[ $RC == 2 ]] || { show err; fail "no command: want exit 2, got $RC"; }
run_vm out err --timeout abc true
[[ $RC == 125 ]] || { show err; fail "--timeout abc: want exit 125, got $RC"; }
grep -q 'positive whole number' err || { show err; fail "--timeout abc: no clear message"; }

for want in 0 3 77; do
  run_vm out err --timeout 300 sh -c "exit $want"
  [[ $RC == "$want" ]] || { show out err; fail "sh -c 'exit $want': got $RC"; }
  note "exit $want -> $RC ($((ELAPSED_US / 1000)) ms)"
done

run_vm out err --timeout 300 -- no-such-command-ferry --flag
[[ $RC == 127 ]] || { show out err; fail "missing command: want 127, got $RC"; }
grep -q 'no-such-command-ferry' err || { show err; fail "missing command: the VM's error message did not arrive"; }
note "missing command -> 127"
# A QEMU that dies before the guest reports is booted once more (the
# command never started, so it still runs exactly once); a second such end
# is the runner's failure, 125.
# TCG forced: the switch acts on TCG boots only.
export FERRY_SOFTROCE_ACCEL=tcg FERRY_SOFTROCE_TEST_QEMU_FAILS=1
run_vm out err --timeout 300 sh -c 'echo ran >>runs; exit 5'
[[ $RC == 5 ]] || { show out err; fail "QEMU failing once: want the command's 5, got $RC"; }
[[ $(grep -c 'booting once more' err) == 1 ]] || { show err; fail "QEMU failing once: no single 'booting once more' line"; }
[[ $(wc -l <runs) == 1 ]] || fail "QEMU failing once: the command ran $(wc -l <runs) times, want 1"
rm -f runs
export FERRY_SOFTROCE_TEST_QEMU_FAILS=2
run_vm out err --timeout 300 sh -c 'echo ran >>runs; exit 5'
[[ $RC == 125 ]] || { show out err; fail "QEMU failing twice: want 125, got $RC"; }
grep -q 'ended without reporting (qemu_failed)' err || { show err; fail "QEMU failing twice: no qemu_failed message"; }
[[ ! -e runs ]] || fail "QEMU failing twice: the command ran"
unset FERRY_SOFTROCE_ACCEL FERRY_SOFTROCE_TEST_QEMU_FAILS
note "QEMU dying at boot: once -> booted again, command ran once; twice -> 125"
# A TCG guest that never reports within its boot deadline (its CPUs never
# started) is booted once more; the command still runs exactly once. (A
# real TCG boot takes 5-15 s here: the deadline must leave it room.)
export FERRY_SOFTROCE_ACCEL=tcg FERRY_SOFTROCE_TEST_BOOT_HANGS=1 FERRY_SOFTROCE_TCG_BOOT_DEADLINE=30
rm -f runs
run_vm out err --timeout 300 sh -c 'echo ran >>runs; exit 6'
[[ $RC == 6 ]] || { show out err; fail "boot hanging once: want the command's 6, got $RC"; }
[[ $(grep -c 'did not report booted within 30 s; booting once more' err) == 1 ]] ||
  { show err; fail "boot hanging once: no single 'did not report booted ... booting once more' line"; }
[[ $(wc -l <runs) == 1 ]] || fail "boot hanging once: the command ran $(wc -l <runs) times, want 1"
rm -f runs
unset FERRY_SOFTROCE_ACCEL FERRY_SOFTROCE_TEST_BOOT_HANGS FERRY_SOFTROCE_TCG_BOOT_DEADLINE
note "boot hanging once -> booted again after the deadline, command ran once"
echo "PASS exit_codes"
