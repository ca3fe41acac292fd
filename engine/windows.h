// engine/windows.h: the memory-window state one endpoint holds
// (docs/security.md section 6; the protocol is engine/worker_windows.cc).
//
// Owns: nothing of the device (the windows themselves are held by their
// context's region table, engine/context.h); per range, what the owner
// knows of its windows on this endpoint's QPs: as the target, the windows
// it bound for the peer; as the initiator, the peer's window rkeys for our
// QPs.
//
// Thread safety: none; the endpoint's owner only (C5).
//
// What must stay true:
// - A target sends WIN for a range only after every bind of it on this
//   endpoint completed successfully, so a peer never posts through a window
//   that is not bound yet.
// - An initiator posts a slice of a windowed range only with the rkey of
//   the window bound on the QP it posts on, received in a WIN of this very
//   endpoint (its generation and the peer's); rkeys never outlive their
//   endpoint (a fresh endpoint asks again).
// - Retiring an endpoint deallocates every window it bound (revoking the
//   peer's rkeys at once) before any of its QPs is destroyed.
#ifndef FERRY_ENGINE_WINDOWS_H_
#define FERRY_ENGINE_WINDOWS_H_

#include <cstdint>
#include <vector>

#include "hal/types.h"

namespace ferry::engine {

// Target side: one range's windows on an endpoint's QPs.
struct ExposedWindows {
  struct PerQp {
    hal::MwHandle mw;  // invalid until its bind was posted
    uint32_t rkey = 0;
  };
  std::vector<PerQp> per_qp;       // index = QP index
  uint32_t binds_pending = 0;      // bind WRs posted, CQE not yet polled
  bool failed = false;             // a bind failed: no WIN is ever sent
  std::vector<uint8_t> win_bytes;  // the WIN once sent (a repeated WINREQ gets it again)
  uint64_t first_bind_ns = 0;      // when its first bind was posted
};

// Initiator side: the peer's windows of one range, bound for our QPs.
struct PeerWindows {
  std::vector<uint32_t> rkeys;  // index = QP index; empty until the WIN
  bool refused = false;         // the peer refused (or never answered)
  uint64_t next_request_ns = 0;
  uint32_t requests = 0;  // WINREQs sent (bounded by handshake_retries + 1)
};

// A window that a retire could not deallocate yet (retried before each
// destroy attempt of its endpoint's QPs).
struct WindowLeft {
  uint64_t region = 0;
  hal::MwHandle mw;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_WINDOWS_H_
