// bench/raw_rc.h: one connected RC QP pair through the HAL alone, for the
// benchmarks' raw baselines (a post/poll loop without the engine).
//
// Owns nothing: the caller's verbs, PDs and CQs; the QPs it creates stay
// the caller's (a benchmark process keeps them to its end).
// What must stay true: both QPs end in RTS, each the other's destination,
// with the attributes the engine's handshake would give them (MTU 1024,
// the access flags asked for); any refused step is an error returned, never
// a half-connected pair used.
#ifndef FERRY_BENCH_RAW_RC_H_
#define FERRY_BENCH_RAW_RC_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::bench {

// One side of the pair: where its QP is created.
struct RcSide {
  hal::Verbs* verbs = nullptr;
  hal::ContextHandle ctx;
  hal::PdHandle pd;
  hal::CqHandle cq;  // its send and receive CQ
};

// Creates one QP on each side (max_send_wr = depth), connects them and
// moves both to RTS. Returns {side 0's QP, side 1's QP}.
inline absl::StatusOr<std::array<hal::QpHandle, 2>> ConnectRcPair(const RcSide (&side)[2],
                                                                  uint32_t depth, uint32_t access) {
  hal::QpInfo qi[2];
  for (int s = 0; s < 2; ++s) {
    hal::QpInitAttr init;
    init.send_cq = init.recv_cq = side[s].cq;
    init.cap.max_send_wr = depth;
    auto made = side[s].verbs->CreateQp(side[s].pd, init);
    if (!made.ok()) return made.status();
    qi[s] = *made;
  }
  for (int s = 0; s < 2; ++s) {
    hal::Verbs& v = *side[s].verbs;
    hal::QpAttr a;
    a.qp_state = hal::QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags = access;
    absl::Status st = v.ModifyQp(
        qi[s].qp, a, hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("INIT: ", st.message()));
    auto gid = side[1 - s].verbs->QueryGid(side[1 - s].ctx, 1, 0);
    if (!gid.ok()) return gid.status();
    a.qp_state = hal::QpState::kRtr;
    a.path_mtu = hal::Mtu::k1024;
    a.dest_qp_num = qi[1 - s].qp_num;
    a.ah_attr.dgid = *gid;
    st = v.ModifyQp(qi[s].qp, a,
                    hal::kQpState | hal::kQpAv | hal::kQpPathMtu | hal::kQpDestQpn | hal::kQpRqPsn |
                        hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("RTR: ", st.message()));
    a.qp_state = hal::QpState::kRts;
    st = v.ModifyQp(qi[s].qp, a,
                    hal::kQpState | hal::kQpSqPsn | hal::kQpMaxQpRdAtomic | hal::kQpRetryCnt |
                        hal::kQpRnrRetry | hal::kQpTimeout);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("RTS: ", st.message()));
  }
  return std::array<hal::QpHandle, 2>{qi[0].qp, qi[1].qp};
}

}  // namespace ferry::bench

#endif  // FERRY_BENCH_RAW_RC_H_
