// bench/hal_probe/hal_probe.cc: a raw-verbs RDMA bandwidth and latency
// probe through Ferry's HAL (hal::Verbs from hal::NewIbverbsVerbs()), so the
// HAL's overhead is known before the engine adds its own. One process opens
// two devices (default rxe0 and rxe1) and connects one RC QP pair between
// them. A posts (`--op=write`: RDMA WRITE A -> B; `--op=read`: RDMA READ of
// B into A).
// - Bandwidth (default), like perftest's ib_write_bw: a fixed number of
//   iterations per size, at most `window` WRs outstanding, every
//   `signal_every`-th WR (and the last) signaled, `post_batch` WRs per
//   PostSend call (default 1, as perftest's default post list). One line
//   per size:
//     hal_probe size_bytes=4096 iters=5000 window=128 secs=0.812 gbps=0.201
// - Latency (`--latency=1`): one signaled WR at a time, each timed from
//   just before its PostSend to the poll that returns its CQE (busy
//   polling). For a WRITE that is the time to its completion, the ACK
//   included, which is what Ferry's WRITE latency times and what
//   ib_write_lat (half a ping-pong) does not. One line per size:
//     hal_probe_lat op=write size_bytes=4096 iters=1000 p50_us=.. p99_us=.. p999_us=..
//
// What must stay true: every wait is bounded by a wall-clock deadline
// (--deadline_s); any verbs error or error completion ends the run with a
// non-zero exit and the reason on stderr; all objects are freed in verbs
// order on every path (CloseDevice frees what is left). Wall clocks are fine
// here: this is a benchmark, not sim/ or engine/ code.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "bench/quantile.h"
#include "hal/ibverbs/ibverbs.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::bench {
namespace {

constexpr uint32_t kAccess =
    hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;
constexpr uint32_t kPostBatchMax = 32;  // bound on WRs per PostSend call
constexpr uint32_t kPollBatch = 32;     // CQEs per PollCq call
constexpr uint32_t kWindowMax = 1024;   // bound on outstanding WRs
constexpr uint64_t kSizeBytesMax = 1 << 30;
constexpr uint64_t kPageBytes = 4096;
constexpr uint8_t kRdAtomic = 16;  // READs in flight per QP (both ends)

struct Options {
  std::string dev_a = "rxe0";
  std::string dev_b = "rxe1";
  int gid_index = -1;  // -1: FERRY_RXE_GID_INDEX, else error
  std::vector<uint64_t> sizes_bytes = {4096, 65536, 1 << 20};
  std::vector<uint64_t> iters = {5000, 1000, 100};
  uint32_t window = 128;
  uint32_t signal_every = 64;
  uint32_t post_batch = 1;  // WRs per PostSend call (perftest: 1)
  uint64_t deadline_s = 300;
  hal::Opcode op = hal::Opcode::kRdmaWrite;
  bool latency = false;  // one WR at a time, timed to its CQE
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

absl::StatusOr<std::vector<uint64_t>> ParseList(absl::string_view text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad list entry '", part, "' in '", text,
                                                     "' (positive integers, comma-separated)"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  if (const char* g = std::getenv("FERRY_RXE_GID_INDEX"); g != nullptr) {
    if (!absl::SimpleAtoi(g, &o.gid_index)) {
      return absl::InvalidArgumentError(absl::StrCat("bad FERRY_RXE_GID_INDEX '", g, "'"));
    }
  }
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.substr(0, 2) != "--" || eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad argument '", arg, "' (want --key=value)"));
    }
    const absl::string_view key = arg.substr(2, eq - 2), val = arg.substr(eq + 1);
    uint64_t n = 0;
    if (key == "dev_a") {
      o.dev_a = std::string(val);
    } else if (key == "dev_b") {
      o.dev_b = std::string(val);
    } else if (key == "gid_index") {
      if (!absl::SimpleAtoi(val, &o.gid_index))
        return absl::InvalidArgumentError("bad --gid_index");
    } else if (key == "sizes") {
      FERRY_ASSIGN_OR_RETURN(o.sizes_bytes, ParseList(val));
    } else if (key == "iters") {
      FERRY_ASSIGN_OR_RETURN(o.iters, ParseList(val));
    } else if (key == "window" && absl::SimpleAtoi(val, &n)) {
      o.window = static_cast<uint32_t>(std::min<uint64_t>(n, kWindowMax + 1));
    } else if (key == "signal_every" && absl::SimpleAtoi(val, &n)) {
      o.signal_every = static_cast<uint32_t>(std::min<uint64_t>(n, kWindowMax + 1));
    } else if (key == "post_batch" && absl::SimpleAtoi(val, &n)) {
      o.post_batch = static_cast<uint32_t>(std::min<uint64_t>(n, kPostBatchMax + 1));
    } else if (key == "deadline_s" && absl::SimpleAtoi(val, &n)) {
      o.deadline_s = n;
    } else if (key == "op" && (val == "write" || val == "read")) {
      o.op = val == "write" ? hal::Opcode::kRdmaWrite : hal::Opcode::kRdmaRead;
    } else if (key == "latency" && (val == "0" || val == "1")) {
      o.latency = val == "1";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown or bad option '", arg, "'"));
    }
  }
  if (o.gid_index < 0 || o.gid_index > 255) {
    return absl::InvalidArgumentError(
        "no GID index: pass --gid_index=N or set FERRY_RXE_GID_INDEX");
  }
  if (o.iters.size() == 1) o.iters.assign(o.sizes_bytes.size(), o.iters[0]);
  if (o.iters.size() != o.sizes_bytes.size()) {
    return absl::InvalidArgumentError("--iters needs one entry, or one per size");
  }
  for (uint64_t s : o.sizes_bytes) {
    if (s > kSizeBytesMax) return absl::InvalidArgumentError("size above 1 GiB");
  }
  if (o.window == 0 || o.window > kWindowMax) {
    return absl::InvalidArgumentError(absl::StrCat("--window must be 1..", kWindowMax));
  }
  if (o.post_batch == 0 || o.post_batch > kPostBatchMax) {
    return absl::InvalidArgumentError(absl::StrCat("--post_batch must be 1..", kPostBatchMax));
  }
  if (o.signal_every == 0 || o.signal_every > o.window) {
    return absl::InvalidArgumentError("--signal_every must be 1..window");
  }
  return o;
}

