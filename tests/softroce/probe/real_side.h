// tests/softroce/probe/real_side.h: one Ferry engine on a real verbs device
// for the probes of tests/softroce/probe: libibverbs behind a HoldVerbs, the
// TCP control network on 127.0.0.1, the steady clock, OS entropy, the
// production threaded runtime, and one registered buffer. Test code only.
//
// Thread safety: a Side is driven by one test thread; its engine's own
// threads are the production runtime's.
// What must stay true: Shutdown stops the runtime before the engine is
// destroyed and reports what was left (the handle ledger must be empty);
// every wait here is bounded.
#ifndef FERRY_TESTS_SOFTROCE_PROBE_REAL_SIDE_H_
#define FERRY_TESTS_SOFTROCE_PROBE_REAL_SIDE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "engine/engine_impl.h"
#include "ferry/config.h"
#include "hal/control_net.h"
#include "hal/os/os_entropy.h"
#include "hal/os/steady_clock.h"
#include "tests/softroce/probe/counting_net.h"
#include "tests/softroce/probe/hold_verbs.h"

namespace ferry::probe {

// The devices of this machine (/sys/class/infiniband), sorted.
std::vector<std::string> RdmaDevices();

struct Side {
  std::unique_ptr<hal::Verbs> ib;
  std::unique_ptr<HoldVerbs> verbs;
  std::unique_ptr<CountingNet> net;  // the TCP control network, counted
  hal::SteadyClock clock;
  hal::OsEntropy entropy;
  base::Mutations mutations;
  std::unique_ptr<EngineImpl> engine;
  std::vector<uint8_t> buf;  // registered with the engine
  std::atomic<uint64_t>* seq = nullptr;

  uint8_t* at(uint64_t off) { return buf.data() + off; }
  uint64_t addr(uint64_t off) const { return reinterpret_cast<uint64_t>(buf.data()) + off; }
};

// Starts an engine on `device` with `config` (devices replaced by it),
// listening on 127.0.0.1:`port` (0: any), with `buf_bytes` registered.
absl::StatusOr<std::unique_ptr<Side>> StartSide(const std::string& device, EngineConfig config,
                                                size_t buf_bytes, std::atomic<uint64_t>* seq,
                                                const base::Mutations& mutations, uint16_t port = 0,
                                                const MemoryOptions& memory = {});
// Opens the segment of the engine at `address`, waiting up to timeout_ns.
absl::StatusOr<SegmentHandle> Open(Side& side, const std::string& address, uint64_t timeout_ns);
// Submits one request on a fresh batch of one; returns its task.
absl::StatusOr<TaskId> SubmitOne(Side& side, const Request& r);
// Polls the task until terminal or timeout_ns; returns its last status.
TaskStatus WaitTerminal(Side& side, TaskId task, uint64_t timeout_ns);
// WRITEs a pattern (salt) from local [0, len) to the peer at remote_addr,
// then READs it back into local [len, 2 len) and compares: "" when both
// COMPLETED and the bytes match, else what went wrong. Needs 2 len of
// local buffer.
std::string WriteReadBack(Side& side, SegmentHandle seg, uint64_t remote_addr, uint64_t len,
                          uint32_t salt, uint64_t timeout_ns);
// The orderly shutdown of Engine::Shutdown, then the check that no verbs
// object is left. "" when clean, else what is left.
std::string Shutdown(Side& side, uint64_t timeout_ns);

// The reconnect and window probes' engine: one worker, one QP per endpoint,
// a store of one endpoint (a second peer evicts the first), QP timeouts
// rxe under TCG answers in time, qp_retries 6 (7 retries forever on rxe).
EngineConfig OneEndpointConfig();

uint64_t NowNs();
void SleepNs(uint64_t ns);

}  // namespace ferry::probe

#endif  // FERRY_TESTS_SOFTROCE_PROBE_REAL_SIDE_H_
