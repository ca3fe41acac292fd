// engine/worker.cc: the owner worker's core: construction, the step and its
// phases' order, the inbox, and the read-only queries (see worker.h for what
// must stay true). The phases live in one file each: worker_handshake.cc
// (endpoint creation, REQ/REP/RTU and the accept table), worker_post.cc
// (posting under the CQ quota ledgers), worker_poll.cc (completions and
// evidence), worker_sweep.cc (timeouts with the C3 stale check, handshake
// timers, the retire ladder), worker_retire.cc (retire, async events, rail
// errors, DEVICE_FATAL parking, CQ_ERR recovery, reclaim).
#include "engine/worker.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/accept.h"
#include "engine/worker_internal.h"
#include "engine/wr_id.h"

namespace ferry::engine {

using namespace worker_internal;  // NOLINT(build/namespaces): the worker's own helpers

Worker::Worker(uint32_t id, WorkerEnv* env)
    : id_(id),
      env_(env),
      cfg_(*env->config),
      pending_(std::max<size_t>(kIdleKeysMin, size_t{env->config->endpoint_store_capacity} *
                                                  env->contexts.size()),
               [env](uint32_t context, std::string_view path) {
                 return EndpointKeyHash(env->contexts[context]->device(), path);
               }) {
  FERRY_CHECK_LT(id_, cfg_.workers);
  for (Context* c : env_->contexts) {
    stores_.push_back(std::make_unique<Store>(cfg_.endpoint_store_capacity));
    rails_.emplace_back();
    if (!c->enabled()) {
      // Its bring-up failed (C7): the rail starts parked, as if the device
      // had died, and the owner whose park completes the count (the last
      // worker built) brings it up in place (ServeParkedContexts).
      Rail& r = rails_.back();
      r.parked = true;
      r.park_epoch = c->epoch();
      r.must_reenable = c->Park();
      continue;
    }
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
      AddLedger(c->index(), c->cq(id_, i).id, NewLedger(c->cqe_capacity()));
  }
}

Worker::~Worker() = default;

void Worker::Push(InboxItem item) {
  base::MutexLock l(&mu_);
  inbox_.push_back(std::move(item));
  inbox_size_.store(inbox_.size(), std::memory_order_release);
}

void Worker::PushSubmits(absl::Span<std::pair<uint32_t, std::shared_ptr<TaskRoute>>> routes) {
  base::MutexLock l(&mu_);
  for (auto& [owner, route] : routes) {
    FERRY_CHECK_EQ(owner, id_);
    inbox_.push_back(InboxSubmit{std::move(route)});
  }
  inbox_size_.store(inbox_.size(), std::memory_order_release);
}

size_t Worker::InboxSize() const { return inbox_size_.load(std::memory_order_acquire); }

std::vector<Endpoint*> Worker::LiveList() const {
  std::vector<Endpoint*> out;
  ForEachLive([&out](Endpoint* ep) { out.push_back(ep); });
  return out;
}

void Worker::ForEachLive(absl::FunctionRef<void(Endpoint*)> f) const {
  for (const auto& st : stores_)
    st->ForEach(
        [&f](const EndpointKey&, const std::unique_ptr<Endpoint>& ep, bool) { f(ep.get()); });
}

size_t Worker::LiveEndpoints() const {
  size_t n = 0;
  for (const auto& st : stores_) n += st->size();
  return n;
}

Endpoint* Worker::Peek(const Key& key) const {
  const auto* p = stores_[key.first]->Peek(StoreKeyView(key));
  return p == nullptr ? nullptr : p->get();
}

const Endpoint* Worker::Peek(const Key& key, Store::Memo* memo) const {
  const auto* p = stores_[key.first]->Peek(StoreKeyView(key), memo);
  return p == nullptr ? nullptr : p->get();
}

Endpoint* Worker::HitByKey(const Key& key, const TaskRoute& front, Store::Memo* memo) {
  Store& store = *stores_[key.first];
  std::unique_ptr<Endpoint>* p;
  if (front.key_hash.has_value()) {
    // The route's key is this key (QueueOf placed it here by its context
    // and path), so its hash is this key's.
    FERRY_CHECK(front.context == key.first && front.peer_path->size() == key.second.size());
    const EndpointKeyView v = StoreKeyView(key);
    p = store.Find(HashedEndpointKeyView{v.local_nic, v.peer_nic_path, *front.key_hash}, memo);
  } else {
    p = store.Find(StoreKeyView(key), memo);
  }
  return p == nullptr ? nullptr : p->get();
}

WaitSet Worker::Step(const PhaseOrder& order) {
  for (Phase p : order) {
    switch (p) {
      case Phase::kInbox:
        DrainInbox();
        break;
      case Phase::kPost:
        PostAll();
        break;
      case Phase::kPoll:
        PollAll();
        break;
      case Phase::kSweep:
        Sweep();
        break;
      case Phase::kReclaim:
        Reclaim();
        break;
    }
  }
  return WaitSetNow();
}

// Everything this worker waits for after a step: timers (handshake resends
// and deadlines, rail pauses, retire ladders, destroy give-ups, task
// deadlines, parked contexts), CQs to poll, postable work, and its
// completion channels. It reads better as one: the whole wait in one
// place, one block per source, is what a reviewer checks for a lost wakeup.
WaitSet Worker::WaitSetNow() {
  WaitSet ws;
  const uint64_t now = env_->clock->NowNs();
  auto consider = [&ws](std::optional<uint64_t> t) {
    if (t && (!ws.deadline_ns || *t < *ws.deadline_ns)) ws.deadline_ns = t;
  };
  // A paused rail with slices waiting on it: a cooldown ends by time; a
  // port down or a parked context by an event (PORT_ACTIVE through the
  // inbox; the parked recheck below). Their paused_until_ns may lie in the
  // past: taking it would spin.
  auto consider_cooldown = [&](uint32_t ctx) {
    const Rail& r = rails_[ctx];
    if ((!r.port_down && !r.parked) || Mut(base::Mutation::kEngineWaitOnPassedCooldown))
      consider(r.paused_until_ns);
  };
  // Inbox items this step left (DrainInbox takes at most kInboxDrainMax):
  // their wake was consumed already, so nothing else would end the wait
  // (one Submit of more than 256 requests to one owner wakes it once).
  if (InboxSize() > 0 && !Mut(base::Mutation::kEngineInboxLeftNoWork)) ws.work_now = true;
  // Handshake timers: only endpoints in CONNECTING have them.
  if (connecting_ > 0) {
    ForEachLive([&](Endpoint* ep) {
      if (ep->state() != EndpointState::kConnecting) return;
      consider(ep->next_resend_ns);
      consider(ep->handshake_deadline_ns);
    });
  }
  // WRs without evidence, live or retiring, hold CQ quota (C4). Posted
  // receive WRs hold theirs for good: they only ask for a wake on a CQE.
  if (QuotaUsed() > recv_held_) ws.poll_now = true;
  ws.recv_posted = recv_held_ > 0;
  if (!bind_deadlines_.empty()) consider(bind_deadlines_.front().first);
  // Keys with queued slices (any order: only the earliest time and flags
  // are taken).
  pending_.ForEachListed([&](const Key& key, const PendingQueue& dq, Store::Memo& memo) {
    if (dq.empty()) return;
    if (FrontDroppable(key, dq) && !Mut(base::Mutation::kEngineWaitIgnoresDroppable)) {
      ws.work_now = true;
      return;
    }
    if (const Endpoint* ep = Peek(key, &memo); ep != nullptr) {
      // Postable: READY, its rail up, a QP with room and CQ quota free.
      if (ep->state() != EndpointState::kReady) return;
      if (RailPaused(key.first)) {
        // Another endpoint's errors can pause the rail under this READY
        // one, and then nothing else may wake the owner when the pause ends
        // (found in review, 2026-12-07; timeout scenario S21).
        if (!Mut(base::Mutation::kEngineReadyKeyIgnoresCooldown)) consider_cooldown(key.first);
        return;
      }
      // Waiting for the peer's windows: the WINREQ resend is the timer (a
      // WIN arrives through the inbox).
      if (std::optional<uint64_t> t = WindowWaitNs(*ep, dq.front())) {
        consider(t);
        return;
      }
      const CqQuota& q = Ledger(ep->cq());
      for (const DataQp& qp : ep->qps())
        if (qp.fifo.size() < ep->wr_depth() && q.free() > 0 && !q.ZombieOverCap())
          ws.work_now = true;
      return;
    }
    if (RailPaused(key.first) && !shutdown_) {
      consider_cooldown(key.first);
    } else if (StoreHasRoom(key.first) || shutdown_) {
      ws.work_now = true;
    }
    // Else the store is full of busy endpoints: a CQE, a handshake timer
    // or an inbox item changes that, and each wakes the worker.
  });
  for (const auto& ep : retiring_) {
    consider(ep->NextRetireNs(Mut(base::Mutation::kEngineRetireTimerDrainsUnconnected)));
    // The destroy give-up (off by default) is a timer of its own: without
    // it an owner asleep between backoffs gave up up to
    // destroy_backoff_ns_max late (found with the sim's cqe wake model).
    if (cfg_.reset_context_on_destroy_give_up && !rails_[ep->context()].reset_requested &&
        !Mut(base::Mutation::kEngineGiveUpNotATimer)) {
      for (const DataQp& q : ep->qps())
        if (!q.destroyed && q.destroy_failures > 0)
          consider(q.first_destroy_fail_ns + cfg_.destroy_give_up_ns);
    }
    bool reclaimable = true;
    for (const DataQp& q : ep->qps()) {
      if (!q.released && (q.destroyed || !q.fifo.empty() || !q.recv.empty())) ws.poll_now = true;
      reclaimable = reclaimable && q.destroyed && q.released;
    }
    // Released after this step's reclaim phase ran (phases are permuted):
    // the next step reclaims it, so the worker must not sleep.
    if (reclaimable) ws.work_now = true;
  }
  ForEachPolledCq([&](hal::CqHandle cq) {
    const CqQuota* q = QuotaOf(cq);
    if (q != nullptr && q->AwaitsEmptyPoll()) ws.poll_empty = true;
  });
  // A CQ_ERR recovery to run (not one of a parked context: its resume
  // drops it).
  const bool recovery_due =
      std::any_of(errored_cqs_.begin(), errored_cqs_.end(),
                  [this](const auto& e) { return !rails_[e.second.first].parked; });
  if (recovery_due) ws.work_now = ws.work_now || retiring_.empty();
  // The earliest task deadline (a lower bound kept by SweepTimeouts and
  // OnSubmit: at worst one early wake, whose sweep refreshes it).
  if (next_task_deadline_ns_ != UINT64_MAX) consider(next_task_deadline_ns_);
  if (ws.deadline_ns && *ws.deadline_ns <= now) ws.work_now = true;
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    if (rails_[ci].parked) {
      // Waiting for the re-enable (this owner or another runs it, not
      // before its backoff ends): look again soon after.
      // (At shutdown: at once, or never for a context that never came up;
      // as ServeParkedContexts decides.)
      const Context* c = env_->contexts[ci];
      const bool retry = rails_[ci].must_reenable && (!shutdown_ || c->up());
      const uint64_t at = shutdown_ ? 0 : c->reenable_at_ns();
      if (retry && at > now) {
        consider(at);
      } else {
        consider(std::max(now, at) + kParkedRecheckNs);
        if (retry) ws.work_now = true;
      }
      if (env_->contexts[ci]->epoch() != rails_[ci].park_epoch) ws.work_now = true;
      continue;
    }
    ws.channels.push_back(env_->contexts[ci]->channel(id_));
  }
  return ws;
}

