#!/bin/bash
# timeout.sh: a hung command is killed at the timeout: exit 124, a clear
# message, no QEMU left behind, and neither early nor much late.
#
# Must stay true: the bound is measured without the runner's one-time
# preparation (packages, kernel, initramfs), which the timeout does not cover.

. "$(dirname "$0")/lib.sh"

readonly LIMIT_S=30 SLACK_S=20
run_vm out err --timeout "$LIMIT_S" sh -c 'echo started; sleep 100000'
[[ $RC == 124 ]] || { show out err; fail "want exit 124, got $RC"; }
grep -q 'TIMEOUT' err || { show err; fail "no TIMEOUT message on stderr"; }
vm_us=$((ELAPSED_US - $(prep_us err)))
note "exit 124 after $((ELAPSED_US / 1000)) ms in all, $((vm_us / 1000)) ms without preparation"
((vm_us >= LIMIT_S * 1000000)) || fail "killed early: $((vm_us / 1000)) ms < $LIMIT_S s"
((vm_us <= (LIMIT_S + SLACK_S) * 1000000)) || fail "killed late: $((vm_us / 1000)) ms > $LIMIT_S + $SLACK_S s"
# The VM's QEMU shares this scratch folder: none may still run.
if pgrep -f -- "path=$SCRATCH," >/dev/null; then
  fail "a QEMU process for $SCRATCH is still running"
fi
echo "PASS timeout"