// One side: device context and its objects. Freed by Close (verbs order).
struct Side {
  hal::ContextHandle ctx;
  hal::PdHandle pd;
  hal::CqInfo cq;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf{nullptr, &std::free};  // page-aligned
  uint64_t buf_bytes = 0;
  hal::MrInfo mr;
  hal::QpInfo qp;
  hal::Gid gid;
  hal::Mtu mtu = hal::Mtu::k1024;
};

class Probe {
 public:
  Probe(hal::Verbs& v, const Options& o) : v_(v), o_(o) {}
  ~Probe() { Close(); }

  absl::Status Setup() {
    const uint64_t buf_bytes = *std::max_element(o_.sizes_bytes.begin(), o_.sizes_bytes.end());
    const std::string devs[2] = {o_.dev_a, o_.dev_b};
    for (int i = 0; i < 2; ++i) {
      Side& s = side_[i];
      FERRY_ASSIGN_OR_RETURN(s.ctx, v_.OpenDevice(devs[i]));
      opened_[i] = true;
      FERRY_ASSIGN_OR_RETURN(s.pd, v_.AllocPd(s.ctx));
      FERRY_ASSIGN_OR_RETURN(s.cq, v_.CreateCq(s.ctx, 2 * o_.window, hal::CompChannelHandle{}));
      // Page-aligned like perftest's buffers: an unaligned one makes rxe copy
      // every MTU-sized packet in two pieces.
      s.buf_bytes = (buf_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
      s.buf.reset(static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, s.buf_bytes)));
      if (s.buf == nullptr) return absl::ResourceExhaustedError("buffer allocation failed");
      std::memset(s.buf.get(), 0xA0 + i, s.buf_bytes);
      FERRY_ASSIGN_OR_RETURN(s.mr, v_.RegMr(s.pd, s.buf.get(), s.buf_bytes, kAccess));
      FERRY_ASSIGN_OR_RETURN(s.gid, v_.QueryGid(s.ctx, 1, o_.gid_index));
      FERRY_ASSIGN_OR_RETURN(const hal::PortAttr port, v_.QueryPort(s.ctx, 1));
      if (port.state != hal::PortState::kActive) {
        return absl::FailedPreconditionError(absl::StrCat(devs[i], " port 1 is not active"));
      }
      s.mtu = port.active_mtu;
      hal::QpInitAttr init;
      init.send_cq = init.recv_cq = s.cq.cq;
      init.cap.max_send_wr = o_.window;
      init.cap.max_recv_wr = 1;
      FERRY_ASSIGN_OR_RETURN(s.qp, v_.CreateQp(s.pd, init));
    }
    for (int i = 0; i < 2; ++i) FERRY_RETURN_IF_ERROR(Connect(i));
    return absl::OkStatus();
  }

  // Streams `iters` WRs of the probe's op, `size_bytes` each; returns the
  // elapsed ns from the first post to the last completion.
  absl::StatusOr<uint64_t> Run(uint64_t size_bytes, uint64_t iters) {
    FERRY_CHECK_LE(size_bytes, side_[0].buf_bytes);
    const uint64_t t0 = NowNs();
    const uint64_t deadline = t0 + o_.deadline_s * 1'000'000'000;
    uint64_t posted = 0, completed = 0;
    std::vector<hal::SendWr> chain(kPostBatchMax);
    hal::WorkCompletion wc[kPollBatch];
    // Each loop turn posts or completes at least one WR, or spends time
    // toward the deadline: bounded by the deadline.
    while (completed < iters) {
      FERRY_CHECK_LE(posted - completed, uint64_t{o_.window});
      const uint64_t room = std::min<uint64_t>(o_.window - (posted - completed), iters - posted);
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(room, o_.post_batch));
      for (uint32_t k = 0; k < n; ++k) {
        const uint64_t seq = posted + k;  // 0-based
        const bool last = seq + 1 == iters;
        chain[k] = MakeWr(seq, size_bytes, (seq + 1) % o_.signal_every == 0 || last);
      }
      if (n > 0) {
        const hal::PostResult r = v_.PostSend(side_[0].qp.qp, absl::MakeConstSpan(chain.data(), n));
        FERRY_RETURN_IF_ERROR(r.status);
        posted += n;
      }
      FERRY_ASSIGN_OR_RETURN(const uint32_t got,
                             v_.PollCq(side_[0].cq.cq, absl::MakeSpan(wc, kPollBatch)));
      for (uint32_t k = 0; k < got; ++k) {
        if (wc[k].status != hal::WcStatus::kSuccess) {
          return absl::InternalError(absl::StrCat("WR ", wc[k].wr_id, " completed with status ",
                                                  static_cast<int>(wc[k].status)));
        }
        FERRY_CHECK_GE(wc[k].wr_id + 1, completed + 1);
        completed = wc[k].wr_id + 1;  // a signaled CQE retires every WR before it
      }
      FERRY_CHECK_LE(completed, posted);
      if (got == 0 && NowNs() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(size_bytes, " B: ", completed, " of ",
                                                        iters, " WRs done at the deadline"));
      }
    }
    return NowNs() - t0;
  }

  // Posts `iters` signaled WRs of `size_bytes` one at a time; returns each
  // one's time from just before its PostSend to the poll that returned its
  // CQE, in ns, in post order.
  absl::StatusOr<std::vector<uint64_t>> RunLatency(uint64_t size_bytes, uint64_t iters) {
    FERRY_CHECK_LE(size_bytes, side_[0].buf_bytes);
    const uint64_t deadline = NowNs() + o_.deadline_s * 1'000'000'000;
    std::vector<uint64_t> ns;
    ns.reserve(iters);
    hal::WorkCompletion wc[kPollBatch];
    for (uint64_t seq = 0; seq < iters; ++seq) {
      const hal::SendWr w = MakeWr(seq, size_bytes, true);
      const uint64_t t0 = NowNs();
      FERRY_RETURN_IF_ERROR(v_.PostSend(side_[0].qp.qp, absl::MakeConstSpan(&w, 1)).status);
      // Busy polling, bounded by the deadline.
      for (;;) {
        FERRY_ASSIGN_OR_RETURN(const uint32_t got,
                               v_.PollCq(side_[0].cq.cq, absl::MakeSpan(wc, kPollBatch)));
        if (got > 0) {
          FERRY_CHECK_EQ(got, 1u);  // one WR outstanding
          FERRY_CHECK_EQ(wc[0].wr_id, seq);
          if (wc[0].status != hal::WcStatus::kSuccess) {
            return absl::InternalError(absl::StrCat("WR ", seq, " completed with status ",
                                                    static_cast<int>(wc[0].status)));
          }
          ns.push_back(NowNs() - t0);
          break;
        }
        if (NowNs() > deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat(size_bytes, " B: ", seq, " of ", iters, " WRs done at the deadline"));
        }
      }
    }
    return ns;
  }

  uint32_t path_mtu_bytes() const {
    return 128u << static_cast<uint8_t>(std::min(side_[0].mtu, side_[1].mtu));
  }

 private:
  absl::Status Connect(int i) {
    Side& s = side_[i];
    const Side& peer = side_[1 - i];
    hal::QpAttr a;
    a.qp_state = hal::QpState::kInit;
    a.port_num = 1;
    a.pkey_index = 0;
    a.qp_access_flags = kAccess;
    FERRY_RETURN_IF_ERROR(v_.ModifyQp(
        s.qp.qp, a, hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags));
    a = hal::QpAttr{};
    a.qp_state = hal::QpState::kRtr;
    a.path_mtu = std::min(s.mtu, peer.mtu);
    a.dest_qp_num = peer.qp.qp_num;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = kRdAtomic;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = true;
    a.ah_attr.dgid = peer.gid;
    a.ah_attr.sgid_index = static_cast<uint8_t>(o_.gid_index);
    a.ah_attr.hop_limit = 64;
    a.ah_attr.port_num = 1;
    FERRY_RETURN_IF_ERROR(v_.ModifyQp(s.qp.qp, a,
                                      hal::kQpState | hal::kQpAv | hal::kQpPathMtu |
                                          hal::kQpDestQpn | hal::kQpRqPsn |
                                          hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer));
    a = hal::QpAttr{};
    a.qp_state = hal::QpState::kRts;
    a.sq_psn = 0;
    a.timeout = 14;   // ~67 ms: TCG timers fire late now and then
    a.retry_cnt = 7;  // rxe: retry forever (the deadline bounds the run)
    a.rnr_retry = 7;
    a.max_rd_atomic = kRdAtomic;
    return v_.ModifyQp(s.qp.qp, a,
                       hal::kQpState | hal::kQpSqPsn | hal::kQpMaxQpRdAtomic | hal::kQpRetryCnt |
                           hal::kQpRnrRetry | hal::kQpTimeout);
  }

  // One WR of the probe's op: A's buffer start <-> B's buffer start.
  hal::SendWr MakeWr(uint64_t seq, uint64_t size_bytes, bool signaled) const {
    hal::SendWr w;
    w.wr_id = seq;
    w.opcode = o_.op;
    w.send_flags = signaled ? uint32_t{hal::kSendSignaled} : 0u;
    w.num_sge = 1;
    w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(side_[0].buf.get()),
                            static_cast<uint32_t>(size_bytes), side_[0].mr.lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(side_[1].buf.get());
    w.rkey = side_[1].mr.rkey;
    return w;
  }

  // CloseDevice destroys whatever the context still holds.
  void Close() {
    for (int i = 0; i < 2; ++i) {
      if (!opened_[i]) continue;
      if (absl::Status st = v_.CloseDevice(side_[i].ctx); !st.ok()) {
        std::fprintf(stderr, "hal_probe: close: %s\n", st.ToString().c_str());
      }
      opened_[i] = false;
    }
  }

  hal::Verbs& v_;
  const Options& o_;
  Side side_[2];
  bool opened_[2] = {false, false};
};