bool Worker::ShutDown() const {
  if (!shutdown_ || LiveEndpoints() != 0 || !retiring_.empty()) return false;
  // The owner that completed a DEVICE_FATAL park count re-enables first:
  // the other owners' retiring endpoints on that context resolve only at
  // their resume. (A context that never came up has no endpoint anywhere.)
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci)
    if (rails_[ci].must_reenable && env_->contexts[ci]->up()) return false;
  return true;
}

uint64_t Worker::QuotaUsed() const {
  uint64_t n = 0;
  for (const auto& [cq, q] : quota_) n += static_cast<uint64_t>(q->reserved());
  return n;
}

const CqQuota* Worker::QuotaOf(hal::CqHandle cq) const {
  auto it = quota_.find(cq.id);
  return it == quota_.end() ? nullptr : it->second.get();
}

std::vector<hal::CqHandle> Worker::OwnedCqs() const {
  std::vector<hal::CqHandle> out;
  ForEachOwnedCq([&](hal::CqHandle cq) { out.push_back(cq); });
  return out;
}

void Worker::ForEachOwnedCq(absl::FunctionRef<void(hal::CqHandle)> f) const {
  for (Context* c : env_->contexts)
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i)
      if (const hal::CqHandle cq = c->cq(id_, i); cq.valid()) f(cq);
}

