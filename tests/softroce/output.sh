#!/bin/bash
# output.sh: the command's output leaves the VM whole, on the right stream, as
# it is produced; files it writes in the current directory reach the host.
#
# Must stay true: checksums are compared on the host against data the host
# made itself; stdout and stderr are checked separately (the runner's own
# phase lines are silenced with FERRY_SOFTROCE_QUIET=1).

. "$(dirname "$0")/lib.sh"
export FERRY_SOFTROCE_QUIET=1

# 1. 20000 numbered lines on stdout, one line on stderr, a file written in the
#    working directory.
seq 1 20000 >expected
run_vm out err --timeout 300 sh -c 'seq 1 20000; echo to-stderr >&2; echo made >made-in-vm'
[[ $RC == 0 ]] || { show out err; fail "seq run: exit $RC"; }
want=$(sha256sum <expected) got=$(sha256sum <out)
[[ $got == "$want" ]] || fail "stdout of seq 1 20000 differs: $(wc -l <out) lines, last '$(tail -n 1 out)'"
[[ $(cat err) == to-stderr ]] || { show err; fail "stderr is not exactly 'to-stderr'"; }
[[ $(cat made-in-vm 2>/dev/null) == made ]] || fail "the file written in the VM's working directory is not on the host"
note "20000 lines: checksum matches; stderr separate; file written back"

# 2. 8 MiB of random bytes, after a first line and a 6 s pause: the first line
#    must reach us while the command still runs (streaming), the bytes whole.
head -c $((8 << 20)) /dev/urandom >blob
: >arrivals
run_vm_streaming() {
  RC=0
  "$RUNNER" --timeout 300 sh -c 'echo first; sleep 6; cat blob' </dev/null 2>err |
    {
      IFS= read -r first
      echo "$first ${EPOCHREALTIME/./}" >>arrivals
      cat >rest
      echo "end ${EPOCHREALTIME/./}" >>arrivals
    } || RC=$?
}
run_vm_streaming
[[ $RC == 0 ]] || { show err; fail "blob run: exit $RC"; }
read -r first t_first <<<"$(sed -n 1p arrivals)"
read -r _ t_end <<<"$(sed -n 2p arrivals)"
[[ $first == first ]] || fail "first line was '$first'"
((t_end - t_first >= 4000000)) ||
  fail "the first line arrived only $(((t_end - t_first) / 1000)) ms before the end: output is not streamed"
[[ $(sha256sum <rest) == "$(sha256sum <blob)" ]] || fail "8 MiB blob differs ($(wc -c <rest) bytes arrived)"
note "first line $(((t_end - t_first) / 1000)) ms before the end; 8 MiB blob whole"
echo "PASS output"
