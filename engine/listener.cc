// engine/listener.cc: control-message routing (see listener.h).
#include "engine/listener.h"

#include <optional>
#include <utility>

#include "engine/owner.h"

namespace ferry::engine {

void Listener::OnDescriptor(const hal::Message& msg, const DescMessage& d) {
  switch (d.type) {
    case DescType::kReq: {
      const std::string& who = msg.identity.empty() ? msg.from : msg.identity;
      std::optional<SegmentDescriptor> offered = env_.descriptor_for(who);
      DescMessage rep;
      rep.token = d.token;
      if (offered.has_value()) {
        rep.type = DescType::kRep;
        rep.descriptor = std::move(*offered);
      } else {
        rep.type = DescType::kRefused;
        rep.reason = "no registered memory is offered to identity " + who;
      }
      (void)env_.net->Send(msg.from, EncodeDesc(rep));
      return;
    }
    case DescType::kRep:
      env_.descriptor_arrived(d.token, d.descriptor);
      return;
    case DescType::kRefused:
      if (env_.descriptor_refused) env_.descriptor_refused(d.token, msg.from, d.reason);
      return;
  }
}

size_t Listener::Step(size_t max, uint64_t first_wait_ns) {
  if (env_.tick) env_.tick();
  size_t n = 0;
  for (; n < max; ++n) {
    auto polled = env_.net->Poll(n == 0 ? first_wait_ns : 0);
    if (!polled.ok() || !polled->has_value()) break;
    hal::Message msg = std::move(**polled);
    if (IsDescriptorMessage(msg.bytes)) {
      auto d = DecodeDesc(msg.bytes);
      if (!d.ok()) {
        ++rejected_;
        continue;
      }
      OnDescriptor(msg, *d);
      continue;
    }
    auto decoded = DecodeHandshake(msg.bytes);
    if (!decoded.ok()) {
      ++rejected_;
      continue;
    }
    HandshakeMessage& m = *decoded;
    // The sender's NIC path must name the address the message came from:
    // the key is (dst NIC, src NIC path), and nobody may speak for another.
    const std::string& path = m.src_nic_path;
    const size_t at = path.find('@');
    if (at == std::string::npos || path.substr(0, at) != msg.from) {
      ++rejected_;
      continue;
    }
    bool known = false;
    for (const std::string& nic : env_.nics) known = known || nic == m.dst_nic;
    // Unknown target NIC: the owner of (first NIC) answers with an error.
    const std::string& nic = known ? m.dst_nic : env_.nics.front();
    const uint32_t owner =
        OwnerForKey(EndpointKey{nic, path}, static_cast<uint32_t>(env_.workers.size()));
    env_.workers[owner]->Push(InboxWire{std::move(m), msg.from, msg.identity});
    if (env_.mutations != nullptr && env_.mutations->on(base::Mutation::kEngineC5NonOwnerCall)) {
      // Mutation: a lifecycle step off the owner (the listener touches
      // the owner's CQ); the sim's owner check must fail the run.
      env_.workers[owner]->PollFromOutsideForMutation();
    }
    if (env_.wake) env_.wake(owner);
  }
  return n;
}

}  // namespace ferry::engine
