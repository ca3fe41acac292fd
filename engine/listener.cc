// engine/listener.cc: control-message routing (see listener.h).
#include "engine/listener.h"

#include <optional>
#include <utility>

namespace ferry::engine {

size_t Listener::Step(size_t max) {
  size_t n = 0;
  for (; n < max; ++n) {
    auto polled = env_.net->Poll(0);
    if (!polled.ok() || !polled->has_value()) break;
    hal::Message msg = std::move(**polled);
    auto decoded = DecodeWire(msg.bytes);
    if (!decoded.ok()) {
      ++rejected_;
      continue;
    }
    WireMsg& m = *decoded;
    switch (m.type) {
      case WireType::kDescReq: {
        WireMsg rep;
        rep.type = WireType::kDescRep;
        rep.token = m.token;
        rep.descriptor = env_.local_descriptor();
        (void)env_.net->Send(msg.from, EncodeWire(rep));
        break;
      }
      case WireType::kDescRep:
        env_.descriptor_arrived(m.token, m.descriptor);
        break;
      case WireType::kReq:
      case WireType::kRep:
      case WireType::kRtu: {
        // The local NIC the message is for, and the sender's NIC path.
        const std::string peer_path = msg.from + "@" + m.sender_nic;
        bool known = false;
        for (const std::string& nic : env_.nics) known = known || nic == m.target_nic;
        // Unknown target NIC: the owner of (first NIC) answers with an error.
        const std::string& nic = known ? m.target_nic : env_.nics.front();
        const uint32_t owner = OwnerOf(nic, peer_path, static_cast<uint32_t>(env_.workers.size()));
        env_.workers[owner]->Push(InboxWire{std::move(m), msg.from});
        if (env_.mutations != nullptr &&
            env_.mutations->on(base::Mutation::kEngineC5NonOwnerCall)) {
          // Mutation: a lifecycle step off the owner (the listener touches
          // the owner's CQ); the sim's owner check must fail the run.
          env_.workers[owner]->PollFromOutsideForMutation();
        }
        if (env_.wake) env_.wake(owner);
        break;
      }
    }
  }
  return n;
}

}  // namespace ferry::engine
