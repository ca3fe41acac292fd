// engine/context_windows.cc: the memory windows of a context's windowed
// regions (see context.h, "windows"; docs/security.md section 6).
//
// What must stay true: every window is held in its region's table from
// the moment AllocMw returned until DeallocMw succeeded (or the device
// closed: forgotten); its bind is posted under mu_, so no dealloc runs
// between the alloc and the post; a window whose bind could not be posted
// is deallocated before BindWindow returns.
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "engine/context.h"

namespace ferry::engine {

absl::StatusOr<Context::WindowBound> Context::BindWindow(uint64_t region, hal::QpHandle qp,
                                                         uint64_t wr_id) {
  base::MutexLock l(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return absl::NotFoundError(absl::StrCat("no region ", region));
  Region& r = it->second;
  if (r.window_access == 0 || !r.mr.held() || !reg_pd_.valid())
    return absl::FailedPreconditionError(
        absl::StrCat("region ", region, " is not reached through windows on ", device_));
  FERRY_ASSIGN_OR_RETURN(hal::MwInfo info, verbs_->AllocMw(reg_pd_, hal::MwType::kType2));
  OwnedMw held(verbs_, info.mw, ledger_);
  hal::SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = hal::Opcode::kBindMw;
  wr.send_flags = hal::kSendSignaled;
  wr.num_sge = 0;
  wr.bind.mw = info.mw;
  wr.bind.mr = r.mr.get();
  wr.bind.addr = reinterpret_cast<uint64_t>(r.addr);
  wr.bind.length = r.len_bytes;
  wr.bind.access = r.window_access;
  wr.bind.rkey = hal::IncRkey(info.rkey);
  const hal::PostResult posted = verbs_->PostSend(qp, absl::MakeConstSpan(&wr, 1));
  if (!posted.status.ok()) return posted.status;  // `held` deallocates it
  r.windows.emplace(info.mw.id, std::move(held));
  return WindowBound{info.mw, wr.bind.rkey};
}

absl::Status Context::DeallocWindow(uint64_t region, hal::MwHandle mw) {
  base::MutexLock l(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return absl::OkStatus();
  auto w = it->second.windows.find(mw.id);
  if (w == it->second.windows.end()) return absl::OkStatus();
  FERRY_RETURN_IF_ERROR(w->second.Reset());
  it->second.windows.erase(w);
  return absl::OkStatus();
}

absl::Status Context::DeallocWindows(Region& r) {
  absl::Status first;
  // Bounded by the region's windows; a failed one stays held.
  for (auto w = r.windows.begin(); w != r.windows.end();) {
    absl::Status s = w->second.Reset();
    if (s.ok()) {
      w = r.windows.erase(w);
      continue;
    }
    if (first.ok()) first = std::move(s);
    ++w;
  }
  return first;
}

size_t Context::window_count() const {
  base::MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [id, r] : regions_) n += r.windows.size();
  return n;
}

}  // namespace ferry::engine
