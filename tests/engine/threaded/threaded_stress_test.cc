// tests/engine/threaded/threaded_stress_test.cc: the production runtime
// (engine/runtime_threads.*) under load (issue 4, "Must show": a threaded
// stress test). Two engines, each run by ThreadedRuntime (a thread per
// worker, a listener thread, an async-event thread), on one simulated RNIC
// fabric and control network made thread-safe by LockedWorld (a mutex
// around every port call plus a pump thread stepping the world in virtual
// time, see locked_world.h). Four user threads (two per engine) submit
// batches of READs and WRITEs concurrently.
//
// What it asserts: every task ends COMPLETED and its bytes verify (WRITE:
// the peer's range equals what was sent; READ: the local range equals the
// peer's pattern); with every task terminal and the runtime stopped, every
// worker's CQ quota is 0 while its endpoints are still up; after an orderly
// shutdown (second runtime, to show Start/Stop are repeatable) the engines
// hold no verbs object (ledger) and the fabric reports no live object of
// any kind (C9); the fabric recorded no violation. Run it under
// ThreadSanitizer (build-tsan) for the data-race part of the claim.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine_impl.h"
#include "engine/runtime_threads.h"
#include "gtest/gtest.h"
#include "sim/prng.h"
#include "sim/threaded/locked_world.h"

