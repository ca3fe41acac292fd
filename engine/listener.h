// engine/listener.h: reads the ControlNet, decodes control messages and
// hands handshake messages to their owner worker; answers segment-
// descriptor requests itself (docs/design.md section 4). Each step first runs
// the engine's tick (the resends and give-ups of background segment
// refetches, engine/segment_refetch.h); NextTickNs says when the next one
// is due, so a runtime that steps the listener only on traffic (the sim's)
// also wakes it then.
//
// Thread safety: Step() from one thread (the listener's runtime slot); the
// callbacks it calls are thread-safe engine functions.
// What must stay true: the listener never waits on an owner and never makes
// a verbs call: it only pushes to inboxes (C5). A message that fails to
// decode (engine/handshake.h is strict), or whose sender NIC path does not
// name the control-network address it came from, is dropped and counted
// without touching any endpoint (C8). A descriptor request is answered
// with what is offered to its sender's identity (Message::identity when
// authenticated, else its address) or with a refusal (docs/security.md).
#ifndef FERRY_ENGINE_LISTENER_H_
#define FERRY_ENGINE_LISTENER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/mutation.h"
#include "engine/descriptor_wire.h"
#include "engine/handshake.h"
#include "engine/worker.h"
#include "hal/control_net.h"

namespace ferry::engine {

struct ListenerEnv {
  hal::ControlNet* net = nullptr;
  std::vector<Worker*> workers;
  std::vector<std::string> nics;  // local device names, by context index
  // The descriptor offered to a peer identity; std::nullopt = refuse it.
  std::function<std::optional<SegmentDescriptor>(const std::string& identity)> descriptor_for;
  std::function<void(uint64_t token, const SegmentDescriptor&)> descriptor_arrived;
  std::function<void(uint64_t token, const std::string& from, const std::string& reason)>
      descriptor_refused;
  std::function<void(uint32_t worker)> wake;  // runtime hook; may be empty
  // Run at the start of every Step; must not block. May be empty.
  std::function<void()> tick;
  // When `tick` next has work (absolute Clock ns); nullopt: none. May be
  // empty.
  std::function<std::optional<uint64_t>()> next_tick_ns;
  const base::Mutations* mutations = nullptr;
};

class Listener {
 public:
  explicit Listener(ListenerEnv env) : env_(std::move(env)) {}
  // Handles up to `max` messages; returns how many were read. Waits up to
  // first_wait_ns for the first message (ControlNet::Poll's timeout; the
  // production runtime blocks here, bounded so Stop stays prompt), never
  // for the following ones. The sim runtime passes 0: it never waits.
  size_t Step(size_t max, uint64_t first_wait_ns = 0);
  uint64_t rejected() const { return rejected_; }
  // When the tick next has work (see ListenerEnv::next_tick_ns).
  std::optional<uint64_t> NextTickNs() const {
    return env_.next_tick_ns ? env_.next_tick_ns() : std::nullopt;
  }

 private:
  void OnDescriptor(const hal::Message& msg, const DescMessage& d);

  ListenerEnv env_;
  uint64_t rejected_ = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_LISTENER_H_
