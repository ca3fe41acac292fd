// bench/ferry_bench/ferry_bench.cc: ferry-bench, transfers between two
// engines (docs/design.md section 9; issue 4 item 9), sweeping block size, batch
// size and threads; prints GB/s and p50/p99/p999 and mean batch latency per point
// (from just before Submit to the poll that sees the batch done), the
// Submit call's own p50, a progress line on stderr, and with --verify
// checks every byte.
//
// Modes:
//   --mode sim   one process, two engines (hosts h0 and h1) on the simulated
//                RNIC and control network, run by the sim runtime
//                (sim/world/engine_runtime.h) under the deterministic scheduler.
//                Prints its seed and plan first; GB/s in virtual time and in
//                wall-clock time; latency in virtual time. "threads" are
//                concurrent submit streams (the sim world has no threads).
//   --mode real  one role per process on real RNICs (libibverbs, TCP control
//                network, the threaded production runtime):
//                  ferry-bench --mode real --role target --listen HOST:PORT --device mlx5_0
//                  ferry-bench --mode real --role initiator --listen HOST:PORT
//                              --peer TARGETHOST:PORT --device mlx5_0
//                The target maps its buffer at a fixed address
//                (kRealTargetBase) so the initiator knows where to point
//                without a side channel (the public API has no call that
//                lists a peer segment's buffers). The initiator ends with a
//                "totals:" line that scripts/softroce/ferry-bench-real and
//                tests/softroce/ferry_bench_real.sh parse: keep its format.
//                --gid_index defaults to auto (engine/gid_select.h: the
//                RoCE v2 IPv4 GID on Soft-RoCE); the initiator prints each
//                side's chosen GID.
//
// What must stay true: a point's bytes count only COMPLETED tasks; any
// other terminal status or a byte mismatch is reported and makes the exit
// code 1; every loop is bounded by the point's byte target or wall budget.
// The target's buffer holds a read half (fixed pattern, READ points verify
// against it) and a write half (WRITE points write it and, with --verify,
// read it back into a scratch area of the initiator and compare).
#include <arpa/inet.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/quantile.h"
#include "engine/inspect.h"
#include "ferry/engine.h"
#include "hal/os/os_entropy.h"
#include "hal/os/steady_clock.h"
#include "hal/tcp/tcp_control_net.h"
#include "sim/entropy.h"
#include "sim/net/sim_network.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/scheduler.h"
#include "sim/virtual_clock.h"
#include "sim/world/engine_runtime.h"
#ifdef FERRY_HAVE_IBVERBS
#include "hal/ibverbs/ibverbs.h"
#endif