namespace ferry::engine::testing {
namespace {

using sim::LockedWorld;

constexpr uint32_t kUserThreads = 4;  // two per engine
constexpr uint64_t kAreaBytes = 256 * 1024;
// Per user thread, in each engine's buffer: [read area | write area].
constexpr uint64_t kBufBytes = kUserThreads * 2 * kAreaBytes;
constexpr uint64_t kWaitNs = 60'000'000'000;  // virtual; far beyond the test's need

EngineConfig StressConfig(OwnerPollMode mode = OwnerPollMode::kAdaptive,
                          bool user_thread_steps = true) {
  EngineConfig c;
  c.owner_poll_mode = mode;
  c.user_thread_steps = user_thread_steps;
  c.devices = {"sim0"};
  c.workers = 2;
  c.qps_per_endpoint = 2;
  c.wr_depth = 16;
  c.cqe_limit = 1024;
  c.slice_size_bytes = 8 * 1024;
  c.request_bytes_max = 64 * 1024 * 1024;
  // Virtual time runs in jumps between fabric events; keep every timer far
  // away so only real progress decides the outcome.
  c.slice_timeout_ns = 3'600'000'000'000;
  c.handshake_timeout_ns = 50'000'000;
  c.handshake_retries = 20;
  c.drain_timeout_ns = 10'000'000;
  c.destroy_backoff_ns_min = 10'000;
  c.destroy_backoff_ns_max = 1'000'000;
  return c;
}

uint8_t Pattern(uint64_t salt, uint64_t off) {
  return static_cast<uint8_t>(((off * 2654435761u) >> 7) ^ (salt * 131) ^ (off >> 9));
}

struct Host {
  std::string addr;
  std::unique_ptr<hal::Verbs> verbs;
  std::unique_ptr<hal::ControlNet> net;
  std::unique_ptr<hal::Entropy> entropy;
  std::unique_ptr<EngineImpl> engine;
  std::vector<uint8_t> buf;
  SegmentHandle peer;  // the other host's segment
};

uint8_t* ReadArea(Host& h, uint32_t t) { return h.buf.data() + uint64_t{t} * 2 * kAreaBytes; }
uint8_t* WriteArea(Host& h, uint32_t t) { return ReadArea(h, t) + kAreaBytes; }
uint64_t Addr(const uint8_t* p) { return reinterpret_cast<uint64_t>(p); }

// Waits (real time, bounded by `rounds_max` yields) until every task of the
// batch is terminal. Returns its status.
// Waits as Engine::WaitBatch does: on the runtime's progress generation
// (RuntimeWaiter), read before the status, 1 ms of real time per round.
absl::StatusOr<BatchStatus> Wait(EngineImpl& e, BatchId b, hal::Clock* clock) {
  const uint64_t end = clock->NowNs() + kWaitNs;
  RuntimeWaiter waiter(&e);
  for (uint64_t round = 0; round < 20'000'000; ++round) {
    const uint64_t seen = waiter.Generation();
    auto s = e.GetBatchStatus(b);
    if (!s.ok() || s->overall != TaskStatus::kPending) return s;
    if (clock->NowNs() > end) return s;
    waiter.Wait(seen, 1'000'000);
  }
  return absl::DeadlineExceededError("batch never finished");
}

// One user thread: `iterations` batches of `batch` requests on engine
// `me` targeting the other host. Returns "" or the first failure.
// With `notify`, every batch carries a notification "t<t> i<it>" to the
// peer (checked delivered once by the caller).
std::string UserThread(Host& me, Host& peer, uint32_t t, uint32_t iterations, uint32_t batch,
                       hal::Clock* clock, std::atomic<uint64_t>* tasks_done, bool notify = false) {
  sim::Prng prng(1000 + t);
  EngineImpl& e = *me.engine;
  // Thread t's local range: its read area for READ destinations, its write
  // area for WRITE sources; remote: its areas in the peer.
  for (uint32_t it = 0; it < iterations; ++it) {
    auto b = e.AllocateBatch(batch + (notify ? 1 : 0));
    if (!b.ok()) return "AllocateBatch: " + b.status().ToString();
    std::vector<Request> reqs;
    struct Check {
      OpKind op;
      uint64_t off;
      uint64_t len;
      uint64_t salt;
    };
    std::vector<Check> checks;
    // Non-overlapping pieces of the areas, one per request.
    const uint64_t piece = kAreaBytes / batch;
    for (uint32_t i = 0; i < batch; ++i) {
      const OpKind op = prng.Below(2) == 0 ? OpKind::kRead : OpKind::kWrite;
      const uint64_t len = 1 + prng.Below(piece);
      const uint64_t off = uint64_t{i} * piece + prng.Below(piece - len + 1);
      const uint64_t salt = (uint64_t{t} << 40) | (uint64_t{it} << 20) | i;
      Request r;
      r.opcode = op;
      r.length_bytes = len;
      r.segment = me.peer;
      if (op == OpKind::kWrite) {
        uint8_t* src = WriteArea(me, t) + off;
        for (uint64_t k = 0; k < len; ++k) src[k] = Pattern(salt, k);
        r.local_addr = Addr(src);
        r.remote_addr = Addr(WriteArea(peer, t) + off);
      } else {
        uint8_t* dst = ReadArea(me, t) + off;
        std::memset(dst, 0, len);
        r.local_addr = Addr(dst);
        r.remote_addr = Addr(ReadArea(peer, t) + off);
      }
      reqs.push_back(r);
      checks.push_back(Check{op, off, len, salt});
    }
    const std::string text = absl::StrCat("t", t, " i", it);
    const EngineImpl::NotifyRequest note{me.peer, text};
    SubmitResult sr = e.Submit(*b, reqs, notify ? &note : nullptr);
    if (!sr.status.ok()) return "Submit: " + sr.status.ToString();
    auto st = Wait(e, *b, clock);
    if (!st.ok()) return "Wait: " + st.status().ToString();
    if (st->overall != TaskStatus::kCompleted)
      return absl::StrCat("thread ", t, " batch ", it, " ended ",
                          std::string(TaskStatusName(st->overall)));
    for (const Check& c : checks) {
      if (c.op == OpKind::kWrite) {
        const uint8_t* dst = WriteArea(peer, t) + c.off;
        for (uint64_t k = 0; k < c.len; ++k)
          if (dst[k] != Pattern(c.salt, k))
            return absl::StrCat("thread ", t, " WRITE byte ", k, " of ", c.len, " wrong");
      } else {
        const uint8_t* dst = ReadArea(me, t) + c.off;
        const uint8_t* src = ReadArea(peer, t) + c.off;
        if (std::memcmp(dst, src, c.len) != 0)
          return absl::StrCat("thread ", t, " READ of ", c.len, " bytes wrong");
      }
      tasks_done->fetch_add(1);
    }
    if (absl::Status s = e.FreeBatch(*b); !s.ok()) return "FreeBatch: " + s.ToString();
  }
  return "";
}

// Both hosts' engines on `world` with `config`, their buffers registered,
// the world's pump and each engine's threaded runtime started, and each
// host's segment opened by the other (through the blocking-style loop).
// A failure is a fatal gtest failure (the caller checks HasFatalFailure).
void BringUp(LockedWorld& world, const EngineConfig& config, Host (&hosts)[2]) {
  for (uint32_t h = 0; h < 2; ++h) {
    Host& hs = hosts[h];
    hs.addr = absl::StrCat("h", h, ":1000");
    hs.buf.resize(kBufBytes);
    for (uint64_t k = 0; k < kBufBytes; ++k) hs.buf[k] = Pattern(h + 77, k);
    hs.verbs = world.NewVerbs(h);
    auto n = world.Bind(hs.addr);
    ASSERT_TRUE(n.ok()) << n.status();
    hs.net = std::move(*n);
    hs.entropy = world.NewEntropy();
    EngineEnv env{hs.verbs.get(), hs.net.get(), world.clock(), hs.entropy.get()};
    auto e = EngineImpl::Create(config, env, nullptr, nullptr);
    ASSERT_TRUE(e.ok()) << e.status();
    hs.engine = std::move(*e);
    ASSERT_TRUE(hs.engine->RegisterMemory(hs.buf.data(), hs.buf.size()).ok());
  }
  world.StartPump();
  for (Host& hs : hosts) StartThreadedRuntime(hs.engine.get());
  for (uint32_t h = 0; h < 2; ++h) {
    EngineImpl& e = *hosts[h].engine;
    auto tok = e.OpenSegmentAsync(hosts[1 - h].addr);
    ASSERT_TRUE(tok.ok());
    std::optional<SegmentHandle> seg;
    RuntimeWaiter waiter(&e);
    for (int i = 0; i < 2'000'000 && !seg.has_value(); ++i) {
      const uint64_t seen = waiter.Generation();
      auto p = e.PollOpenSegment(*tok);
      ASSERT_TRUE(p.ok()) << p.status();
      seg = *p;
      if (!seg) waiter.Wait(seen, 1'000'000);
    }
    ASSERT_TRUE(seg.has_value());
    hosts[h].peer = *seg;
  }
}

// Orderly shutdown on a fresh runtime (Start/Stop are repeatable): every
// worker drains, no quota is left, FinishShutdown OK, no verbs object held
// (C9); then the world's pump stops.
void ShutDownAndCheck(LockedWorld& world, Host (&hosts)[2]) {
  for (Host& hs : hosts) StartThreadedRuntime(hs.engine.get());
  for (Host& hs : hosts) hs.engine->BeginShutdown();
  for (Host& hs : hosts) {
    bool drained = false;
    for (int i = 0; i < 2'000'000 && !drained; ++i) {
      drained = RuntimeWorkersDrained(hs.engine.get());
      if (!drained) RuntimeYield();
    }
    EXPECT_TRUE(drained) << hs.addr;
  }
  for (Host& hs : hosts) StopThreadedRuntime(hs.engine.get());
  for (Host& hs : hosts) {
    for (auto& w : hs.engine->workers()) EXPECT_EQ(w->QuotaUsed(), 0u);
    EXPECT_TRUE(hs.engine->FinishShutdown().ok()) << hs.addr;
    EXPECT_EQ(hs.engine->ledger().LiveTotal(), 0u) << hs.engine->ledger().ToString();
  }
  world.StopPump();
}

// Every owner poll mode (include/ferry/config.h), with and without user
// threads stepping owners (EngineConfig::user_thread_steps): the same
// traffic, the same checks; under ThreadSanitizer (scripts/tsan-check) each
// must be clean.
class EngineThreadedModes : public ::testing::TestWithParam<std::tuple<OwnerPollMode, bool>> {};

INSTANTIATE_TEST_SUITE_P(PollModes, EngineThreadedModes,
                         ::testing::Combine(::testing::Values(OwnerPollMode::kBlocking,
                                                              OwnerPollMode::kAdaptive,
                                                              OwnerPollMode::kBusyPoll),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<OwnerPollMode, bool>>& i) {
                           const OwnerPollMode m = std::get<0>(i.param);
                           const std::string mode = m == OwnerPollMode::kBlocking   ? "Blocking"
                                                    : m == OwnerPollMode::kAdaptive ? "Adaptive"
                                                                                    : "BusyPoll";
                           return mode + (std::get<1>(i.param) ? "UserSteps" : "OwnersOnly");
                         });

TEST_P(EngineThreadedModes, FourUserThreadsTwoEnginesBytesVerifiedNoLeaks) {
  sim::FabricConfig fc;
  fc.hosts = 2;
  LockedWorld world(7, fc, LockedWorld::Options{});
  Host hosts[2];
  const auto [mode, user_steps] = GetParam();
  BringUp(world, StressConfig(mode, user_steps), hosts);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  std::atomic<uint64_t> tasks_done{0};
  std::vector<std::string> errors(kUserThreads);
  std::vector<std::thread> users;
  constexpr uint32_t kIterations = 150;
  constexpr uint32_t kBatch = 8;
  for (uint32_t t = 0; t < kUserThreads; ++t) {
    users.emplace_back([&, t] {
      Host& me = hosts[t % 2];
      Host& peer = hosts[1 - t % 2];
      errors[t] = UserThread(me, peer, t, kIterations, kBatch, world.clock(), &tasks_done);
    });
  }
  for (std::thread& u : users) u.join();
  for (uint32_t t = 0; t < kUserThreads; ++t) EXPECT_EQ(errors[t], "") << "user thread " << t;
  EXPECT_EQ(tasks_done.load(), uint64_t{kUserThreads} * kIterations * kBatch);

  // Quiesced: stop the runtimes (joins every thread), then the worker
  // state may be read here. Endpoints are still up; quota must be 0.
  for (Host& hs : hosts) StopThreadedRuntime(hs.engine.get());
  for (Host& hs : hosts) {
    const ThreadedRuntimeStats& st = hs.engine->threaded_runtime->stats();
    std::printf(
        "%s traffic runtime: worker steps=%llu waits=%llu wakes=%llu listener msgs=%llu "
        "listener waits=%llu sleeps=%llu user waits=%llu progress signals=%llu\n",
        hs.addr.c_str(), static_cast<unsigned long long>(st.worker_steps.load()),
        static_cast<unsigned long long>(st.worker_waits.load()),
        static_cast<unsigned long long>(st.wakes_written.load()),
        static_cast<unsigned long long>(st.listener_messages.load()),
        static_cast<unsigned long long>(st.listener_waits.load()),
        static_cast<unsigned long long>(st.listener_sleeps.load()),
        static_cast<unsigned long long>(st.user_waits.load()),
        static_cast<unsigned long long>(st.progress_signals.load()));
    EXPECT_GT(st.worker_steps.load(), 0u);
    // The mode decides whether owners spin: never when blocking; when
    // adaptive or busy polling, spin steps happen and some find work.
    if (mode == OwnerPollMode::kBlocking) {
      EXPECT_EQ(st.spin_steps.load(), 0u);
    } else {
      EXPECT_GT(st.spin_steps.load(), 0u);
      EXPECT_GT(st.spin_hits.load(), 0u);
    }
    // A busy-polling owner never publishes a sleep before Stop, so every
    // Wake only sets its flag (no eventfd write on the submit path).
    std::printf("%s wakes flagged=%llu written=%llu\n", hs.addr.c_str(),
                static_cast<unsigned long long>(st.wakes_flagged.load()),
                static_cast<unsigned long long>(st.wakes_written.load()));
    if (mode == OwnerPollMode::kBusyPoll) {
      EXPECT_EQ(st.wakes_written.load(), 0u);
    }
    if (!user_steps) {
      EXPECT_GT(st.wakes_flagged.load() + st.wakes_written.load(), 0u);
    }
    // User threads stepped owners themselves only when allowed to.
    std::printf("%s inline steps=%llu owner wakes after them=%llu lock busy=%llu\n",
                hs.addr.c_str(), static_cast<unsigned long long>(st.inline_steps.load()),
                static_cast<unsigned long long>(st.inline_wakes.load()),
                static_cast<unsigned long long>(st.inline_busy.load()));
    if (user_steps) {
      EXPECT_GT(st.inline_steps.load(), 0u);
    } else {
      EXPECT_EQ(st.inline_steps.load() + st.inline_busy.load(), 0u);
    }
    // The user threads waited through the progress generation and were
    // signalled by steps (not only by their timeouts).
    EXPECT_GT(st.user_waits.load(), 0u);
    EXPECT_GT(st.progress_signals.load(), 0u);
    // The simulated ControlNet never blocks: the listener's fallback sleep
    // (not a spin) covered its empty polls (not every one: a Poll held up
    // by the world mutex can exceed the 50 us "did not block" bound).
    EXPECT_GT(st.listener_sleeps.load(), 0u);
    EXPECT_LE(st.listener_sleeps.load(), st.listener_waits.load());
    EXPECT_GT(st.listener_messages.load(), 0u);  // descriptor + handshake traffic
  }
  for (Host& hs : hosts) {
    size_t live = 0;
    for (auto& w : hs.engine->workers()) {
      EXPECT_EQ(w->QuotaUsed(), 0u) << hs.addr << " worker " << w->id();
      live += w->LiveEndpoints();
    }
    EXPECT_GE(live, 1u) << hs.addr;
  }

  ShutDownAndCheck(world, hosts);
  world.WithFabric([](sim::Fabric& f) {
    for (auto k : {sim::ObjectKind::kContext, sim::ObjectKind::kPd, sim::ObjectKind::kMr,
                   sim::ObjectKind::kCompChannel, sim::ObjectKind::kCq, sim::ObjectKind::kQp,
                   sim::ObjectKind::kMw})
      EXPECT_EQ(f.LiveCount(k), 0u) << sim::ObjectKindName(k);
    std::string v;
    for (const auto& x : f.violations()) v += x.message + "; ";
    EXPECT_EQ(v, "");
    return 0;
  });
  std::printf("pump rounds=%llu tasks=%llu\n", static_cast<unsigned long long>(world.pump_rounds()),
              static_cast<unsigned long long>(tasks_done.load()));
}

// Notifications under real threads (scripts/tsan-check runs this binary
// under ThreadSanitizer): four user threads submit batches that each carry
// a notification; the last data task's publish dispatches it from an owner
// thread to (possibly) another owner's inbox, the receiving owner delivers
// it into the engine's inbox, a user thread polls it. Every notification
// is COMPLETED and delivered exactly once, with its message; receive WRs
// are the only quota left held once the traffic stopped.
TEST(EngineThreaded, NotificationsAreDeliveredOnceUnderThreads) {
  sim::FabricConfig fc;
  fc.hosts = 2;
  LockedWorld world(11, fc, LockedWorld::Options{});
  EngineConfig config = StressConfig();
  config.notify_recv_slots = 4;
  config.qp_rnr_retries = 6;
  config.cqe_limit = 2048;
  Host hosts[2];
  BringUp(world, config, hosts);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  constexpr uint32_t kIterations = 40;
  constexpr uint32_t kBatch = 4;
  std::atomic<uint64_t> tasks_done{0};
  std::vector<std::string> errors(kUserThreads);
  std::vector<std::thread> users;
  for (uint32_t t = 0; t < kUserThreads; ++t) {
    users.emplace_back([&, t] {
      errors[t] = UserThread(hosts[t % 2], hosts[1 - t % 2], t, kIterations, kBatch, world.clock(),
                             &tasks_done, /*notify=*/true);
    });
  }
  // Meanwhile one receiver thread per engine collects its notifications.
  const uint64_t want = uint64_t{kUserThreads / 2} * kIterations;  // per receiver
  std::vector<std::vector<Notification>> got(2);
  std::vector<std::thread> receivers;
  for (uint32_t h = 0; h < 2; ++h) {
    receivers.emplace_back([&, h] {
      EngineImpl& e = *hosts[h].engine;
      RuntimeWaiter waiter(&e);
      for (uint64_t round = 0; round < 200'000 && got[h].size() < want; ++round) {
        const uint64_t seen = waiter.Generation();
        std::vector<Notification> n = e.PollNotifies(64);
        if (n.empty()) {
          waiter.Wait(seen, 1'000'000);
          continue;
        }
        for (Notification& x : n) got[h].push_back(std::move(x));
      }
    });
  }
  for (std::thread& u : users) u.join();
  for (std::thread& r : receivers) r.join();
  for (uint32_t t = 0; t < kUserThreads; ++t) EXPECT_EQ(errors[t], "") << "user thread " << t;
  EXPECT_EQ(tasks_done.load(), uint64_t{kUserThreads} * kIterations * kBatch);
  for (uint32_t h = 0; h < 2; ++h) {
    ASSERT_EQ(got[h].size(), want) << "h" << h;
    std::set<std::string> messages;
    std::set<uint64_t> seqs;
    for (const Notification& n : got[h]) {
      EXPECT_EQ(n.from, hosts[1 - h].addr);
      EXPECT_EQ(n.incarnation, hosts[1 - h].engine->incarnation());
      messages.insert(n.message);
      seqs.insert(n.seq);
    }
    EXPECT_EQ(messages.size(), want) << "h" << h << ": a message delivered twice or lost";
    EXPECT_EQ(seqs.size(), want) << "h" << h << ": a sequence number delivered twice";
    EXPECT_EQ(*seqs.begin(), 1u);
    EXPECT_EQ(*seqs.rbegin(), want);
  }
  for (Host& hs : hosts) StopThreadedRuntime(hs.engine.get());
  for (Host& hs : hosts)
    for (auto& w : hs.engine->workers()) EXPECT_EQ(w->QuotaUsed(), w->RecvQuotaHeld());
  ShutDownAndCheck(world, hosts);
}

}  // namespace
}  // namespace ferry::engine::testing
