// engine/handles.h: RAII owners of verbs handles (docs/design.md section 4, C7).
//
// Owns: Owned<H>, a move-only holder of one hal handle (context, PD, MR,
// completion channel, CQ, QP) and the hal::Verbs that made it, plus a
// process-local ledger of what was created and released (HandleLedger) that
// tests and the C9 leak report read.
//
// Thread safety: an Owned<H> is used by one thread at a time (its owner);
// HandleLedger is internally synchronized.
//
// What must stay true:
// - A handle is owned from the moment the create call returned it: wrap it
//   at once (Owned<H>(verbs, h, ledger)); nothing else ever frees it.
// - Reset() destroys the handle at most once. A failed destroy keeps the
//   handle held (the object is still alive, docs/design.md section 3) so Reset()
//   can be retried; a successful one clears it. Reset() on an empty holder is
//   a no-op returning OK (cleanup is idempotent).
// - Forget() drops ownership without a destroy call, for objects that died
//   with their device context (CloseDevice destroys everything it holds).
// - The destructor calls Reset() once and ignores a failure (the object is
//   then reported by the ledger as leaked: C9 makes that visible).
#ifndef FERRY_ENGINE_HANDLES_H_
#define FERRY_ENGINE_HANDLES_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::engine {

enum class HandleKind : uint8_t { kContext, kPd, kMr, kCompChannel, kCq, kQp, kMw, kCount };
std::string_view HandleKindName(HandleKind k);

// Counts of creates and successful destroys per kind. Live = created -
// destroyed - forgotten (forgotten: freed by CloseDevice).
class HandleLedger {
 public:
  struct Counts {
    uint64_t created = 0;
    uint64_t destroyed = 0;
    uint64_t forgotten = 0;
    uint64_t destroy_failures = 0;
    uint64_t live() const { return created - destroyed - forgotten; }
  };
  void Created(HandleKind k);
  void Destroyed(HandleKind k);
  void Forgotten(HandleKind k);
  void DestroyFailed(HandleKind k);
  Counts Get(HandleKind k) const;
  uint64_t LiveTotal() const;
  // "qp live=1 created=4 destroyed=3 ..." for every kind with activity.
  std::string ToString() const;

 private:
  mutable base::Mutex mu_;
  std::array<Counts, static_cast<size_t>(HandleKind::kCount)> counts_ ABSL_GUARDED_BY(mu_);
};

// The destroy call and kind of each handle type.
absl::Status DestroyHandle(hal::Verbs* verbs, hal::ContextHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::PdHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::MrHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::CompChannelHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::CqHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::QpHandle h);
absl::Status DestroyHandle(hal::Verbs* verbs, hal::MwHandle h);
constexpr HandleKind KindOf(hal::ContextHandle) { return HandleKind::kContext; }
constexpr HandleKind KindOf(hal::PdHandle) { return HandleKind::kPd; }
constexpr HandleKind KindOf(hal::MrHandle) { return HandleKind::kMr; }
constexpr HandleKind KindOf(hal::CompChannelHandle) { return HandleKind::kCompChannel; }
constexpr HandleKind KindOf(hal::CqHandle) { return HandleKind::kCq; }
constexpr HandleKind KindOf(hal::QpHandle) { return HandleKind::kQp; }
constexpr HandleKind KindOf(hal::MwHandle) { return HandleKind::kMw; }

template <typename H>
class Owned {
 public:
  Owned() = default;
  // Takes ownership of a handle a create call just returned. `ledger` may
  // be null; it must outlive this holder.
  Owned(hal::Verbs* verbs, H h, HandleLedger* ledger) : verbs_(verbs), h_(h), ledger_(ledger) {
    if (ledger_ != nullptr && h_.valid()) ledger_->Created(KindOf(h_));
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : verbs_(o.verbs_), h_(std::exchange(o.h_, H{})), ledger_(o.ledger_) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      (void)Reset();
      verbs_ = o.verbs_;
      h_ = std::exchange(o.h_, H{});
      ledger_ = o.ledger_;
    }
    return *this;
  }
  ~Owned() { (void)Reset(); }

  bool held() const { return h_.valid(); }
  H get() const { return h_; }

  // Destroys the held handle; OK and nothing done when empty. On failure the
  // handle stays held (retry later).
  absl::Status Reset() {
    if (!h_.valid()) return absl::OkStatus();
    absl::Status s = DestroyHandle(verbs_, h_);
    if (!s.ok()) {
      if (ledger_ != nullptr) ledger_->DestroyFailed(KindOf(h_));
      return s;
    }
    if (ledger_ != nullptr) ledger_->Destroyed(KindOf(h_));
    h_ = H{};
    return absl::OkStatus();
  }
  // Drops ownership without destroying: the object died with its context.
  void Forget() {
    if (!h_.valid()) return;
    if (ledger_ != nullptr) ledger_->Forgotten(KindOf(h_));
    h_ = H{};
  }
  // Drops ownership and reports nothing: the object leaks. Only the C7/C9
  // mutations use this (so tests can prove the leak checks fire).
  void LeakForMutation() { h_ = H{}; }

 private:
  hal::Verbs* verbs_ = nullptr;
  H h_{};
  HandleLedger* ledger_ = nullptr;
};

using OwnedContext = Owned<hal::ContextHandle>;
using OwnedPd = Owned<hal::PdHandle>;
using OwnedMr = Owned<hal::MrHandle>;
using OwnedCompChannel = Owned<hal::CompChannelHandle>;
using OwnedCq = Owned<hal::CqHandle>;
using OwnedQp = Owned<hal::QpHandle>;
using OwnedMw = Owned<hal::MwHandle>;

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_HANDLES_H_