namespace ferry::bench {
namespace {

// [[maybe_unused]]: the real mode is compiled out with -Dverbs=disabled.
[[maybe_unused]] constexpr uint64_t kRealTargetBase = 0x600000000000ull;
constexpr size_t kPointsMax = 4096;
// Most a real-mode stream thread blocks in one WaitBatch.
[[maybe_unused]] constexpr uint64_t kRealWaitMaxNs = 20'000'000;

uint64_t WallNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// "rxe0 gid ::ffff:192.0.2.1, ..." for the engine's local devices: shows
// which GID the engine uses (auto selection included).
[[maybe_unused]] std::string DevicesText(const SegmentDescriptor& d) {
  std::vector<std::string> parts;
  for (const DeviceDescriptor& dev : d.devices) {
    char text[INET6_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET6, dev.gid.data(), text, sizeof text) == nullptr) text[0] = '\0';
    parts.push_back(absl::StrCat(dev.name, " gid ", text));
  }
  return absl::StrJoin(parts, ", ");
}

// ------------------------------------------------------------------ options
struct Options {
  std::string mode = "sim";
  std::string role;
  std::string listen;
  std::string peer;
  std::string device;
  uint64_t seed = 42;
  std::vector<uint64_t> block_bytes = {4096, 65536, 1 << 20};
  std::vector<uint64_t> batch_sizes = {1, 16};
  std::vector<uint64_t> threads = {1, 4};
  std::string op = "write";  // write | read | both
  uint64_t point_bytes = 64ull << 20;
  uint64_t point_ms = 1500;  // wall budget per point
  bool verify = false;
  EngineConfig config;
  uint64_t serve_s = 0;   // target: 0 = until killed
  uint64_t poll_us = 0;   // real: pause between status polls (0 = block in WaitBatch)
  std::string json_path;  // --json: one JSON object per point, appended
  std::string owner_poll = "adaptive";
  // --notify: notification round trips (NotifyPingPong below); both sides
  // take notifications (notify_recv_slots, bounded RNR retries).
  bool notify = false;
};

// --help prints this to stdout and exits 0; a usage error prints it to
// stderr and exits 2.
void Usage(std::FILE* to) {
  std::fprintf(to,
               "usage: ferry-bench [--mode sim|real] [--seed N] [--block 4096,65536]\n"
               "         [--batch 1,16] [--threads 1,4] [--op write|read|both]\n"
               "         [--point_mib N] [--point_ms N] [--verify] [--workers N] [--qps N]\n"
               "         [--wr_depth N] [--slice_kib N] [--task_timeout_ms N]\n"
               "       real mode: --role target|initiator --listen HOST:PORT --device NAME\n"
               "         [--gid_index N (default: auto)] [--timeout_exp N (QP ACK timeout)]\n"
               "         [--rd_atomic N (READs in flight per QP, qp_rd_atomic_max, 1..255)]\n"
               "         [--poll_us N (user threads sleep N us between status polls;\n"
               "          default 0: they block in WaitBatch until the engine publishes)]\n"
               "         [--peer HOST:PORT (initiator)] [--serve_s N (target)]\n"
               "         [--owner_poll blocking|adaptive|busy] [--owner_spin_us N]\n"
               "         [--user_spin_us N] [--user_steps 0|1] (the threaded runtime's\n"
               "          waits and whether user threads step owners, config.h)\n"
               "       --json FILE: also append one JSON object per point to FILE\n"
               "       --notify: notification round trips instead (threads 1, WRITE): per\n"
               "         block, a Submit of --batch WRITEs with a notification, and a\n"
               "         notification alone (batch 0); the target echoes each one; the\n"
               "         latency is submit -> echo delivered (one way ~ half of it)\n");
}

bool ParseList(absl::string_view s, std::vector<uint64_t>* out) {
  out->clear();
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(p, &v) || v == 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

std::optional<Options> Parse(int argc, char** argv) {
  Options o;
  o.config.workers = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a != "--verify" && a != "--help" && a != "--notify" && i + 1 < argc) {
      v = argv[++i];
    }
    uint64_t n = 0;
    const bool num = absl::SimpleAtoi(v, &n);
    if (a == "--help") return std::nullopt;
    if (a == "--verify") {
      o.verify = true;
    } else if (a == "--notify") {
      o.notify = true;
    } else if (a == "--mode") {
      o.mode = v;
    } else if (a == "--role") {
      o.role = v;
    } else if (a == "--listen") {
      o.listen = v;
    } else if (a == "--peer") {
      o.peer = v;
    } else if (a == "--device") {
      o.device = v;
    } else if (a == "--op") {
      o.op = v;
    } else if (a == "--seed" && num) {
      o.seed = n;
    } else if (a == "--block" && ParseList(v, &o.block_bytes)) {
    } else if (a == "--batch" && ParseList(v, &o.batch_sizes)) {
    } else if (a == "--threads" && ParseList(v, &o.threads)) {
    } else if (a == "--point_mib" && num && n > 0) {
      o.point_bytes = n << 20;
    } else if (a == "--point_ms" && num && n > 0) {
      o.point_ms = n;
    } else if (a == "--serve_s" && num) {
      o.serve_s = n;
    } else if (a == "--poll_us" && num) {
      o.poll_us = n;
    } else if (a == "--workers" && num) {
      o.config.workers = static_cast<uint32_t>(n);
    } else if (a == "--qps" && num) {
      o.config.qps_per_endpoint = static_cast<uint32_t>(n);
    } else if (a == "--wr_depth" && num) {
      o.config.wr_depth = static_cast<uint32_t>(n);
    } else if (a == "--slice_kib" && num && n > 0) {
      o.config.slice_size_bytes = n * 1024;
    } else if (a == "--gid_index" && num) {
      o.config.gid_index = static_cast<int>(n);
    } else if (a == "--task_timeout_ms" && num && n > 0) {
      o.config.slice_timeout_ns = n * 1'000'000;
    } else if (a == "--timeout_exp" && num) {
      o.config.qp_timeout_exp = static_cast<uint8_t>(n);
    } else if (a == "--rd_atomic" && num && n >= 1 && n <= 255) {
      o.config.qp_rd_atomic_max = static_cast<uint8_t>(n);
    } else if (a == "--owner_poll" && (v == "blocking" || v == "adaptive" || v == "busy")) {
      o.owner_poll = v;
      o.config.owner_poll_mode = v == "blocking"   ? OwnerPollMode::kBlocking
                                 : v == "adaptive" ? OwnerPollMode::kAdaptive
                                                   : OwnerPollMode::kBusyPoll;
    } else if (a == "--owner_spin_us" && num) {
      o.config.owner_spin_ns_max = n * 1000;
    } else if (a == "--user_spin_us" && num) {
      o.config.user_spin_ns = n * 1000;
    } else if (a == "--user_steps" && num && n <= 1) {
      o.config.user_thread_steps = n == 1;
    } else if (a == "--json" && !v.empty()) {
      o.json_path = v;
    } else {
      std::fprintf(stderr, "ferry-bench: bad argument '%s'\n", argv[i]);
      return std::nullopt;
    }
  }
  if (o.op != "write" && o.op != "read" && o.op != "both") return std::nullopt;
  if (o.notify) {
    // Receive slots on both sides; an RNR wait that ends (FAILED, not a
    // hang) when a peer posts none; a CQ with room for the receive WRs.
    o.config.notify_recv_slots = 8;
    o.config.qp_rnr_retries = 6;
    o.config.cqe_limit = std::max<uint32_t>(o.config.cqe_limit, 8192);
    o.op = "write";
    o.threads = {1};
  }
  if (o.mode != "sim" && o.mode != "real") return std::nullopt;
  return o;
}

// ------------------------------------------------------------------ plan
struct Point {
  OpKind op;
  uint64_t block;
  uint64_t batch;  // notify: 0 = a notification alone (SendNotify)
  uint64_t threads;
  bool notify = false;
};

std::vector<Point> Plan(const Options& o) {
  std::vector<Point> pts;
  if (o.notify) {
    // The notification alone first, then with each block and batch size.
    pts.push_back(Point{OpKind::kWrite, 0, 0, 1, true});
    for (uint64_t bl : o.block_bytes)
      for (uint64_t ba : o.batch_sizes)
        if (pts.size() < kPointsMax) pts.push_back(Point{OpKind::kWrite, bl, ba, 1, true});
    return pts;
  }
  std::vector<OpKind> ops;
  if (o.op != "read") ops.push_back(OpKind::kWrite);
  if (o.op != "write") ops.push_back(OpKind::kRead);
  for (OpKind op : ops)
    for (uint64_t bl : o.block_bytes)
      for (uint64_t ba : o.batch_sizes)
        for (uint64_t th : o.threads)
          if (pts.size() < kPointsMax) pts.push_back(Point{op, bl, ba, th});
  return pts;
}

uint64_t Max(const std::vector<uint64_t>& v) { return *std::max_element(v.begin(), v.end()); }

