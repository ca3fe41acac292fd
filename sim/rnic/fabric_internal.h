// sim/rnic/fabric_internal.h: constants and small helpers shared by the
// simulated RNIC's source files (fabric.cc and fabric_*.cc, one job each,
// and sim_verbs.cc); private to sim/rnic.
//
// What must stay true: everything here is a constant or a pure function.
#ifndef FERRY_SIM_RNIC_FABRIC_INTERNAL_H_
#define FERRY_SIM_RNIC_FABRIC_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "base/string_view.h"
#include "hal/errno_status.h"
#include "hal/types.h"
#include "sim/rnic/fabric.h"

namespace ferry::sim::fabric_internal {

using base::AV;
using hal::AsyncEventType;
using hal::QpState;
using hal::WcStatus;

inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint64_t kNoSeq = ~uint64_t{0};
inline constexpr uint64_t kHeaderBytes = 58;  // Eth+IP+UDP+BTH+RETH, roughly
inline constexpr uint32_t kAckEvery = 16;     // coalesced ACKs: at least every 16 WRITEs

// Signed distance a - b in 24-bit PSN space.
inline int32_t PsnDiff(uint32_t a, uint32_t b) {
  const uint32_t d = (a - b) & kPsnMask;
  return d >= 0x800000 ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}

inline absl::Status Errno(std::string_view call, int err) { return hal::ErrnoToStatus(call, err); }

inline bool Executing(QpState s) { return s == QpState::kRts || s == QpState::kSqd; }

// A work request executed by the requester alone: no packet, no PSN.
inline bool IsLocalOp(hal::Opcode op) {
  return op == hal::Opcode::kBindMw || op == hal::Opcode::kLocalInv;
}

// A request whose packets carry payload to the responder (placed there).
inline bool CarriesPayload(hal::Opcode op) {
  return op == hal::Opcode::kRdmaWrite || op == hal::Opcode::kRdmaWriteWithImm ||
         op == hal::Opcode::kSend;
}
// A request that places bytes at an address of the responder's memory.
inline bool WritesRemote(hal::Opcode op) {
  return op == hal::Opcode::kRdmaWrite || op == hal::Opcode::kRdmaWriteWithImm;
}
// A request that consumes a receive WR at the responder (RNR when none).
inline bool ConsumesRecv(hal::Opcode op) {
  return op == hal::Opcode::kSend || op == hal::Opcode::kRdmaWriteWithImm;
}

// Memory window keys have bit 31 set; MR keys never do (fabric.h, Mw).
inline constexpr uint32_t kMwKeyBit = 0x80000000u;
inline bool IsMwKey(uint32_t rkey) { return (rkey & kMwKeyBit) != 0; }

inline size_t K(ObjectKind k) { return static_cast<size_t>(k); }

}  // namespace ferry::sim::fabric_internal

#endif  // FERRY_SIM_RNIC_FABRIC_INTERNAL_H_
