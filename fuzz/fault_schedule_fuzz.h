// fuzz/fault_schedule_fuzz.h: the body of the fault-schedule fuzz target.
//
// FaultScheduleFuzzOne reads an input as a world seed and a schedule of up
// to kOpsMax operations on the two-host simulated world
// (sim/world/two_engines.h, oracle on at every scheduler step): submit a
// READ or WRITE (some invalid), advance virtual time, inject an RNIC fault
// on a live QP or a device (flush, late CQE, hung QP, failed destroy, failed
// modify, packet loss, port flap, CQ overrun), a stall on a live QP (a hang
// that recovers, a held move to ERR, a duplicated CQE, each for a time), a
// control-network drop, control-network faults for a time (duplicates,
// reorders, jitter; the timer that ends one heals the network, so an
// overlapping later one ends early with it), a device event (DEVICE_FATAL,
// GID change), cancel a task, reuse (poison) a terminal task's buffer,
// restart a host's process (at most twice). Then it drains: every live task must turn terminal
// within bounded virtual time (liveness), and shutdown must leave no verbs object.
//
// What must stay true for any input: the oracle and the simulated RNIC's
// rules hold after every operation, a published status never changes, an
// invalid submit creates nothing, the run is live and leaves nothing. The
// verdict is "" or the first thing that broke, with the operation list up to
// it; libFuzzer's driver (fault_schedule_fuzz.cc) aborts on a non-empty
// verdict, the replay test (tests/engine/sim/fault_schedule_replay_test.cc)
// asserts it is empty for every corpus file, in every build.
//
// Encoding (docs/testing.md): bytes 0-1 the world seed; then 4 bytes per
// operation: opcode % kOpKinds, then three argument bytes (a missing byte
// reads as 0). Deterministic: the same bytes replay the same run.
#ifndef FERRY_FUZZ_FAULT_SCHEDULE_FUZZ_H_
#define FERRY_FUZZ_FAULT_SCHEDULE_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::fuzz {

inline constexpr size_t kOpsMax = 48;

// The verdict: "" when every contract held, else what broke and the
// operations that led there. `ops_run` (may be null) gets the number of
// operations decoded.
std::string FaultScheduleFuzzOne(const uint8_t* data, size_t size, size_t* ops_run = nullptr);

}  // namespace ferry::fuzz

#endif  // FERRY_FUZZ_FAULT_SCHEDULE_FUZZ_H_