int Main(int argc, char** argv) {
  auto opts = ParseArgs(argc, argv);
  if (!opts.ok()) {
    std::fprintf(stderr,
                 "hal_probe: %s\nusage: hal_probe [--dev_a=rxe0] [--dev_b=rxe1] [--gid_index=N] "
                 "[--sizes=4096,65536,1048576] [--iters=5000,1000,100] [--window=128] "
                 "[--signal_every=64] [--post_batch=1] [--deadline_s=300] [--op=write|read] "
                 "[--latency=0|1]\n",
                 opts.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<hal::Verbs> v = hal::NewIbverbsVerbs();
  Probe probe(*v, *opts);
  if (absl::Status st = probe.Setup(); !st.ok()) {
    std::fprintf(stderr, "hal_probe: setup: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("hal_probe %s -> %s gid_index=%d path_mtu_bytes=%u\n", opts->dev_a.c_str(),
              opts->dev_b.c_str(), opts->gid_index, probe.path_mtu_bytes());
  for (size_t i = 0; i < opts->sizes_bytes.size(); ++i) {
    const uint64_t size = opts->sizes_bytes[i], iters = opts->iters[i];
    if (opts->latency) {
      auto lat = probe.RunLatency(size, iters);
      if (!lat.ok()) {
        std::fprintf(stderr, "hal_probe: run: %s\n", lat.status().ToString().c_str());
        return 1;
      }
      std::printf(
          "hal_probe_lat op=%s size_bytes=%llu iters=%llu p50_us=%.1f p99_us=%.1f "
          "p999_us=%.1f\n",
          opts->op == hal::Opcode::kRdmaRead ? "read" : "write",
          static_cast<unsigned long long>(size), static_cast<unsigned long long>(iters),
          static_cast<double>(Quantile(*lat, 500)) / 1e3,
          static_cast<double>(Quantile(*lat, 990)) / 1e3,
          static_cast<double>(Quantile(*lat, 999)) / 1e3);
      std::fflush(stdout);
      continue;
    }
    auto ns = probe.Run(size, iters);
    if (!ns.ok()) {
      std::fprintf(stderr, "hal_probe: run: %s\n", ns.status().ToString().c_str());
      return 1;
    }
    const double secs = static_cast<double>(*ns) / 1e9;
    const double gbps = static_cast<double>(size * iters) * 8.0 / static_cast<double>(*ns);
    std::printf(
        "hal_probe size_bytes=%llu iters=%llu window=%u post_batch=%u secs=%.3f gbps=%.3f\n",
        static_cast<unsigned long long>(size), static_cast<unsigned long long>(iters), opts->window,
        opts->post_batch, secs, gbps);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) { return ferry::bench::Main(argc, argv); }