void Worker::ForEachPolledCq(absl::FunctionRef<void(hal::CqHandle)> f) const {
  for (uint32_t ci = 0; ci < env_->contexts.size(); ++ci) {
    if (rails_[ci].parked) continue;  // its device is being closed and re-opened
    const Context* c = env_->contexts[ci];
    for (uint32_t i = 0; i < c->cqs_per_worker(); ++i) {
      const hal::CqHandle cq = c->cq(id_, i);
      if (cq.valid() && !errored_cqs_.contains(cq.id)) f(cq);
    }
  }
}

const Endpoint* Worker::Find(uint32_t context, std::string_view peer_path) const {
  if (context >= stores_.size()) return nullptr;
  return Peek(Key{context, std::string(peer_path)});
}

std::vector<std::string> Worker::PendingReasons() const {
  std::vector<std::string> out;
  for (const auto& ep : retiring_) {
    for (const DataQp& q : ep->qps()) {
      if (q.destroyed && q.released) continue;
      out.push_back(absl::StrCat(
          "worker ", id_, " endpoint ", ep->peer_path(), " gen ", ep->generation(), " qpn ", q.qpn,
          ": retiring (", std::string(RetireReasonName(ep->retire_reason())), "), ", q.fifo.size(),
          " WRs without evidence, ", q.destroy_failures, " failed destroys",
          q.destroyed ? ", destroyed, awaiting the empty poll" : ""));
    }
  }
  for (Endpoint* ep : LiveList())
    out.push_back(absl::StrCat("worker ", id_, " endpoint ", ep->peer_path(), " gen ",
                               ep->generation(), ": ",
                               std::string(EndpointStateName(ep->state()))));
  return out;
}

