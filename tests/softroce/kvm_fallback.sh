#!/bin/bash
# kvm_fallback.sh: with KVM forced (FERRY_SOFTROCE_ACCEL=kvm), a host whose KVM
# cannot boot the guest (no vmx/svm: QEMU aborts or the guest stalls) still runs
# the command, under TCG after the boot deadline; a host with working KVM runs
# it under KVM. Either way the command runs exactly once.

. "$(dirname "$0")/lib.sh"

export FERRY_SOFTROCE_ACCEL=kvm FERRY_SOFTROCE_BOOT_DEADLINE=10
run_vm out err --timeout 300 sh -c 'echo ran >>runs; echo ok'
[[ $RC == 0 ]] || { show out err; fail "exit $RC"; }
[[ $(cat out) == ok ]] || { show out err; fail "stdout is not 'ok'"; }
[[ $(cat runs) == ran ]] || fail "the command ran $(wc -l <runs) times, want once"
if grep -qwE 'vmx|svm' /proc/cpuinfo; then
  note "host has vmx/svm: $(grep -o 'phase vm ([a-z]*)' err || echo '?')"
else
  grep -q 'falling back to TCG' err || { show err; fail "no vmx/svm here, yet no fallback message"; }
  grep -q 'phase vm (tcg)' err || { show err; fail "the run that succeeded was not under TCG"; }
  note "no vmx/svm: KVM attempt abandoned, TCG ran the command"
fi
echo "PASS kvm_fallback"
