// engine/inspect.cc: SteppedEngine forwards to the engine body (see
// engine/inspect.h). Each method is one call or one loop over the body's
// own objects; nothing here holds state of its own.
#include "engine/inspect.h"

#include <utility>

#include "base/check.h"
#include "engine/engine_impl.h"

namespace ferry::engine {

absl::StatusOr<std::unique_ptr<SteppedEngine>> SteppedEngine::Create(
    const EngineConfig& config, const EngineEnv& env, const base::Mutations* mutations,
    LifecycleObserver* observer) {
  auto impl = EngineImpl::Create(config, env, mutations, observer);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<SteppedEngine>(new SteppedEngine(std::move(*impl)));
}

SteppedEngine::SteppedEngine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {
  FERRY_CHECK(impl_ != nullptr);
}
SteppedEngine::~SteppedEngine() = default;

// ---- API
absl::Status SteppedEngine::RegisterMemory(void* addr, size_t len_bytes,
                                           const MemoryOptions& options) {
  return impl_->RegisterMemory(addr, len_bytes, options);
}

AuthStats SteppedEngine::GetAuthStats() const { return impl_->GetAuthStats(); }
absl::Status SteppedEngine::UnregisterMemory(void* addr) { return impl_->UnregisterMemory(addr); }
SegmentDescriptor SteppedEngine::LocalSegment() const { return impl_->LocalSegment(); }
absl::StatusOr<OpenToken> SteppedEngine::OpenSegmentAsync(std::string_view host_port) {
  return impl_->OpenSegmentAsync(host_port);
}
absl::StatusOr<std::optional<SegmentHandle>> SteppedEngine::PollOpenSegment(OpenToken token) {
  return impl_->PollOpenSegment(token);
}
absl::Status SteppedEngine::CloseSegment(SegmentHandle segment) {
  return impl_->CloseSegment(segment);
}
absl::StatusOr<SegmentInfo> SteppedEngine::GetSegmentInfo(SegmentHandle segment) const {
  return impl_->GetSegmentInfo(segment);
}
absl::StatusOr<BatchId> SteppedEngine::AllocateBatch(uint32_t capacity) {
  return impl_->AllocateBatch(capacity);
}
SubmitResult SteppedEngine::Submit(BatchId batch, absl::Span<const Request> requests) {
  return impl_->Submit(batch, requests);
}
void SteppedEngine::SubmitInto(BatchId batch, absl::Span<const Request> requests,
                               SubmitResult* result) {
  FERRY_CHECK(result != nullptr);
  impl_->Submit(batch, requests, nullptr, result);
}
SubmitResult SteppedEngine::SubmitNotify(BatchId batch, absl::Span<const Request> requests,
                                         SegmentHandle segment, std::string_view message) {
  const EngineImpl::NotifyRequest n{segment, message};
  return impl_->Submit(batch, requests, &n);
}
std::vector<Notification> SteppedEngine::PollNotifies(size_t max) {
  return impl_->PollNotifies(max);
}
absl::StatusOr<TaskStatus> SteppedEngine::GetTaskStatus(TaskId task) const {
  return impl_->GetTaskStatus(task);
}
absl::StatusOr<BatchStatus> SteppedEngine::GetBatchStatus(BatchId batch) const {
  return impl_->GetBatchStatus(batch);
}
absl::Status SteppedEngine::Cancel(TaskId task) { return impl_->Cancel(task); }
absl::Status SteppedEngine::CancelBatch(BatchId batch) { return impl_->CancelBatch(batch); }
absl::Status SteppedEngine::FreeBatch(BatchId batch) { return impl_->FreeBatch(batch); }
PendingReport SteppedEngine::Pending() const { return impl_->Pending(); }

// ---- lifecycle
void SteppedEngine::BeginShutdown() { impl_->BeginShutdown(); }
bool SteppedEngine::WorkersDrained() const { return impl_->WorkersDrained(); }
absl::Status SteppedEngine::FinishShutdown() { return impl_->FinishShutdown(); }

// ---- stepping
uint32_t SteppedEngine::worker_count() const {
  return static_cast<uint32_t>(impl_->workers().size());
}
WaitSet SteppedEngine::StepWorker(uint32_t w, const PhaseOrder& order) {
  FERRY_CHECK(w < worker_count());
  return impl_->workers()[w]->Step(order);
}
size_t SteppedEngine::InboxSize(uint32_t w) const {
  FERRY_CHECK(w < worker_count());
  return impl_->workers()[w]->InboxSize();
}
void SteppedEngine::StepListener(uint32_t budget) { impl_->listener().Step(budget); }
std::optional<uint64_t> SteppedEngine::ListenerNextTickNs() const {
  return impl_->listener().NextTickNs();
}
void SteppedEngine::StepAsync(uint32_t budget) { impl_->async().Step(budget); }
std::vector<hal::CqHandle> SteppedEngine::WorkerCqs(uint32_t w) const {
  FERRY_CHECK(w < worker_count());
  std::vector<hal::CqHandle> out;
  for (const auto& c : impl_->contexts())
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
      if (const hal::CqHandle cq = c->cq(w, i); cq.valid()) out.push_back(cq);
  return out;
}

// ---- reading
uint64_t SteppedEngine::incarnation() const { return impl_->incarnation(); }
uint64_t SteppedEngine::late_refetch_answers() const { return impl_->late_refetch_answers(); }
std::shared_ptr<const Task> SteppedEngine::TaskOf(TaskId task) const { return impl_->TaskOf(task); }
std::pair<uint64_t, uint64_t> SteppedEngine::LocalRangeOf(TaskId task) const {
  return impl_->LocalRangeOf(task);
}
uint64_t SteppedEngine::notify_duplicates() const {
  const NotifyInbox::Stats s = impl_->notify_stats();
  return s.duplicates + s.too_old;
}
uint64_t SteppedEngine::RefetchTokenOf(SegmentHandle segment) const {
  return impl_->RefetchTokenOf(segment);
}
std::vector<QuotaView> SteppedEngine::Quotas() const {
  std::vector<QuotaView> out;
  ForEachQuota([&](const QuotaView& q) { out.push_back(q); });
  return out;
}
void SteppedEngine::ForEachQuota(absl::FunctionRef<void(const QuotaView&)> f) const {
  for (uint32_t w = 0; w < worker_count(); ++w) {
    const engine::Worker& wk = *impl_->workers()[w];
    wk.ForEachOwnedCq([&](hal::CqHandle cq) {
      if (const CqQuota* q = wk.QuotaOf(cq))
        f(QuotaView{w, cq, q->reserved(), q->zombie_held(), q->stray_cqes()});
    });
  }
}
std::optional<QuotaView> SteppedEngine::QuotaOf(uint32_t w, hal::CqHandle cq) const {
  FERRY_CHECK(w < worker_count());
  const CqQuota* q = impl_->workers()[w]->QuotaOf(cq);
  if (q == nullptr) return std::nullopt;
  return QuotaView{w, cq, q->reserved(), q->zombie_held(), q->stray_cqes()};
}
WorkerView SteppedEngine::ViewOf(uint32_t w) const {
  FERRY_CHECK(w < worker_count());
  const engine::Worker& wk = *impl_->workers()[w];
  return WorkerView{wk.id(),        wk.ShutDown(), wk.LiveEndpoints(), wk.RetiringEndpoints(),
                    wk.InboxSize(), wk.QuotaUsed()};
}
const WorkerStats& SteppedEngine::StatsOf(uint32_t w) const {
  FERRY_CHECK(w < worker_count());
  return impl_->workers()[w]->stats();
}
std::vector<std::string> SteppedEngine::PendingReasons(uint32_t w) const {
  FERRY_CHECK(w < worker_count());
  return impl_->workers()[w]->PendingReasons();
}
uint32_t SteppedEngine::OwnerOf(uint32_t context, std::string_view peer_path) const {
  FERRY_CHECK(context < impl_->contexts().size());
  return impl_->OwnerOf(context, std::string(peer_path));
}
std::optional<uint32_t> SteppedEngine::ContextIndexOf(std::string_view device) const {
  const auto& cs = impl_->contexts();
  for (uint32_t i = 0; i < cs.size(); ++i)
    if (cs[i]->device() == device) return i;
  return std::nullopt;
}
size_t SteppedEngine::WindowsHeld() const {
  size_t n = 0;
  for (const auto& c : impl_->contexts()) n += c->window_count();
  return n;
}
bool SteppedEngine::ContextUp(uint32_t context) const {
  FERRY_CHECK(context < impl_->contexts().size());
  return impl_->contexts()[context]->up();
}
std::optional<SteppedEngine::PeerRecord> SteppedEngine::PeerRecordOf(
    uint32_t w, uint32_t context, std::string_view peer_path) const {
  const Endpoint* ep = FindEndpoint(w, context, peer_path);
  if (ep == nullptr) return std::nullopt;
  PeerRecord r;
  r.ready = ep->state() == EndpointState::kReady;
  r.generation = ep->generation();
  if (ep->peer().has_value()) {
    r.has_peer = true;
    r.peer_incarnation = ep->peer()->incarnation;
    r.peer_generation = ep->peer()->generation;
  }
  return r;
}
const Endpoint* SteppedEngine::FindEndpoint(uint32_t w, uint32_t context,
                                            std::string_view peer_path) const {
  FERRY_CHECK(w < worker_count());
  return impl_->workers()[w]->Find(context, peer_path);
}
uint64_t SteppedEngine::ListenerRejected() const { return impl_->listener().rejected(); }
uint64_t SteppedEngine::LiveHandles() const { return impl_->ledger().LiveTotal(); }
std::string SteppedEngine::HandleReport() const { return impl_->ledger().ToString(); }

}  // namespace ferry::engine