void Worker::PollFromOutsideForMutation() {
  if (env_->contexts.empty()) return;
  std::array<hal::WorkCompletion, 1> wc;
  (void)env_->verbs->PollCq(env_->contexts[0]->cq(id_, 0), absl::MakeSpan(wc.data(), 0));
}

void Worker::NoteEventSlow(std::string_view kind, const Key& key, uint64_t a, uint64_t b) {
  NoteEventAt(kind, NicName(key.first), key.second, a, b);
}

void Worker::NoteEventAt(std::string_view kind, std::string_view nic, std::string_view path,
                         uint64_t a, uint64_t b) {
  if (env_->observer == nullptr) return;
  // Built in a reused buffer: no allocation per event once it has grown.
  event_key_.assign(nic);
  event_key_.append("|").append(path);
  env_->observer->OnEvent(id_, kind, event_key_, a, b);
}

std::string Worker::NicName(uint32_t ctx) const { return env_->contexts[ctx]->device(); }

std::optional<uint32_t> Worker::ContextOfNic(std::string_view nic) const {
  for (uint32_t i = 0; i < env_->contexts.size(); ++i)
    if (env_->contexts[i]->device() == nic) return i;
  return std::nullopt;
}

CqQuota& Worker::Ledger(hal::CqHandle cq) {
  auto it = quota_.find(cq.id);
  FERRY_CHECK(it != quota_.end());
  return *it->second;
}

