// tests/engine/sim/two_engines.h: the two-engine simulated world for the sim
// scenario tests. The world itself lives in sim/world/two_engines.h (shared
// with ferry-sim); this header only brings its names into the tests'
// namespace so scenarios keep writing TwoEngines, ScenarioConfig, kBufBytes.
//
// Thread safety: none (single-threaded simulation).
// What must stay true: test binaries link simworld_mut_dep (the *_mut
// variant), never simworld_dep.
#ifndef FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
#define FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_

#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/cq_quota.h"
#include "engine/endpoint.h"
#include "engine/inspect.h"
#include "engine/owner.h"
#include "sim/world/two_engines.h"

namespace ferry::engine::testing {

using simworld::Fill;
using simworld::Holds;
using simworld::HostState;
using simworld::kBufBytes;
using simworld::LifecycleRecord;
using simworld::MakeReq;
using simworld::ScenarioConfig;
using simworld::SlotActor;
using simworld::TwoEngines;

// Index of the first lifecycle record of `kind` (on `key` unless empty) at
// or after `from`, or -1.
inline int64_t Find(const std::vector<LifecycleRecord>& r, std::string_view kind,
                    std::string_view key, size_t from = 0) {
  for (size_t i = from; i < r.size(); ++i)
    if (r[i].kind == kind && (key.empty() || r[i].key == key)) return static_cast<int64_t>(i);
  return -1;
}

// A device fault of `kind` (DEVICE_FATAL, GID change, port flap...) on
// host h's `device`, now (a scripted fault of the fabric).
inline absl::Status InjectDeviceFault(TwoEngines& w, uint32_t h, const std::string& device,
                                      sim::FaultKind kind) {
  sim::ScriptedFault f;
  f.at_ns = w.clock().NowNs();
  f.kind = kind;
  f.target.kind = sim::TargetKind::kDevice;
  f.target.host = h;
  f.target.device = device;
  return w.fabric().Inject(f);
}
inline absl::Status InjectDeviceFatal(TwoEngines& w, uint32_t h, const std::string& device) {
  return InjectDeviceFault(w, h, device, sim::FaultKind::kDeviceFatal);
}

// A scripted fault of `kind` on CQ `ordinal` (1-based, in creation order)
// of host h's `device`, now: cq_overrun, or resource_fail (the device's
// next ibv_create_cq fails).
inline absl::Status InjectCqFault(TwoEngines& w, sim::FaultKind kind, uint32_t h,
                                  const std::string& device, uint32_t ordinal) {
  sim::ScriptedFault f;
  f.at_ns = w.clock().NowNs();
  f.kind = kind;
  f.target = sim::FaultTarget{sim::TargetKind::kCq, h, device, ordinal};
  return w.fabric().Inject(f);
}

// Submits one request from host `from` and runs until it is terminal (or
// time_max_ns). Returns its status and id (INVALID if the submit failed).
inline std::pair<TaskStatus, TaskId> Run1(TwoEngines& w, uint32_t from, const Request& r,
                                          uint64_t time_max_ns = 5'000'000'000) {
  auto batch = w.host(from).engine->AllocateBatch(8);
  FERRY_CHECK(batch.ok());
  SubmitResult sr = w.Submit(from, *batch, {r});
  if (!sr.status.ok()) return {TaskStatus::kInvalid, TaskId{}};
  TaskStatus st = TaskStatus::kPending;
  w.RunUntil(
      [&] {
        st = *w.host(from).engine->GetTaskStatus(sr.tasks[0]);
        return IsTerminal(st);
      },
      time_max_ns);
  return {st, sr.tasks[0]};
}

// Host 0 opens host 1's segment and one 16 KiB WRITE on it completes (an
// endpoint READY on host 0's first rail). The segment, or what failed.
inline absl::StatusOr<SegmentHandle> OpenAndWarmUp(TwoEngines& w) {
  auto seg = w.Open(0, 1);
  if (!seg.ok()) return seg.status();
  if (Run1(w, 0, MakeReq(w, 0, *seg, OpKind::kWrite, 0, 0, 16 * 1024)).first !=
      TaskStatus::kCompleted)
    return absl::InternalError("warm-up");
  return seg;
}

// The end of every scenario: the oracle and the fabric's violations, then
// an orderly shutdown with the C9 leak check, then the oracle again.
inline std::string Finish(TwoEngines& w) {
  if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle: " + v;
  if (std::string l = w.ShutdownAndCheckLeaks(); !l.empty()) return "leak: " + l;
  if (std::string v = w.OracleAndViolations(); !v.empty()) return "oracle at shutdown: " + v;
  return "";
}

}  // namespace ferry::engine::testing

#endif  // FERRY_TESTS_ENGINE_SIM_TWO_ENGINES_H_
