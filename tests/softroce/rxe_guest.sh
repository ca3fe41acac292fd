#!/bin/bash
# rxe_guest.sh: runs INSIDE the Soft-RoCE VM (started by rxe_verbs.sh through
# run-in-vm). Checks that rxe0 and rxe1 exist, that ibv_rc_pingpong and
# ib_write_bw work between them, and that the RoCE packets crossed the veth pair
# (sr0/sr1), not lo.
#
# Must stay true: every step is bounded (timeout), the tools' logs stay in the
# working directory for the host to show, exit 0 only if all checks held.

set -euo pipefail

fail() {
  echo "FAIL (in VM): $*" >&2
  exit 1
}
[[ ${FERRY_SOFTROCE:-} == 1 ]] || fail "not inside the Soft-RoCE VM"
gid=$FERRY_RXE_GID_INDEX

devs=$(ibv_devices | awk 'NR > 2 { print $1 }' | sort | tr '\n' ' ')
[[ $devs == "rxe0 rxe1 " ]] || fail "ibv_devices lists '$devs', want rxe0 rxe1"
echo "devices: $devs"
for d in rxe0 rxe1; do
  ibv_devinfo -d "$d" | grep -q 'PORT_ACTIVE' || fail "$d port is not active"
done

counter() { cat "/sys/class/net/$1/statistics/$2"; }
sr0_rx0=$(counter sr0 rx_packets) sr1_rx0=$(counter sr1 rx_packets)
lo_rx0=$(counter lo rx_packets)

# pair NAME SERVER-CMD... -- CLIENT-CMD...: server on rxe0 in the background,
# client on rxe1, retried until the server listens (both exchange their QP
# numbers over TCP on 127.0.0.1 first). Bounded: 40 tries, 120 s per tool.
pair() {
  local name=$1 server=() client=() i spid
  shift
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  timeout 120 "${server[@]}" >"$name.server.log" 2>&1 &
  spid=$!
  for ((i = 0; i < 40; i++)); do
    sleep 0.25
    if timeout 120 "${client[@]}" >"$name.client.log" 2>&1; then
      wait "$spid" || fail "$name: server failed (see $name.server.log)"
      return 0
    fi
    grep -q "Couldn't connect\|Connection refused" "$name.client.log" || break
  done
  kill "$spid" 2>/dev/null || true
  fail "$name: client failed (see $name.client.log)"
}

iters=200
pair pingpong ibv_rc_pingpong -d rxe0 -g "$gid" -n "$iters" -- \
  ibv_rc_pingpong -d rxe1 -g "$gid" -n "$iters" 127.0.0.1
grep -q "$iters iters in" pingpong.client.log || fail "pingpong: no '$iters iters' line"
echo "ibv_rc_pingpong: $(grep 'iters in' pingpong.client.log)"

sr0_rx1=$(counter sr0 rx_packets) sr1_rx1=$(counter sr1 rx_packets)
# Each iteration sends one message each way; each is acknowledged or carries
# the reply: at least $iters packets arrive on each end of the veth pair.
((sr1_rx1 - sr1_rx0 >= iters)) || fail "only $((sr1_rx1 - sr1_rx0)) packets arrived on sr1: RoCE did not cross the veth pair"
((sr0_rx1 - sr0_rx0 >= iters)) || fail "only $((sr0_rx1 - sr0_rx0)) packets arrived on sr0"
echo "veth: sr0 rx +$((sr0_rx1 - sr0_rx0)), sr1 rx +$((sr1_rx1 - sr1_rx0)), lo rx +$(($(counter lo rx_packets) - lo_rx0))"

pair write_bw ib_write_bw -d rxe0 -x "$gid" -s 65536 -n 100 -F --report_gbits -- \
  ib_write_bw -d rxe1 -x "$gid" -s 65536 -n 100 -F --report_gbits 127.0.0.1
line=$(awk '$1 == 65536 { print }' write_bw.client.log)
[[ -n $line ]] || fail "ib_write_bw: no result line for 65536 bytes"
echo "ib_write_bw 64 KiB x 100: $line"
echo "rxe checks passed"