CqQuota& Worker::RefreshLedger(Endpoint& ep) {
  ep.ledger = &Ledger(ep.cq());
  ep.ledger_epoch = ledger_epoch_;
  return *ep.ledger;
}

std::unique_ptr<CqQuota> Worker::NewLedger(uint32_t cqe_capacity) const {
  return std::make_unique<CqQuota>(cqe_capacity, cfg_.zombie_quota_max, env_->mutations,
                                   /*check_every_op=*/base::Mutations::kCompiledIn);
}

void Worker::AddLedger(uint32_t ctx, uint64_t cq_id, std::unique_ptr<CqQuota> ledger) {
  ++ledger_epoch_;
  quota_context_[cq_id] = ctx;
  quota_[cq_id] = std::move(ledger);
}

void Worker::DropLedger(uint64_t cq_id) {
  ++ledger_epoch_;
  quota_.erase(cq_id);
  quota_context_.erase(cq_id);
}

// ------------------------------------------------------------------ inbox
void Worker::DrainInbox() {
  std::vector<InboxItem>& items = drain_scratch_;  // reused: no allocation per step
  FERRY_CHECK(items.empty());
  {
    base::MutexLock l(&mu_);
    const size_t n = std::min(inbox_.size(), kInboxDrainMax);
    for (size_t i = 0; i < n; ++i) {
      items.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    inbox_size_.store(inbox_.size(), std::memory_order_release);
  }
  for (InboxItem& item : items) {
    if (auto* s = std::get_if<InboxSubmit>(&item)) {
      OnSubmit(std::move(s->route));
    } else if (auto* w = std::get_if<InboxWire>(&item)) {
      OnWire(*w);
    } else if (auto* a = std::get_if<InboxAsync>(&item)) {
      OnAsync(a->event);
    } else if (std::holds_alternative<InboxRecheck>(item)) {
      // Nothing to apply: this step's PostAll drops the withdrawn slices.
    } else {
      shutdown_ = true;
      for (Endpoint* ep : LiveList()) Retire(ep, RetireReason::kShutdown);
    }
  }
  items.clear();
}

void Worker::OnSubmit(std::shared_ptr<TaskRoute> route) {
  TaskRoute* r = route.get();
  FERRY_CHECK_EQ(r->owner_refs, 0u);  // given to one owner, once
  tasks_.push_back(std::move(route));
  r->posted.reserve(r->task->slice_count());  // one entry per first post
  next_task_deadline_ns_ = std::min(next_task_deadline_ns_, r->task->geometry().deadline_ns);
  PendingQueue& dq = QueueOf(*r);
  dq.PushAll(r, r->task->slice_count());
}

void Worker::OnWire(const InboxWire& w) {
  const HandshakeMessage& m = w.msg;
  const std::string& from = w.from;
  switch (m.type) {
    case HandshakeType::kReq:
      OnReq(m, from);
      break;
    case HandshakeType::kRep:
      OnRep(m, from);
      break;
    case HandshakeType::kRtu:
      OnRtu(m, from);
      break;
    case HandshakeType::kStale:
    case HandshakeType::kError:
      OnStaleOrError(m, from);
      break;
    case HandshakeType::kWinReq:
      OnWinReq(m, from, w.identity);
      break;
    case HandshakeType::kWin:
      OnWin(m);
      break;
  }
}

}  // namespace ferry::engine
