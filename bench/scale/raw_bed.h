// bench/scale/raw_bed.h: the scale benchmark's baseline without the engine:
// the same rounds as ScaleBed's (scale_bench.cc) driven by a raw HAL
// post/poll loop, so the simulated RNIC's own cost at N QPs is measured
// apart from the engine's.
//
// Shape, as ScaleBed's at N endpoints: host 0 has one 64 KiB registered
// buffer and N RC QPs (wr_depth 16, one per endpoint), on 1 CQ up to 128
// QPs and 8 above (as BenchConfig); host 1 has N protection domains, each
// with its own MR over one shared 64 KiB buffer (N target engines) and the
// peer QP. Up to 64 one-slice WRITEs are in flight (kTasks x kBatches);
// each round gives the free ones to the QPs round robin, skipping a full
// QP, posts one chain per QP, settles the fabric for `settle_ns` of
// virtual time and polls every CQ empty.
//
// What must stay true: a slice counts only after its success CQE; any
// error aborts; no QP ever holds more than its depth.
#ifndef FERRY_BENCH_SCALE_RAW_BED_H_
#define FERRY_BENCH_SCALE_RAW_BED_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "bench/raw_rc.h"
#include "bench/zero_latency.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/virtual_clock.h"

namespace ferry::bench {

class RawScaleBed {
 public:
  static constexpr uint64_t kSliceBytes = 4096;
  static constexpr uint32_t kInFlightMax = 64;  // kTasks x kBatches of ScaleBed
  static constexpr uint32_t kDepth = 16;        // BenchConfig's wr_depth
  static constexpr uint64_t kBufferBytes = 64 * 1024;
  static constexpr uint32_t kAccess =
      hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;
  // CQs for `qps` QPs of depth kDepth (ScaleBed's cqs_per_worker too):
  // 1024 x 16 WRs are 8 CQs of 128 x 16 = 2048 CQEs each.
  static constexpr uint32_t CqsFor(uint32_t qps) { return qps > 128 ? 8 : 1; }

  RawScaleBed(uint32_t qps, uint64_t settle_ns) : settle_ns_(settle_ns) {
    fabric_ = std::make_unique<sim::Fabric>(ZeroLatencyFabric(), sim::Prng(11), &clock_);
    for (int s = 0; s < 2; ++s) {
      v_[s] = fabric_->NewVerbs(s);
      ctx_[s] = Must(v_[s]->OpenDevice("sim0"), "open");
      buf_[s].assign(kBufferBytes, static_cast<uint8_t>(1 + s));
    }
    const hal::PdHandle pd0 = Must(v_[0]->AllocPd(ctx_[0]), "pd");
    local_ = Must(v_[0]->RegMr(pd0, buf_[0].data(), buf_[0].size(), kAccess), "mr");
    const uint32_t ncq = CqsFor(qps);
    for (uint32_t c = 0; c < ncq; ++c)
      cqs_.push_back(Must(v_[0]->CreateCq(ctx_[0], 4096, {}), "cq").cq);
    const hal::CqHandle target_cq = Must(v_[1]->CreateCq(ctx_[1], 4096, {}), "cq").cq;
    for (uint32_t q = 0; q < qps; ++q) {
      const hal::PdHandle pd1 = Must(v_[1]->AllocPd(ctx_[1]), "pd");
      const hal::MrInfo mr = Must(v_[1]->RegMr(pd1, buf_[1].data(), buf_[1].size(), kAccess), "mr");
      const RcSide side[2] = {{v_[0].get(), ctx_[0], pd0, cqs_[q % ncq]},
                              {v_[1].get(), ctx_[1], pd1, target_cq}};
      qps_.push_back(Must(ConnectRcPair(side, kDepth, kAccess), "connect")[0]);
      rkeys_.push_back(mr.rkey);
    }
    outstanding_.assign(qps, 0);
    chains_.resize(qps);
  }

