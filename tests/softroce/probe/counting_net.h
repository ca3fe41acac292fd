// tests/softroce/probe/counting_net.h: CountingNet, a hal::ControlNet
// decorator for the real-verbs probes: forwards every call and counts what
// the engine sent and got by kind (handshake REQ/REP/STALE/ERROR, segment
// descriptor requests), so a probe can say "the first REQ succeeded".
//
// Thread safety: the counters are atomics; Send and Poll forward to a
// ControlNet that is itself safe to call from any thread.
// What must stay true: bytes and results pass through unchanged.
#ifndef FERRY_TESTS_SOFTROCE_PROBE_COUNTING_NET_H_
#define FERRY_TESTS_SOFTROCE_PROBE_COUNTING_NET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "engine/descriptor_wire.h"
#include "engine/handshake.h"
#include "hal/control_net.h"

namespace ferry::probe {

class CountingNet final : public hal::ControlNet {
 public:
  explicit CountingNet(std::unique_ptr<hal::ControlNet> inner) : in_(std::move(inner)) {}

  std::atomic<uint64_t> reqs_sent{0};       // handshake REQs (resends included)
  std::atomic<uint64_t> reps_got{0};        // handshake REPs received
  std::atomic<uint64_t> refusals_got{0};    // STALE or ERROR received
  std::atomic<uint64_t> desc_reqs_sent{0};  // segment descriptor requests

  std::string LocalAddress() const override { return in_->LocalAddress(); }
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override {
    if (engine::IsDescriptorMessage(bytes)) {
      auto d = engine::DecodeDesc(bytes);
      if (d.ok() && d->type == engine::DescType::kReq) desc_reqs_sent.fetch_add(1);
    } else if (auto h = engine::DecodeHandshake(bytes);
               h.ok() && h->type == engine::HandshakeType::kReq) {
      reqs_sent.fetch_add(1);
    }
    return in_->Send(peer, bytes);
  }
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t timeout_ns) override {
    auto m = in_->Poll(timeout_ns);
    if (m.ok() && m->has_value() && !engine::IsDescriptorMessage((*m)->bytes)) {
      if (auto h = engine::DecodeHandshake((*m)->bytes); h.ok()) {
        if (h->type == engine::HandshakeType::kRep) reps_got.fetch_add(1);
        if (h->type == engine::HandshakeType::kStale || h->type == engine::HandshakeType::kError)
          refusals_got.fetch_add(1);
      }
    }
    return m;
  }

 private:
  std::unique_ptr<hal::ControlNet> in_;
};

}  // namespace ferry::probe

#endif  // FERRY_TESTS_SOFTROCE_PROBE_COUNTING_NET_H_
