#!/bin/bash
# exit_codes.sh: run-in-vm returns the command's exit code (0, 3, 77, and 127
# for a command that does not exist), and rejects bad usage before booting.
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
echo "PASS exit_codes"