// Bytes of each half of the target buffer and of the initiator buffer's
// data area (the initiator has a second, scratch area of the same size).
uint64_t AreaBytes(const Options& o) {
  return Max(o.block_bytes) * Max(o.batch_sizes) * Max(o.threads);
}

uint8_t ReadPattern(uint64_t off) { return static_cast<uint8_t>((off * 31) ^ (off >> 11)); }
uint8_t WritePattern(uint64_t salt, uint64_t off) {
  return static_cast<uint8_t>((off * 7) + salt * 13 + (off >> 13));
}

// ------------------------------------------------------------------ streams
// Where a point's streams read and write.
struct Layout {
  uint8_t* local = nullptr;    // initiator data area
  uint8_t* scratch = nullptr;  // initiator read-back area
  uint64_t remote_read = 0;    // target read half (peer address)
  uint64_t remote_write = 0;   // target write half (peer address)
  SegmentHandle segment;
};

struct Shared {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> verify_errors{0};
  std::atomic<bool> stop{false};  // budget reached
};

// --notify: a point ends after this many round trips (or its wall budget).
constexpr uint64_t kNotifyRoundTrips = 1000;
// Most echoes a target keeps in flight (their batches not yet freed).
constexpr size_t kEchoesInFlightMax = 1024;

// A Submit with a notification to `seg` (a notification alone when `reqs`
// is empty), on either engine type.
[[maybe_unused]] SubmitResult SubmitWithNotify(engine::SteppedEngine& e, BatchId b,
                                               const std::vector<Request>& reqs,
                                               SegmentHandle seg) {
  return e.SubmitNotify(b, reqs, seg, reqs.empty() ? "ping" : "data");
}
[[maybe_unused]] SubmitResult SubmitWithNotify(Engine& e, BatchId b,
                                               const std::vector<Request>& reqs,
                                               SegmentHandle seg) {
  if (reqs.empty()) return e.SendNotify(b, seg, "ping");
  return e.Submit(b, reqs, NotifyOptions{"data"});
}

// The target's side of --notify: answers every notification delivered to
// its engine with a notification alone to the sender (whose segment it
// opens once), and frees the answers' batches once terminal. Never blocks.
template <typename E>
class NotifyEcho {
 public:
  explicit NotifyEcho(E* e) : e_(e) {}
  void Tick(std::vector<Notification> got) {
    for (Notification& n : got) ++peers_[n.from].owed;
    for (auto& [from, p] : peers_) {
      if (!p.seg && !p.opening) {
        auto t = e_->OpenSegmentAsync(from);
        if (t.ok()) p.opening = *t;
      } else if (!p.seg) {
        auto r = e_->PollOpenSegment(*p.opening);
        if (!r.ok()) p.opening.reset();  // opened again next tick
        if (r.ok() && r->has_value()) p.seg = **r;
      }
      while (p.seg && p.owed > 0 && sent_.size() < kEchoesInFlightMax) {
        auto b = e_->AllocateBatch(1);
        if (!b.ok()) break;
        if (!SubmitWithNotify(*e_, *b, {}, *p.seg).status.ok()) {
          (void)e_->FreeBatch(*b);
          break;
        }
        --p.owed;
        ++answered;
        sent_.push_back(*b);
      }
    }
    while (!sent_.empty()) {
      auto st = e_->GetBatchStatus(sent_.front());
      if (st.ok() && st->overall == TaskStatus::kPending) break;
      (void)e_->FreeBatch(sent_.front());
      sent_.pop_front();
    }
  }
  uint64_t answered = 0;

 private:
  struct Peer {
    std::optional<SegmentHandle> seg;
    std::optional<OpenToken> opening;
    uint64_t owed = 0;
  };
  E* e_;
  std::map<std::string, Peer> peers_;
  std::deque<BatchId> sent_;
};

// One submit stream: keeps one batch in flight. Tick() never blocks; it
// returns true once the stream is finished (point budget reached).
template <typename E>
class Stream {
 public:
  Stream(E* engine, const Point& p, const Layout& lay, uint32_t index, bool verify, Shared* shared,
         uint64_t point_bytes, std::function<uint64_t()> now)
      : e_(engine),
        p_(p),
        lay_(lay),
        index_(index),
        verify_(verify),
        shared_(shared),
        point_bytes_(point_bytes),
        now_(std::move(now)) {}

  // Never blocks. A finished batch is followed by the next submit in the
  // same call, so the engine never idles between two batches of a stream
  // (in the sim an idle gap would let virtual time jump to a timer).
  bool Tick() {
    if (phase_ != Phase::kIdle) {
      // --notify: the round trip ends when the target's echo is delivered.
      if (p_.notify && echo_ns_ == 0) {
        if (e_->PollNotifies(1).empty()) return false;
        echo_ns_ = now_();
      }
      auto st = e_->GetBatchStatus(batch_);
      if (!st.ok() || st->overall == TaskStatus::kPending) return false;
      const bool main = phase_ == Phase::kMain;
      const bool ok = st->overall == TaskStatus::kCompleted;
      if (!ok) {
        shared_->failures.fetch_add(1);
        std::fprintf(stderr, "\nferry-bench: batch ended %s\n",
                     std::string(TaskStatusName(st->overall)).c_str());
      } else if (main) {
        last_done_ns_ = p_.notify ? echo_ns_ : now_();
        latencies_ns.push_back(last_done_ns_ - t0_);
        shared_->bytes.fetch_add(p_.block * p_.batch);
        shared_->batches.fetch_add(1);
        if (verify_ && p_.op == OpKind::kRead) CheckRead();
      } else {
        CheckReadback();
      }
      (void)e_->FreeBatch(batch_);
      phase_ = Phase::kIdle;
      if (main && ok && verify_ && p_.op == OpKind::kWrite) return !Start(true);
    }
    if (shared_->stop.load() || shared_->bytes.load() >= point_bytes_) return true;
    if (p_.notify && shared_->batches.load() >= kNotifyRoundTrips) return true;
    return !Start(false);
  }

