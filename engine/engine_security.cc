// engine/engine_security.cc: the EngineImpl side of who may touch this
// engine's memory (docs/security.md): memory options, the descriptor each
// peer identity is offered (or a refusal), refusals received, and the
// counters of the authenticating control network.
//
// What must stay true: a peer outside every set a range names gets no rkey
// of it; a peer offered nothing at all (memory registered, none of it
// offered to it) gets a refusal, never a descriptor; a refusal reaches the
// user as kPermissionDenied and a refetch as given up, and changes nothing
// else.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/auth/auth_wire.h"
#include "engine/engine_impl.h"

namespace ferry {

absl::Status EngineImpl::ValidateMemoryOptions(const MemoryOptions& options) {
  const auto a = static_cast<uint8_t>(options.access);
  if (a < 1 || a > 3)
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterMemory: access ", a, " is not kRead, kWrite or kReadWrite"));
  for (const std::string& p : options.peers)
    if (!engine::auth::IdentityValid(p))
      return absl::InvalidArgumentError(absl::StrCat(
          "RegisterMemory: peer identity '", p, "' is not 1..128 printable bytes without space"));
  return absl::OkStatus();
}

std::optional<SegmentDescriptor> EngineImpl::DescriptorFor(const std::string& identity) {
  base::MutexLock l(&mu_);
  SegmentDescriptor d = BuildDescriptor(&identity);
  if (d.buffers.empty() && !regions_.empty()) {
    ++descriptor_refusals_;
    return std::nullopt;
  }
  return d;
}

bool EngineImpl::OfferedTo(const Region& r, const std::string& identity) const {
  const bool expose_all =
      mutations_ != nullptr && mutations_->on(base::Mutation::kEngineExposeToAllPeers);
  return r.peers.empty() || expose_all ||
         std::find(r.peers.begin(), r.peers.end(), identity) != r.peers.end();
}

bool EngineImpl::WindowOffered(uint64_t region, const std::string& identity) const {
  base::MutexLock l(&mu_);
  // A scan: a WINREQ comes once per (endpoint, range), not per request.
  for (const auto& [start, r] : regions_)
    if (r.id == region) return r.revocable && OfferedTo(r, identity);
  return false;
}

void EngineImpl::DescriptorRefused(uint64_t token, const std::string& from,
                                   const std::string& reason) {
  const uint32_t listener = static_cast<uint32_t>(workers_.size());
  uint64_t segment = 0;
  {
    base::MutexLock l(&mu_);
    auto it = opens_.find(token);
    // Only the peer asked may refuse (in authenticated mode `from` is
    // proven; otherwise as good as every other control message).
    if (it == opens_.end() || it->second.address != from) return;
    if (it->second.segment == 0) {
      it->second.refused = absl::StrCat("peer ", from, " refused the segment: ", reason);
      return;
    }
    segment = it->second.segment;
    PeerSegment* ps = EndRefetch(it);
    if (ps == nullptr) return;
    ++ps->refetches_given_up;
  }
  Note(listener, "refetch_refused", from, segment, 0);
}

AuthStats EngineImpl::GetAuthStats() const {
  AuthStats s = auth_net_->stats();
  base::MutexLock l(&mu_);
  s.descriptor_refusals = descriptor_refusals_;
  return s;
}

}  // namespace ferry
