// bench/sim_rnic_bench.cc: WR completions per second of the simulated RNIC
// (one core, virtual time): 1 QP and 64 QPs sharing one CQ, 64 B and 4 KiB
// RDMA WRITEs, each QP kept 32 WRs deep; every WR signalled and polled.
// Issue 3 goal: >= 5 M WR completions/s with 64 QPs and 64 B.
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "hal/types.h"
#include "hal/verbs.h"
#include "sim/prng.h"
#include "sim/rnic/fabric.h"
#include "sim/virtual_clock.h"

namespace ferry::sim {
namespace {

constexpr uint32_t kAccess =
    hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;
constexpr uint32_t kDepth = 32;

struct Bed {
  VirtualClock clock;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<hal::Verbs> v[2];
  hal::ContextHandle ctx[2];
  hal::PdHandle pd[2];
  hal::CqHandle cq[2];
  std::vector<uint8_t> buf[2];
  hal::MrInfo mr[2];
  std::vector<hal::QpHandle> qps;
  std::vector<std::vector<hal::SendWr>> chains;

  Bed(uint32_t nqp, uint32_t len, bool jitter) {
    FabricConfig cfg;
    if (!jitter) {
      cfg.link_jitter_ns = 0;
      cfg.cqe_jitter_ns = 0;
    }
    fabric = std::make_unique<Fabric>(cfg, Prng(1), &clock);
    for (int s = 0; s < 2; ++s) {
      v[s] = fabric->NewVerbs(s);
      ctx[s] = *v[s]->OpenDevice("sim0");
      pd[s] = *v[s]->AllocPd(ctx[s]);
      cq[s] = v[s]->CreateCq(ctx[s], 4096, {})->cq;
      buf[s].assign(size_t{nqp} * kDepth * len, 0);
      mr[s] = *v[s]->RegMr(pd[s], buf[s].data(), buf[s].size(), kAccess);
    }
    for (uint32_t q = 0; q < nqp; ++q) {
      hal::QpInfo qi[2];
      for (int s = 0; s < 2; ++s) {
        hal::QpInitAttr init;
        init.send_cq = init.recv_cq = cq[s];
        init.cap.max_send_wr = kDepth;
        qi[s] = *v[s]->CreateQp(pd[s], init);
      }
      for (int s = 0; s < 2; ++s) {
        hal::QpAttr a;
        a.qp_state = hal::QpState::kInit;
        a.port_num = 1;
        a.qp_access_flags = kAccess;
        (void)v[s]->ModifyQp(
            qi[s].qp, a, hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags);
        a.qp_state = hal::QpState::kRtr;
        a.path_mtu = hal::Mtu::k1024;
        a.dest_qp_num = qi[1 - s].qp_num;
        a.ah_attr.dgid = *v[1 - s]->QueryGid(ctx[1 - s], 1, 0);
        (void)v[s]->ModifyQp(qi[s].qp, a,
                             hal::kQpState | hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn |
                                 hal::kQpRqPsn | hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer);
        a.qp_state = hal::QpState::kRts;
        (void)v[s]->ModifyQp(qi[s].qp, a,
                             hal::kQpState | hal::kQpSqPsn | hal::kQpMaxQpRdAtomic |
                                 hal::kQpRetryCnt | hal::kQpRnrRetry | hal::kQpTimeout);
      }
      qps.push_back(qi[0].qp);
      std::vector<hal::SendWr> chain(kDepth);
      for (uint32_t i = 0; i < kDepth; ++i) {
        const uint64_t off = (uint64_t{q} * kDepth + i) * len;
        hal::SendWr& w = chain[i];
        w.wr_id = i;
        w.opcode = hal::Opcode::kRdmaWrite;
        w.send_flags = hal::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = hal::Sge{reinterpret_cast<uint64_t>(buf[0].data()) + off, len, mr[0].lkey};
        w.remote_addr = reinterpret_cast<uint64_t>(buf[1].data()) + off;
        w.rkey = mr[1].rkey;
      }
      chains.push_back(std::move(chain));
    }
  }

  // Posts kDepth WRs on every QP, runs the RNIC, polls every CQE.
  uint64_t Round() {
    for (size_t q = 0; q < qps.size(); ++q) {
      if (!v[0]->PostSend(qps[q], chains[q]).status.ok()) std::abort();
    }
    const uint64_t want = qps.size() * kDepth;
    uint64_t got = 0;
    hal::WorkCompletion wc[64];
    // The RNIC runs until idle (every WR executed and acknowledged), then
    // the CQ is drained in batches of 64, as an engine worker polls.
    fabric->Settle(1'000'000'000);
    for (int guard = 0; guard < 1'000'000 && got < want; ++guard) {
      auto n = v[0]->PollCq(cq[0], absl::MakeSpan(wc, 64));
      if (!n.ok() || *n == 0) break;
      got += *n;
    }
    if (got != want) std::abort();
    return got;
  }
};

void BM_SimRnicWrites(benchmark::State& state) {
  Bed bed(static_cast<uint32_t>(state.range(0)), static_cast<uint32_t>(state.range(1)),
          state.range(2) != 0);
  uint64_t wrs = 0;
  for (auto _ : state) wrs += bed.Round();
  state.counters["wr_completions_per_s"] =
      benchmark::Counter(static_cast<double>(wrs), benchmark::Counter::kIsRate);
  state.counters["virtual_ms"] = static_cast<double>(bed.clock.NowNs()) / 1e6;
}

// Args: QPs, payload bytes, jitter (1 = default config with link and CQE
// jitter; 0 = no jitter draws).
BENCHMARK(BM_SimRnicWrites)
    ->ArgNames({"qps", "bytes", "jitter"})
    ->Args({1, 64, 1})
    ->Args({64, 64, 1})
    ->Args({1, 4096, 1})
    ->Args({64, 4096, 1})
    ->Args({1, 64, 0})
    ->Args({64, 64, 0})
    ->Args({64, 4096, 0});

}  // namespace
}  // namespace ferry::sim

BENCHMARK_MAIN();