  // Real mode only (blocks): waits until the batch in flight may have
  // changed (Engine::WaitBatch, woken by the worker that publishes), at
  // most max_ns. No batch in flight: returns at once.
  void WaitInFlight(uint64_t max_ns) {
    if (phase_ == Phase::kIdle) return;
    if (p_.notify && echo_ns_ == 0) {
      // The echo is what the round trip waits for: block until it comes.
      std::vector<Notification> got = e_->WaitNotifies(1, max_ns);
      if (!got.empty()) echo_ns_ = now_();
      return;
    }
    (void)e_->WaitBatch(batch_, max_ns);
  }

  std::vector<uint64_t> latencies_ns;
  std::vector<uint64_t> submit_ns;  // each main batch's Submit call alone
  // When the stream's last counted batch completed (0: none yet).
  uint64_t last_done_ns() const { return last_done_ns_; }

 private:
  enum class Phase { kIdle, kMain, kReadback };
  uint64_t Off(uint64_t i) const { return (uint64_t{index_} * p_.batch + i) * p_.block; }

  // Submits the next batch (or the read-back of the last WRITE batch).
  bool Start(bool readback) {
    auto b = e_->AllocateBatch(static_cast<uint32_t>(p_.batch) + (p_.notify ? 1 : 0));
    if (!b.ok()) {
      shared_->failures.fetch_add(1);
      return false;
    }
    ++iteration_;
    std::vector<Request> reqs(p_.batch);
    for (uint64_t i = 0; i < p_.batch; ++i) {
      Request& r = reqs[i];
      r.segment = lay_.segment;
      r.length_bytes = p_.block;
      if (readback) {
        r.opcode = OpKind::kRead;
        r.local_addr = reinterpret_cast<uint64_t>(lay_.scratch + Off(i));
        r.remote_addr = lay_.remote_write + Off(i);
        std::memset(lay_.scratch + Off(i), 0, p_.block);
      } else if (p_.op == OpKind::kWrite) {
        r.opcode = OpKind::kWrite;
        r.local_addr = reinterpret_cast<uint64_t>(lay_.local + Off(i));
        r.remote_addr = lay_.remote_write + Off(i);
        if (verify_)
          for (uint64_t k = 0; k < p_.block; ++k)
            lay_.local[Off(i) + k] = WritePattern(iteration_, k);
      } else {
        r.opcode = OpKind::kRead;
        r.local_addr = reinterpret_cast<uint64_t>(lay_.local + Off(i));
        r.remote_addr = lay_.remote_read + Off(i);
        if (verify_) std::memset(lay_.local + Off(i), 0, p_.block);
      }
    }
    // A batch's latency starts before Submit: with user-thread steps
    // (docs/operations.md 2.3) Submit may post the WRs itself, and on
    // Soft-RoCE a post can move the bytes before it returns (the clock
    // started after Submit until 2026-12-05, which left that out).
    t0_ = now_();
    SubmitResult sr =
        p_.notify ? SubmitWithNotify(*e_, *b, reqs, lay_.segment) : e_->Submit(*b, reqs);
    if (!readback) submit_ns.push_back(now_() - t0_);
    echo_ns_ = 0;
    if (!sr.status.ok()) {
      std::fprintf(stderr, "\nferry-bench: submit: %s\n", sr.status.ToString().c_str());
      shared_->failures.fetch_add(1);
      (void)e_->FreeBatch(*b);
      return false;
    }
    batch_ = *b;
    phase_ = readback ? Phase::kReadback : Phase::kMain;
    return true;
  }

  void CheckRead() {
    for (uint64_t i = 0; i < p_.batch; ++i)
      for (uint64_t k = 0; k < p_.block; ++k)
        if (lay_.local[Off(i) + k] != ReadPattern(Off(i) + k)) {
          shared_->verify_errors.fetch_add(1);
          return;
        }
  }
  void CheckReadback() {
    for (uint64_t i = 0; i < p_.batch; ++i)
      if (std::memcmp(lay_.scratch + Off(i), lay_.local + Off(i), p_.block) != 0) {
        shared_->verify_errors.fetch_add(1);
        return;
      }
  }

  E* e_;
  Point p_;
  Layout lay_;
  uint32_t index_;
  bool verify_;
  Shared* shared_;
  uint64_t point_bytes_;
  std::function<uint64_t()> now_;
  Phase phase_ = Phase::kIdle;
  BatchId batch_;
  uint64_t t0_ = 0;
  uint64_t last_done_ns_ = 0;
  uint64_t echo_ns_ = 0;  // --notify: when the echo of the batch in flight arrived
  uint64_t iteration_ = 0;
};

// ------------------------------------------------------------------ warm-up
#ifdef FERRY_HAVE_IBVERBS
// Real mode: one untimed batch of up to kWarmUpRequests WRITEs of up to 4 KiB
// (within the write half of the data area) before the
// first point, so bringing the endpoints up (QPs created, the handshake,
// QPs to RTS: perftest does the same before its clock starts) is in no
// point's rate or latency; its time is printed on its own line. The
// requests' indexes spread over the rails as a point's do (engine.cc
// RouteOf: context index % contexts, peer device index % devices).
constexpr uint32_t kWarmUpRequests = 16;
constexpr uint64_t kWarmUpBytes = 4096;
constexpr uint64_t kWarmUpTimeoutNs = 60'000'000'000;