  // Rounds until every QP has carried two rounds' WRs (as ScaleBed's
  // WarmUp), outside Round.
  [[gnu::noinline]] void WarmUp() {
    const uint64_t slices = 2 * std::max<uint64_t>(qps_.size(), kInFlightMax);
    for (uint64_t done = 0; done < slices;) done += RoundBody();
  }

  // One round: post the free slices, settle, poll. Returns CQEs polled.
  [[gnu::noinline]] uint64_t Round() { return RoundBody(); }

 private:
  template <typename T>
  static T Must(absl::StatusOr<T> v, const char* what) {
    if (!v.ok()) Fail(std::string(what) + ": " + v.status().ToString());
    return *std::move(v);
  }

  [[gnu::always_inline]] inline uint64_t RoundBody() {
    const uint32_t n = static_cast<uint32_t>(qps_.size());
    // The free slices to QPs round robin; a full QP is passed over (at
    // most one pass over the QPs per slice).
    touched_.clear();
    for (uint32_t k = 0; k < kInFlightMax - in_flight_; ++k) {
      uint32_t q = n;
      for (uint32_t tries = 0; tries < n; ++tries) {
        const uint32_t cand = static_cast<uint32_t>(next_qp_++ % n);
        if (outstanding_[cand] + chains_[cand].size() < kDepth) {
          q = cand;
          break;
        }
      }
      if (q == n) break;  // every QP is full
      if (chains_[q].empty()) touched_.push_back(q);
      chains_[q].push_back(Wr(q, next_slice_++));
    }
    for (uint32_t q : touched_) {
      auto r = v_[0]->PostSend(qps_[q], absl::MakeConstSpan(chains_[q]));
      if (!r.status.ok()) Fail("post");
      outstanding_[q] += static_cast<uint32_t>(chains_[q].size());
      in_flight_ += static_cast<uint32_t>(chains_[q].size());
      chains_[q].clear();
    }
    fabric_->Settle(settle_ns_);
    uint64_t got = 0;
    hal::WorkCompletion wc[64];
    for (hal::CqHandle cq : cqs_) {
      for (int guard = 0; guard < 1024; ++guard) {
        auto m = v_[0]->PollCq(cq, absl::MakeSpan(wc, 64));
        if (!m.ok()) Fail("poll");
        if (*m == 0) break;
        for (uint32_t i = 0; i < *m; ++i) {
          if (wc[i].status != hal::WcStatus::kSuccess) Fail("CQE error");
          --outstanding_[wc[i].wr_id];
        }
        got += *m;
      }
    }
    in_flight_ -= static_cast<uint32_t>(got);
    return got;
  }

  hal::SendWr Wr(uint32_t q, uint64_t slice) const {
    const uint64_t off = (slice % (kBufferBytes / kSliceBytes)) * kSliceBytes;
    hal::SendWr w;
    w.wr_id = q;
    w.opcode = hal::Opcode::kRdmaWrite;
    w.send_flags = hal::kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(buf_[0].data()) + off,
                            static_cast<uint32_t>(kSliceBytes), local_.lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(buf_[1].data()) + off;
    w.rkey = rkeys_[q];
    return w;
  }

  [[noreturn]] static void Fail(const std::string& what) {
    std::fprintf(stderr, "raw_bed: %s\n", what.c_str());
    std::abort();
  }

  sim::VirtualClock clock_;
  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<hal::Verbs> v_[2];
  hal::ContextHandle ctx_[2];
  std::vector<uint8_t> buf_[2];
  hal::MrInfo local_;
  std::vector<hal::CqHandle> cqs_;
  std::vector<hal::QpHandle> qps_;
  std::vector<uint32_t> rkeys_;
  std::vector<uint32_t> outstanding_;             // per QP: posted, no CQE yet
  std::vector<std::vector<hal::SendWr>> chains_;  // per QP: this round's chain
  std::vector<uint32_t> touched_;                 // QPs with a chain this round, in order
  uint32_t in_flight_ = 0;
  uint64_t next_qp_ = 0, next_slice_ = 0;
  uint64_t settle_ns_;
};

}  // namespace ferry::bench

#endif  // FERRY_BENCH_SCALE_RAW_BED_H_
