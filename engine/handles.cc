// engine/handles.cc: destroy calls per handle kind and the handle ledger.
//
// What must stay true: each DestroyHandle overload calls exactly the one
// matching hal::Verbs destroy and nothing else; the ledger only counts.
#include "engine/handles.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ferry::engine {

std::string_view HandleKindName(HandleKind k) {
  switch (k) {
    case HandleKind::kContext:
      return "context";
    case HandleKind::kPd:
      return "pd";
    case HandleKind::kMr:
      return "mr";
    case HandleKind::kCompChannel:
      return "comp_channel";
    case HandleKind::kCq:
      return "cq";
    case HandleKind::kQp:
      return "qp";
    case HandleKind::kMw:
      return "mw";
    case HandleKind::kCount:
      break;
  }
  return "?";
}

void HandleLedger::Created(HandleKind k) {
  base::MutexLock l(&mu_);
  ++counts_[static_cast<size_t>(k)].created;
}
void HandleLedger::Destroyed(HandleKind k) {
  base::MutexLock l(&mu_);
  Counts& c = counts_[static_cast<size_t>(k)];
  ++c.destroyed;
  FERRY_CHECK_LE(c.destroyed + c.forgotten, c.created);
}
void HandleLedger::Forgotten(HandleKind k) {
  base::MutexLock l(&mu_);
  Counts& c = counts_[static_cast<size_t>(k)];
  ++c.forgotten;
  FERRY_CHECK_LE(c.destroyed + c.forgotten, c.created);
}
void HandleLedger::DestroyFailed(HandleKind k) {
  base::MutexLock l(&mu_);
  ++counts_[static_cast<size_t>(k)].destroy_failures;
}
HandleLedger::Counts HandleLedger::Get(HandleKind k) const {
  base::MutexLock l(&mu_);
  return counts_[static_cast<size_t>(k)];
}
uint64_t HandleLedger::LiveTotal() const {
  base::MutexLock l(&mu_);
  uint64_t n = 0;
  for (const Counts& c : counts_) n += c.live();
  return n;
}
std::string HandleLedger::ToString() const {
  base::MutexLock l(&mu_);
  std::string out;
  for (size_t i = 0; i < counts_.size(); ++i) {
    const Counts& c = counts_[i];
    if (c.created == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ",
                    std::string(HandleKindName(static_cast<HandleKind>(i))), " live=", c.live(),
                    " created=", c.created, " destroyed=", c.destroyed, " forgotten=", c.forgotten,
                    " destroy_failures=", c.destroy_failures);
  }
  return out;
}

absl::Status DestroyHandle(hal::Verbs* verbs, hal::ContextHandle h) {
  return verbs->CloseDevice(h);
}
absl::Status DestroyHandle(hal::Verbs* verbs, hal::PdHandle h) { return verbs->DeallocPd(h); }
absl::Status DestroyHandle(hal::Verbs* verbs, hal::MrHandle h) { return verbs->DeregMr(h); }
absl::Status DestroyHandle(hal::Verbs* verbs, hal::CompChannelHandle h) {
  return verbs->DestroyCompChannel(h);
}
absl::Status DestroyHandle(hal::Verbs* verbs, hal::CqHandle h) { return verbs->DestroyCq(h); }
absl::Status DestroyHandle(hal::Verbs* verbs, hal::QpHandle h) { return verbs->DestroyQp(h); }
absl::Status DestroyHandle(hal::Verbs* verbs, hal::MwHandle h) { return verbs->DeallocMw(h); }

}  // namespace ferry::engine
