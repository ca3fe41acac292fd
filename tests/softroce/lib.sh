# shellcheck shell=bash disable=SC2034  # variables are for the sourcing test
# lib.sh: shared helpers for the tests of scripts/softroce/run-in-vm (sourced).
#
# Owns: locating the runner, the skip rule, a scratch working directory that is
# removed on exit, the failure/assertion helpers, and run_guest (one VM boot
# running a guest script of this folder).
#
# Must stay true:
# - A test that cannot run here (not root and no cache, so nothing can be
#   installed) exits 77, which meson reports as skipped; any other problem fails.
# - Every test works in its own scratch directory: the VM shares the current
#   directory read-write, so tests never run the runner in the source tree.

set -euo pipefail

RUNNER=${FERRY_SOFTROCE_RUNNER:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/softroce" && pwd -P)/run-in-vm}
TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TEST_NAME=$(basename "$0" .sh)
readonly RUNNER TEST_DIR TEST_NAME

fail() {
  echo "FAIL ($TEST_NAME): $*" >&2
  exit 1
}
note() { echo "[$TEST_NAME] $*" >&2; }

[[ -x $RUNNER ]] || fail "runner not found or not executable: $RUNNER"
if ((EUID != 0)) && [[ ! -e ${FERRY_SOFTROCE_CACHE:-/var/cache/ferry-softroce}/kernel ]]; then
  echo "SKIP ($TEST_NAME): needs root to install packages and cache the kernel" >&2
  exit 77
fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/ferry-softroce-test.XXXXXX")
readonly SCRATCH
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"

# run_vm OUT ERR RUNNER-ARGS...: runs the runner with stdin from /dev/null (as
# in CI), stdout to OUT, stderr to ERR; sets RC and ELAPSED_US. Never fails.
run_vm() {
  local out=$1 err=$2 t0 t1
  shift 2
  t0=${EPOCHREALTIME/./}
  RC=0
  "$RUNNER" "$@" </dev/null >"$out" 2>"$err" || RC=$?
  t1=${EPOCHREALTIME/./}
  ELAPSED_US=$((t1 - t0))
}

# show FILE...: prints the files, for a failure report.
show() {
  local f
  for f in "$@"; do
    echo "--- $f ---" >&2
    tail -n 40 "$f" >&2 || true
  done
}

# prep_us ERR: microseconds the runner spent on preparation (cache lock,
# packages, kernel, vmlinux, initramfs), from its phase lines; the timeout does
# not count these.
prep_us() {
  local total=0 s
  while read -r s; do
    total=$((total + 10#${s%.*} * 1000000 + 10#${s#*.} * 10000))
  done < <(sed -n 's/^run-in-vm: phase \(lock\|packages\|kernel\|vmlinux\|initramfs\): \([0-9]*\.[0-9][0-9]\) s .*/\2/p' "$1")
  echo "$total"
}

# run_guest TIMEOUT_S WHAT DONE_LINE GUEST_SCRIPT ARGS...: runs GUEST_SCRIPT
# (under tests/softroce) in one VM boot, shows its output and the VM's
# phase lines, and fails unless the runner exited 0 and the output holds
# DONE_LINE (a regex the guest prints only when every check passed).
run_guest() {
  local timeout_s=$1 what=$2 done_line=$3 script=$4
  shift 4
  run_vm out err --timeout "$timeout_s" bash "$TEST_DIR/$script" "$@"
  cat out
  grep '^run-in-vm: phase\|^run-in-vm: total' err >&2 || true
  note "VM run: $((ELAPSED_US / 1000)) ms wall (runner exit $RC)"
  if [[ $RC != 0 ]]; then
    show err
    fail "$what in the VM: exit $RC"
  fi
  grep -q "$done_line" out || { show err; fail "the guest script did not finish"; }
  echo "PASS $what in one VM ($((ELAPSED_US / 1000000)) s)"
}
