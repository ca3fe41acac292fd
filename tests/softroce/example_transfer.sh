#!/bin/bash
# example_transfer.sh BUILD_DIR SOURCE_DIR: the user's example on real verbs.
# Installs Ferry into a scratch root and builds examples/transfer.cc out of
# tree with pkg-config only (tests/install/install_test.sh), then, in ONE
# Soft-RoCE VM boot, runs `transfer target` on rxe0 and `transfer initiator`
# on rxe1 against the installed libferry (TCP control over 127.0.0.1).
# Passes only if the initiator's READ and WRITE verified ("transfer: WRITE
# ok, READ ok") and both sides shut down OK.
#
# Must stay true: the VM and each process are bounded; the whole output
# reaches the test log.
build=$(realpath -m -- "${1:-}")
src=$(realpath -m -- "${2:-}")
. "$(dirname "$0")/lib.sh"

[[ -f $build/build.ninja ]] || fail "usage: example_transfer.sh BUILD_DIR SOURCE_DIR"
INSTALL_TEST_OUT="$SCRATCH/stage" bash "$src/tests/install/install_test.sh" "$build" "$src" \
  >install.log 2>&1 || { show install.log; fail "install and out-of-tree build"; }
note "installed and built out of tree: $(grep '^examples:' install.log)"
cat >guest.sh <<'GUEST'
#!/bin/bash
set -u
bin=$1; export LD_LIBRARY_PATH=$2
log=$(mktemp -d /tmp/example.XXXXXX)
timeout 300 "$bin" target 127.0.0.1:7471 rxe0 >"$log/target" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q 'listening on' "$log/target" && break; sleep 0.1; done
timeout 300 "$bin" initiator 127.0.0.1:7472 127.0.0.1:7471 rxe1 >"$log/initiator" 2>&1
rc=$?
kill -TERM "$pid"; wait "$pid"; trc=$?
echo "--- target (exit $trc)"; cat "$log/target"
echo "--- initiator (exit $rc)"; cat "$log/initiator"
((rc == 0 && trc == 0))
GUEST
run_vm out err --timeout "${FERRY_EXAMPLE_VM_TIMEOUT:-900}" bash "$SCRATCH/guest.sh" \
  "$SCRATCH/stage/transfer" "$SCRATCH/stage/lib"
cat out
note "VM run: $((ELAPSED_US / 1000)) ms wall (runner exit $RC)"
if [[ $RC != 0 ]]; then
  show err
  fail "the example in the VM: exit $RC"
fi
grep -q '^transfer: WRITE ok, READ ok' out || fail "the initiator did not verify its READ and WRITE"
grep -q '^transfer target: shutdown OK$' out || fail "the target did not shut down OK"
echo "PASS examples/transfer on rxe0/rxe1 against the installed libferry"