int WarmUp(Engine& e, const Layout& lay, uint64_t area_bytes) {
  const uint64_t w0 = WallNs();
  const uint64_t len = std::min(kWarmUpBytes, area_bytes);
  const auto n = static_cast<uint32_t>(std::clamp<uint64_t>(area_bytes / len, 1, kWarmUpRequests));
  auto b = e.AllocateBatch(n);
  if (!b.ok()) {
    std::fprintf(stderr, "ferry-bench: warm-up: %s\n", b.status().ToString().c_str());
    return 1;
  }
  std::vector<Request> reqs(n);
  for (uint32_t i = 0; i < n; ++i) {
    reqs[i].segment = lay.segment;
    reqs[i].opcode = OpKind::kWrite;
    reqs[i].length_bytes = len;
    reqs[i].local_addr = reinterpret_cast<uint64_t>(lay.local) + i * len;
    reqs[i].remote_addr = lay.remote_write + i * len;
  }
  const SubmitResult sr = e.Submit(*b, reqs);
  absl::StatusOr<BatchStatus> st =
      sr.status.ok() ? e.WaitBatch(*b, kWarmUpTimeoutNs) : absl::StatusOr<BatchStatus>(sr.status);
  const bool ok = st.ok() && st->overall == TaskStatus::kCompleted;
  if (!ok) {
    std::fprintf(stderr, "ferry-bench: warm-up batch did not complete: %s\n",
                 !st.ok() ? st.status().ToString().c_str()
                          : std::string(TaskStatusName(st->overall)).c_str());
  }
  (void)e.FreeBatch(*b);
  if (!ok) return 1;
  std::printf("warm-up: %u x %" PRIu64 " B WRITE, endpoints up, %.1f ms (in no point)\n", n, len,
              static_cast<double>(WallNs() - w0) / 1e6);
  return 0;
}
#endif  // FERRY_HAVE_IBVERBS

// ------------------------------------------------------------------ report
struct PointResult {
  uint64_t bytes = 0;
  uint64_t batches = 0;
  uint64_t failures = 0;
  uint64_t verify_errors = 0;
  uint64_t elapsed_ns = 0;  // the mode's time base (virtual in sim)
  uint64_t wall_ns = 0;
  std::vector<uint64_t> lat_ns;     // per batch, the mode's time base
  std::vector<uint64_t> submit_ns;  // per batch, its Submit call alone
};

void PrintHeader(bool sim) {
  std::printf("%-5s %8s %5s %7s %8s %10s %10s %9s %9s %9s %9s %9s %s\n", "op", "block", "batch",
              "threads", "batches", sim ? "GB/s(virt)" : "GB/s", sim ? "GB/s(wall)" : "Gb/s",
              "p50_us", "p99_us", "p999_us", "mean_us", "sub50_us", "status");
}

// Appends the point to o.json_path (when set) as one JSON object per line,
// so runs are compared by scripts: every field the table has, plus the
// mode, the owner poll mode and the spin bounds.
void AppendJson(const Options& o, const Point& p, const PointResult& r, double gbs, double p50,
                double p99, double p999, double mean, double sub50, const std::string& status) {
  if (o.json_path.empty()) return;
  std::FILE* f = std::fopen(o.json_path.c_str(), "a");
  if (f == nullptr) {
    std::fprintf(stderr, "ferry-bench: cannot append to %s\n", o.json_path.c_str());
    return;
  }
  std::fprintf(f,
               "{\"mode\":\"%s\",\"op\":\"%s\",\"block\":%" PRIu64 ",\"batch\":%" PRIu64
               ",\"threads\":%" PRIu64 ",\"batches\":%" PRIu64
               ",\"GBps\":%.6f,\"Gbps\":%.6f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f"
               ",\"mean_us\":%.1f,\"submit_p50_us\":%.1f"
               ",\"owner_poll\":\"%s\",\"owner_spin_ns_max\":%" PRIu64 ",\"user_spin_ns\":%" PRIu64
               ",\"user_steps\":%s,\"status\":\"%s\"}\n",
               o.mode.c_str(), p.notify ? "NOTIFY" : std::string(OpKindName(p.op)).c_str(), p.block,
               p.batch, p.threads, r.batches, gbs, gbs * 8, p50, p99, p999, mean, sub50,
               o.owner_poll.c_str(), o.config.owner_spin_ns_max, o.config.user_spin_ns,
               o.config.user_thread_steps ? "true" : "false", status.c_str());
  std::fclose(f);
}

void PrintPoint(const Options& o, const Point& p, PointResult& r, bool sim) {
  const double gbs = r.elapsed_ns ? static_cast<double>(r.bytes) / r.elapsed_ns : 0.0;
  const double wall = r.wall_ns ? static_cast<double>(r.bytes) / r.wall_ns : 0.0;
  std::vector<uint64_t>& l = r.lat_ns;
  const double p50 = Quantile(l, 500) / 1e3, p99 = Quantile(l, 990) / 1e3,
               p999 = Quantile(l, 999) / 1e3;
  // The mean, tail included: beside the rate's time per batch (one stream)
  // it shows what the stream spends between batches.
  double mean = 0;
  for (uint64_t v : l) mean += static_cast<double>(v);
  mean = l.empty() ? 0.0 : mean / static_cast<double>(l.size()) / 1e3;
  // The Submit call's own share of the latency (user-thread steps post
  // inside it: docs/operations.md 2.3).
  const double sub50 = Quantile(r.submit_ns, 500) / 1e3;
  std::string status = "ok";
  if (r.failures || r.verify_errors)
    status = absl::StrCat("FAILED(", r.failures, " batches, ", r.verify_errors, " verify)");
  // Real mode: GB/s with 4 decimals and Gb/s (perftest's unit) with 3, so
  // emulated devices (Soft-RoCE under TCG: a few MB/s) still show figures.
  std::printf(
      "%-5s %8" PRIu64 " %5" PRIu64 " %7" PRIu64 " %8" PRIu64
      " %10s %10s %9.1f %9.1f %9.1f %9.1f %9.1f %s\n",
      p.notify ? "NTFY" : std::string(OpKindName(p.op)).c_str(), p.block, p.batch, p.threads,
      r.batches, (sim ? absl::StrFormat("%.2f", gbs) : absl::StrFormat("%.4f", gbs)).c_str(),
      sim ? absl::StrFormat("%.2f", wall).c_str() : absl::StrFormat("%.3f", gbs * 8).c_str(), p50,
      p99, p999, mean, sub50, status.c_str());
  std::fflush(stdout);
  AppendJson(o, p, r, gbs, p50, p99, p999, mean, sub50, status);
}

