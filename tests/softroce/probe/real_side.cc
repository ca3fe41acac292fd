// tests/softroce/probe/real_side.cc: Side (real_side.h).
#include "tests/softroce/probe/real_side.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/handles.h"
#include "engine/runtime_threads.h"
#include "hal/ibverbs/ibverbs.h"
#include "hal/tcp/tcp_control_net.h"

namespace ferry::probe {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void SleepNs(uint64_t ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

std::vector<std::string> RdmaDevices() {
  std::vector<std::string> out;
  std::error_code ec;
  if (!std::filesystem::exists("/sys/class/infiniband", ec)) return out;
  for (const auto& d : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
    out.push_back(d.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::unique_ptr<Side>> StartSide(const std::string& device, EngineConfig config,
                                                size_t buf_bytes, std::atomic<uint64_t>* seq,
                                                const base::Mutations& mutations, uint16_t port,
                                                const MemoryOptions& memory) {
  auto s = std::make_unique<Side>();
  s->seq = seq;
  s->mutations = mutations;
  s->ib = hal::NewIbverbsVerbs();
  s->verbs = std::make_unique<HoldVerbs>(s->ib.get(), seq);
  auto net = hal::NewTcpControlNet(absl::StrCat("127.0.0.1:", port));
  if (!net.ok()) return net.status();
  s->net = std::make_unique<CountingNet>(std::move(*net));
  config.devices = {device};
  EngineEnv env{s->verbs.get(), s->net.get(), &s->clock, &s->entropy};
  auto e = EngineImpl::Create(config, env, &s->mutations, nullptr);
  if (!e.ok()) return e.status();
  s->engine = std::move(*e);
  s->buf.assign(buf_bytes, 0);
  if (absl::Status r = s->engine->RegisterMemory(s->buf.data(), s->buf.size(), memory); !r.ok())
    return r;
  engine::StartThreadedRuntime(s->engine.get());
  return s;
}

absl::StatusOr<SegmentHandle> Open(Side& side, const std::string& address, uint64_t timeout_ns) {
  auto tok = side.engine->OpenSegmentAsync(address);
  if (!tok.ok()) return tok.status();
  const uint64_t end = NowNs() + timeout_ns;
  engine::RuntimeWaiter waiter(side.engine.get());
  for (;;) {
    const uint64_t seen = waiter.Generation();
    auto p = side.engine->PollOpenSegment(*tok);
    if (!p.ok()) return p.status();
    if (p->has_value()) return **p;
    const uint64_t now = NowNs();
    if (now >= end) return absl::DeadlineExceededError(absl::StrCat("open ", address));
    waiter.Wait(seen, std::min<uint64_t>(end - now, 10'000'000));
  }
}

absl::StatusOr<TaskId> SubmitOne(Side& side, const Request& r) {
  auto b = side.engine->AllocateBatch(1);
  if (!b.ok()) return b.status();
  SubmitResult res = side.engine->Submit(*b, absl::MakeConstSpan(&r, 1));
  if (!res.status.ok()) return res.status;
  return res.tasks.at(0);
}

TaskStatus WaitTerminal(Side& side, TaskId task, uint64_t timeout_ns) {
  const uint64_t end = NowNs() + timeout_ns;
  TaskStatus st = TaskStatus::kPending;
  for (;;) {
    auto s = side.engine->GetTaskStatus(task);
    st = s.ok() ? *s : TaskStatus::kInvalid;
    if (IsTerminal(st) || NowNs() >= end) return st;
    SleepNs(200'000);
  }
}

std::string WriteReadBack(Side& side, SegmentHandle seg, uint64_t remote_addr, uint64_t len,
                          uint32_t salt, uint64_t timeout_ns) {
  if (2 * len > side.buf.size()) return "buffer too small";
  for (uint64_t k = 0; k < len; ++k) side.buf[k] = static_cast<uint8_t>(salt * 29 + k * 13 + 5);
  std::fill(side.buf.begin() + len, side.buf.begin() + 2 * len, 0);
  const Request reqs[2] = {{OpKind::kWrite, side.addr(0), len, seg, remote_addr},
                           {OpKind::kRead, side.addr(len), len, seg, remote_addr}};
  for (const Request& r : reqs) {
    auto t = SubmitOne(side, r);
    if (!t.ok())
      return absl::StrCat(std::string(OpKindName(r.opcode)), " submit: ", t.status().ToString());
    const TaskStatus st = WaitTerminal(side, *t, timeout_ns);
    if (st != TaskStatus::kCompleted)
      return absl::StrCat(std::string(OpKindName(r.opcode)), " ended ",
                          std::string(TaskStatusName(st)));
  }
  if (!std::equal(side.buf.begin(), side.buf.begin() + len, side.buf.begin() + len))
    return "read-back differs from what was written";
  return "";
}

EngineConfig OneEndpointConfig() {
  EngineConfig c;
  c.workers = 1;
  c.qps_per_endpoint = 1;
  c.endpoint_store_capacity = 1;
  c.qp_timeout_exp = 16;  // 268 ms: rxe under TCG answers slowly
  c.qp_retries = 6;       // 7 = retry forever on rxe (config.h)
  c.slice_timeout_ns = 30'000'000'000;
  return c;
}

std::string Shutdown(Side& side, uint64_t timeout_ns) {
  EngineImpl* e = side.engine.get();
  e->BeginShutdown();
  const uint64_t end = NowNs() + timeout_ns;
  bool drained = false;
  while (!(drained = engine::RuntimeWorkersDrained(e)) && NowNs() < end) SleepNs(1'000'000);
  engine::StopThreadedRuntime(e);
  std::string out;
  if (!drained) out = "endpoints still retiring at the shutdown deadline; ";
  if (absl::Status s = e->FinishShutdown(); !s.ok()) absl::StrAppend(&out, s.ToString(), "; ");
  if (e->ledger().LiveTotal() != 0) absl::StrAppend(&out, "left: ", e->ledger().ToString());
  return out;
}

}  // namespace ferry::probe