void Progress(size_t index, size_t total, const Point& p, const Shared& s, uint64_t point_bytes) {
  std::fprintf(stderr,
               "\r[%zu/%zu] %s block=%" PRIu64 " batch=%" PRIu64 " threads=%" PRIu64 " %3" PRIu64
               "%% batches=%" PRIu64 "   ",
               index + 1, total, std::string(OpKindName(p.op)).c_str(), p.block, p.batch, p.threads,
               std::min<uint64_t>(100, s.bytes.load() * 100 / point_bytes), s.batches.load());
}

// ------------------------------------------------------------------ sim
int RunSim(const Options& o) {
  sim::VirtualClock clock;
  sim::Prng root(o.seed);
  sim::FabricConfig fc;
  fc.hosts = 2;
  sim::Fabric fabric(fc, root.Fork(), &clock, nullptr);
  sim::SimNetwork net(root.Fork(), &clock, nullptr, sim::NetPlan{});
  sim::Scheduler sched(root.Fork(), &clock, nullptr);
  EngineConfig cfg = o.config;
  cfg.devices = {"sim0"};
  const std::vector<Point> plan = Plan(o);
  std::printf("ferry-bench mode=sim seed=%" PRIu64 "\n", o.seed);
  std::printf("plan: fabric %s, %" PRIu64 " Gb/s links, %" PRIu64 " ns latency (+%" PRIu64
              " ns jitter); engines h0 (initiator) -> h1 (target), workers=%u qps/endpoint=%u "
              "wr_depth=%u slice=%" PRIu64 " B\n",
              fabric.Describe().c_str(), fc.link_gbps, fc.link_latency_ns, fc.link_jitter_ns,
              cfg.workers, cfg.qps_per_endpoint, cfg.wr_depth, cfg.slice_size_bytes);
  std::printf("sweep: op=%s block=[%s] batch=[%s] threads(streams)=[%s] point=%" PRIu64
              " MiB or %" PRIu64 " ms wall, verify=%s; %zu points\n",
              o.op.c_str(), absl::StrJoin(o.block_bytes, ",").c_str(),
              absl::StrJoin(o.batch_sizes, ",").c_str(), absl::StrJoin(o.threads, ",").c_str(),
              o.point_bytes >> 20, o.point_ms, o.verify ? "on" : "off", plan.size());
  if (absl::Status s = cfg.Validate(); !s.ok()) {
    std::fprintf(stderr, "ferry-bench: %s\n", s.ToString().c_str());
    return 2;
  }
  const uint64_t area = AreaBytes(o);
  struct Host {
    std::string addr;
    std::unique_ptr<hal::Verbs> verbs;
    std::unique_ptr<sim::SimControlNet> ctl;
    std::unique_ptr<sim::SimEntropy> entropy;
    std::unique_ptr<engine::SteppedEngine> engine;
    std::unique_ptr<simworld::SimRuntime> rt;
    std::vector<uint8_t> buf;
  };
  Host hosts[2];
  sched.AddActor(&fabric);
  sched.AddActor(&net);
  for (uint32_t h = 0; h < 2; ++h) {
    Host& hs = hosts[h];
    hs.addr = absl::StrCat("h", h, ":1000");
    hs.buf.assign(2 * area, 0);
    auto ctl = net.Bind(hs.addr);
    if (!ctl.ok()) return 2;
    hs.ctl = std::move(*ctl);
    hs.verbs = fabric.NewVerbs(h);
    hs.entropy = std::make_unique<sim::SimEntropy>(root.Fork());
    EngineEnv env{hs.verbs.get(), hs.ctl.get(), &clock, hs.entropy.get()};
    auto e = engine::SteppedEngine::Create(cfg, env, nullptr, nullptr);
    if (!e.ok()) {
      std::fprintf(stderr, "ferry-bench: engine: %s\n", e.status().ToString().c_str());
      return 2;
    }
    hs.engine = std::move(*e);
    hs.rt = std::make_unique<simworld::SimRuntime>(hs.engine.get(), &fabric, hs.ctl.get(), nullptr,
                                                   1 + 100 * h, root.Fork());
    hs.rt->AddTo(&sched);
    if (absl::Status s = hs.engine->RegisterMemory(hs.buf.data(), hs.buf.size()); !s.ok()) {
      std::fprintf(stderr, "ferry-bench: register: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  sched.MakePlan(sim::PickMode::kUniform);
  for (uint64_t k = 0; k < area; ++k) hosts[1].buf[k] = ReadPattern(k);
  engine::SteppedEngine& init = *hosts[0].engine;
  auto tok = init.OpenSegmentAsync(hosts[1].addr);
  std::optional<SegmentHandle> seg;
  absl::Status open_err;
  sched.Run(
      [&] {
        auto p = init.PollOpenSegment(*tok);
        if (!p.ok()) open_err = p.status();
        if (p.ok()) seg = *p;
        return !p.ok() || seg.has_value();
      },
      10'000'000, clock.NowNs() + 10'000'000'000);
  if (!seg) {
    std::fprintf(stderr, "ferry-bench: open segment: %s\n", open_err.ToString().c_str());
    return 2;
  }
  Layout lay;
  lay.local = hosts[0].buf.data();
  lay.scratch = hosts[0].buf.data() + area;
  lay.remote_read = reinterpret_cast<uint64_t>(hosts[1].buf.data());
  lay.remote_write = lay.remote_read + area;
  lay.segment = *seg;

  PrintHeader(true);
  int rc = 0;
  NotifyEcho<engine::SteppedEngine> echo(hosts[1].engine.get());
  for (size_t pi = 0; pi < plan.size(); ++pi) {
    const Point& p = plan[pi];
    Shared shared;
    std::vector<std::unique_ptr<Stream<engine::SteppedEngine>>> streams;
    for (uint32_t s = 0; s < p.threads; ++s)
      streams.push_back(std::make_unique<Stream<engine::SteppedEngine>>(
          &init, p, lay, s, o.verify, &shared, o.point_bytes, [&clock] { return clock.NowNs(); }));
    std::vector<bool> finished(p.threads, false);
    const uint64_t v0 = clock.NowNs(), w0 = WallNs();
    uint64_t next_progress = w0;
    uint64_t checks = 0;
    sim::RunResult rr = sched.Run(
        [&] {
          if (o.notify) echo.Tick(hosts[1].engine->PollNotifies(16));
          bool all = true;
          for (size_t s = 0; s < streams.size(); ++s) {
            if (!finished[s]) finished[s] = streams[s]->Tick();
            all = all && finished[s];
          }
          if ((++checks & 1023) == 0) {
            const uint64_t w = WallNs();
            if (w - w0 > o.point_ms * 1'000'000) shared.stop.store(true);
            if (w >= next_progress) {
              Progress(pi, plan.size(), p, shared, o.point_bytes);
              next_progress = w + 200'000'000;
            }
          }
          return all;
        },
        ~uint64_t{0} >> 1, clock.NowNs() + 3'600'000'000'000);
    PointResult r;
    r.elapsed_ns = clock.NowNs() - v0;
    r.wall_ns = WallNs() - w0;
    r.bytes = shared.bytes.load();
    r.batches = shared.batches.load();
    r.failures = shared.failures.load();
    r.verify_errors = shared.verify_errors.load();
    if (rr.outcome != sim::RunOutcome::kDone) {
      std::fprintf(stderr, "\nferry-bench: point stopped: %s %s\n",
                   std::string(sim::RunOutcomeName(rr.outcome)).c_str(), rr.detail.c_str());
      ++r.failures;
    }
    for (auto& s : streams) {
      r.lat_ns.insert(r.lat_ns.end(), s->latencies_ns.begin(), s->latencies_ns.end());
      r.submit_ns.insert(r.submit_ns.end(), s->submit_ns.begin(), s->submit_ns.end());
    }
    std::fprintf(stderr, "\r%100s\r", "");
    PrintPoint(o, p, r, true);
    if (r.failures || r.verify_errors) rc = 1;
  }
  // Orderly shutdown and leak check (C9).
  for (Host& hs : hosts) hs.engine->BeginShutdown();
  sched.Run([&] { return hosts[0].engine->WorkersDrained() && hosts[1].engine->WorkersDrained(); },
            50'000'000, clock.NowNs() + 60'000'000'000);
  uint64_t live = 0;
  for (Host& hs : hosts) {
    hs.rt->Stop();
    (void)hs.engine->FinishShutdown();
    live += hs.engine->LiveHandles();
  }
  for (auto k : {sim::ObjectKind::kContext, sim::ObjectKind::kPd, sim::ObjectKind::kMr,
                 sim::ObjectKind::kCompChannel, sim::ObjectKind::kCq, sim::ObjectKind::kQp})
    live += fabric.LiveCount(k);
  std::printf("shutdown: %s; fabric: %" PRIu64 " WRs posted, %" PRIu64
              " CQEs; virtual time %.3f s\n",
              live == 0 ? "no verbs object left" : "LEAK (verbs objects left)",
              fabric.stats().wrs_posted, fabric.stats().cqes_written, clock.NowNs() / 1e9);
  if (live != 0 || !fabric.violations().empty()) rc = 1;
  return rc;
}

// ------------------------------------------------------------------ real
std::atomic<bool> g_interrupted{false};  // signal flag (bench binary only)
[[maybe_unused]] void OnSignal(int) { g_interrupted.store(true); }

int RunReal(const Options& o) {
#ifndef FERRY_HAVE_IBVERBS
  (void)o;
  std::fprintf(stderr, "ferry-bench: built without libibverbs (-Dverbs=disabled)\n");
  return 2;
#else
  if ((o.role != "target" && o.role != "initiator") || o.listen.empty() ||
      (o.role == "initiator" && o.peer.empty())) {
    Usage(stderr);
    return 2;
  }
  auto ctl = hal::TcpControlNet::Create(o.listen);
  if (!ctl.ok()) {
    std::fprintf(stderr, "ferry-bench: listen %s: %s\n", o.listen.c_str(),
                 ctl.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<hal::Verbs> verbs = hal::NewIbverbsVerbs();
  hal::SteadyClock clock;
  hal::OsEntropy entropy;
  EngineConfig cfg = o.config;
  if (!o.device.empty()) cfg.devices = {o.device};
  EngineEnv env{verbs.get(), ctl->get(), &clock, &entropy};
  auto eng = Engine::Create(cfg, env);
  if (!eng.ok()) {
    std::fprintf(stderr, "ferry-bench: engine: %s\n", eng.status().ToString().c_str());
    return 2;
  }
  Engine& e = **eng;
  const uint64_t area = AreaBytes(o);
  const bool target = o.role == "target";
  void* mem =
      target
          ? ::mmap(reinterpret_cast<void*>(kRealTargetBase), 2 * area, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
          : ::mmap(nullptr, 2 * area, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || (target && reinterpret_cast<uint64_t>(mem) != kRealTargetBase)) {
    std::fprintf(stderr, "ferry-bench: cannot map the %s buffer\n", o.role.c_str());
    return 2;
  }
  uint8_t* buf = static_cast<uint8_t*>(mem);
  if (absl::Status s = e.RegisterMemory(buf, 2 * area); !s.ok()) {
    std::fprintf(stderr, "ferry-bench: register: %s\n", s.ToString().c_str());
    return 2;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (target) {
    for (uint64_t k = 0; k < area; ++k) buf[k] = ReadPattern(k);
    std::printf("ferry-bench target: %s\n", DevicesText(e.LocalSegment()).c_str());
    std::printf("ferry-bench target: listening on %s, buffer 0x%" PRIx64 " (%" PRIu64
                " bytes); Ctrl-C to stop\n",
                (*ctl)->LocalAddress().c_str(), kRealTargetBase, 2 * area);
    std::fflush(stdout);
    const uint64_t end = WallNs() + o.serve_s * 1'000'000'000;
    NotifyEcho<Engine> echo(&e);
    while (!g_interrupted.load() && (o.serve_s == 0 || WallNs() < end)) {
      if (!o.notify) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      // Blocks until a notification is delivered (or 1 ms: the answers'
      // batches are freed and the budget checked).
      echo.Tick(e.WaitNotifies(16, 1'000'000));
    }
    if (o.notify) std::printf("target: %" PRIu64 " notifications answered\n", echo.answered);
    absl::Status s = e.Shutdown(cfg.drain_timeout_ns);
    std::printf("target shutdown: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  auto seg = e.OpenSegment(o.peer, 10'000'000'000);
  if (!seg.ok()) {
    std::fprintf(stderr, "ferry-bench: open %s: %s\n", o.peer.c_str(),
                 seg.status().ToString().c_str());
    return 2;
  }
  Layout lay;
  lay.local = buf;
  lay.scratch = buf + area;
  lay.remote_read = kRealTargetBase;
  lay.remote_write = kRealTargetBase + area;
  lay.segment = *seg;
  const std::vector<Point> plan = Plan(o);
  std::printf("ferry-bench mode=real initiator %s -> %s device=%s; %zu points\n",
              (*ctl)->LocalAddress().c_str(), o.peer.c_str(), o.device.c_str(), plan.size());
  std::printf("local: %s (gid_index %s)\n", DevicesText(e.LocalSegment()).c_str(),
              o.config.gid_index < 0 ? "auto" : absl::StrCat(o.config.gid_index).c_str());
  if (int w = WarmUp(e, lay, area); w != 0) return w;
  PrintHeader(false);
  int rc = 0;
  uint64_t total_batches = 0, total_failures = 0, total_verify_errors = 0, points_run = 0;
  for (size_t pi = 0; pi < plan.size() && !g_interrupted.load(); ++pi) {
    const Point& p = plan[pi];
    Shared shared;
    std::vector<std::unique_ptr<Stream<Engine>>> streams;
    for (uint32_t s = 0; s < p.threads; ++s)
      streams.push_back(std::make_unique<Stream<Engine>>(&e, p, lay, s, o.verify, &shared,
                                                         o.point_bytes, [] { return WallNs(); }));
    const uint64_t w0 = WallNs();
    std::vector<std::thread> th;
    for (auto& s : streams)
      th.emplace_back([&s, &shared, &o] {
        // A user thread that spins takes a CPU from the workers and the
        // device (on Soft-RoCE the kernel does the device's work): block in
        // WaitBatch until the worker publishes (bounded, so an interrupt or
        // the point's budget is seen), or sleep --poll_us between polls.
        while (!s->Tick()) {
          if (g_interrupted.load()) shared.stop.store(true);
          if (o.poll_us == 0) {
            s->WaitInFlight(kRealWaitMaxNs);
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(o.poll_us));
          }
        }
      });
    while (true) {
      bool done = shared.stop.load() || shared.bytes.load() >= o.point_bytes;
      if (WallNs() - w0 > o.point_ms * 1'000'000) shared.stop.store(true);
      Progress(pi, plan.size(), p, shared, o.point_bytes);
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (auto& t : th) t.join();
    PointResult r;
    r.wall_ns = WallNs() - w0;
    // The point ends with its last counted batch, not at this thread's next
    // 200 ms look at the counters (that rounding cut short points' rates).
    uint64_t last_ns = 0;
    for (auto& s : streams) last_ns = std::max(last_ns, s->last_done_ns());
    r.elapsed_ns = last_ns > w0 ? last_ns - w0 : r.wall_ns;
    r.bytes = shared.bytes.load();
    r.batches = shared.batches.load();
    r.failures = shared.failures.load();
    r.verify_errors = shared.verify_errors.load();
    for (auto& s : streams) {
      r.lat_ns.insert(r.lat_ns.end(), s->latencies_ns.begin(), s->latencies_ns.end());
      r.submit_ns.insert(r.submit_ns.end(), s->submit_ns.begin(), s->submit_ns.end());
    }
    std::fprintf(stderr, "\r%100s\r", "");
    PrintPoint(o, p, r, false);
    if (r.failures || r.verify_errors) rc = 1;
    ++points_run;
    total_batches += r.batches;
    total_failures += r.failures;
    total_verify_errors += r.verify_errors;
  }
  if (points_run != plan.size()) rc = 1;  // interrupted
  // One machine-readable line (scripts/softroce/ferry-bench-real checks it).
  std::printf("totals: points=%" PRIu64 "/%zu completed_batches=%" PRIu64 " failed_batches=%" PRIu64
              " verify=%s verify_errors=%" PRIu64 "\n",
              points_run, plan.size(), total_batches, total_failures, o.verify ? "on" : "off",
              total_verify_errors);
  absl::Status s = e.Shutdown(cfg.drain_timeout_ns);
  std::printf("initiator shutdown: %s\n", s.ToString().c_str());
  return s.ok() ? rc : 1;
#endif
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help") {
      ferry::bench::Usage(stdout);
      return 0;
    }
  }
  auto o = ferry::bench::Parse(argc, argv);
  if (!o) {
    ferry::bench::Usage(stderr);
    return 2;
  }
  return o->mode == "sim" ? ferry::bench::RunSim(*o) : ferry::bench::RunReal(*o);
}
