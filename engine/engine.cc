// engine/engine.cc: ferry::Engine (include/ferry/engine.h) and EngineImpl
// (engine/engine_impl.h): construction-time checks and bring-up, the MR
// table, peer segments (open, and refetch on REM_ACCESS_ERR), batches and
// submit validation, shutdown.
//
// What must stay true: nothing touches a device before config and env
// passed their checks; every context is enabled before the listener exists;
// a failed bring-up leaves nothing behind (C7); Submit enqueues all or
// nothing (C8); user calls never touch a QP or CQ (C5). A segment refetch
// never blocks its caller (an owner or the listener): it takes mu_, and
// sends on the control net only after releasing it; at most one per
// segment, each bounded by handshake_retries resends
// (engine/segment_refetch.h decides when to start and what to apply).
#include "ferry/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "engine/descriptor_wire.h"
#include "engine/engine_impl.h"
#include "engine/env_owner.h"
#include "engine/handshake.h"
#include "engine/request_validation.h"
#include "engine/runtime_threads.h"
#include "engine/segment_refetch.h"
#include "hal/clock.h"
#include "hal/control_net.h"
#include "hal/entropy.h"
#include "hal/verbs.h"

namespace ferry {

using engine::TaskRoute;

namespace {
absl::Status ValidateHostPort(std::string_view hp) {
  const size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= hp.size())
    return absl::InvalidArgumentError(absl::StrCat("malformed address '", std::string(hp), "'"));
  for (size_t i = colon + 1; i < hp.size(); ++i)
    if (hp[i] < '0' || hp[i] > '9')
      return absl::InvalidArgumentError(absl::StrCat("malformed port in '", std::string(hp), "'"));
  return absl::OkStatus();
}

// Engine::Shutdown's one run: refuse new work, wait for the drain, stop the
// runtime's threads, destroy what is left.
absl::Status ShutdownOnce(EngineImpl* impl, uint64_t timeout_ns) {
  impl->BeginShutdown();
  const uint64_t end = impl->env().clock->NowNs() + timeout_ns;
  bool drained = false;
  {
    engine::RuntimeWaiter waiter(impl);
    for (;;) {
      const uint64_t seen = waiter.Generation();
      drained = engine::RuntimeWorkersDrained(impl);
      const uint64_t now = impl->env().clock->NowNs();
      if (drained || now >= end) break;
      waiter.Wait(seen, end - now);
    }
  }
  engine::StopThreadedRuntime(impl);
  if (!drained) return absl::DeadlineExceededError("shutdown: endpoints still retiring");
  return impl->FinishShutdown();
}
}  // namespace

namespace {
EngineEnv WithNet(EngineEnv env, hal::ControlNet* net) {
  env.control_net = net;
  return env;
}
}  // namespace

EngineImpl::EngineImpl(const EngineConfig& config, const EngineEnv& env,
                       const base::Mutations* mutations, engine::LifecycleObserver* observer)
    : config_(config),
      auth_net_(std::make_unique<engine::auth::AuthNet>(env.control_net, config.auth, env.entropy,
                                                        mutations)),
      env_(WithNet(env, auth_net_.get())),
      mutations_(mutations),
      notify_inbox_(mutations),
      observer_(observer) {}

EngineImpl::~EngineImpl() {
  listener_.reset();
  async_.reset();
  workers_.clear();  // endpoints still held are destroyed by their OwnedQp
  for (auto& c : contexts_) (void)c->Disable();
}

// Create in phases, each on the half-built engine: the contexts (C7: one
// that fails to come up released what it made), the workers and their env,
// then the async reader and the listener (last: nothing is served before
// every context is up).
absl::StatusOr<std::unique_ptr<EngineImpl>> EngineImpl::Create(
    const EngineConfig& config, const EngineEnv& env, const base::Mutations* mutations,
    engine::LifecycleObserver* observer) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  if (env.verbs == nullptr) return absl::InvalidArgumentError("EngineEnv.verbs is null");
  if (env.control_net == nullptr)
    return absl::InvalidArgumentError("EngineEnv.control_net is null");
  if (env.clock == nullptr) return absl::InvalidArgumentError("EngineEnv.clock is null");
  if (env.entropy == nullptr) return absl::InvalidArgumentError("EngineEnv.entropy is null");
  std::unique_ptr<EngineImpl> e(new EngineImpl(config, env, mutations, observer));
  e->incarnation_ = env.entropy->Next64() | 1;
  FERRY_RETURN_IF_ERROR(e->EnableContexts());
  FERRY_RETURN_IF_ERROR(e->SetUpNotify());
  e->BuildWorkers();
  e->BuildListener();
  return e;
}

// A context whose bring-up fails stays a rail of the engine, down: its
// owners retry the bring-up in place (Context::Reenable, with the re-enable
// backoff), and until it is up no task is routed to it and the descriptor
// leaves it out. Only a configuration the device cannot offer (a retry
// cannot help) drops it, and Create fails when no context came up.
absl::Status EngineImpl::EnableContexts() {
  std::vector<std::string> names = config_.devices;
  if (names.empty()) {
    FERRY_ASSIGN_OR_RETURN(auto devs, env_.verbs->ListDevices());
    for (const auto& d : devs) names.push_back(d.name);
  }
  if (names.empty()) return absl::NotFoundError("no RDMA device");
  absl::Status last;
  bool any_up = false;
  const uint64_t now = env_.clock->NowNs();
  for (const std::string& name : names) {
    if (!engine::NicNameCarriable(name)) {
      // A peer could not name it in a handshake (nor accept a descriptor
      // listing it).
      last = absl::InvalidArgumentError(absl::StrCat("device name '", name, "' is not 1..",
                                                     engine::kNicNameBytesMax,
                                                     " bytes of printable ASCII without space"));
      continue;
    }
    auto ctx = std::make_unique<engine::Context>(
        env_.verbs, name, config_, static_cast<uint32_t>(contexts_.size()), &ledger_, mutations_);
    absl::Status s = ctx->Enable();
    if (!s.ok()) {
      last = s;  // the context released what it created (C7)
      // Test-only: the old rule, the NIC is no rail for the process's life.
      if (ctx->exceeds_device() ||
          (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC7DropFailedBringUp)))
        continue;
      ctx->ReenableFailed(now, config_.rail_cooldown_ns, config_.rail_cooldown_ns_max);
    }
    any_up = any_up || s.ok();
    contexts_.push_back(std::move(ctx));
  }
  if (!any_up) {
    contexts_.clear();  // each released what it created
    return last;
  }
  return absl::OkStatus();
}

void EngineImpl::BuildWorkers() {
  worker_env_.config = &config_;
  worker_env_.verbs = env_.verbs;
  worker_env_.net = env_.control_net;
  worker_env_.clock = env_.clock;
  worker_env_.entropy = env_.entropy;
  worker_env_.mutations = mutations_;
  worker_env_.ledger = &ledger_;
  worker_env_.incarnation = incarnation_;
  worker_env_.observer = observer_;
  // DEVICE_FATAL re-enable changed a context's rkeys: peers must fetch a
  // new descriptor (C7).
  worker_env_.context_reenabled = [this](uint32_t) {
    base::MutexLock l(&mu_);
    ++version_;
  };
  worker_env_.window_offered = [this](uint64_t region, const std::string& identity) {
    return WindowOffered(region, identity);
  };
  // A peer rejected an rkey: refetch that segment's descriptor.
  worker_env_.remote_access_error = [this](uint32_t w, uint64_t seg, uint64_t v) {
    RemoteAccessError(w, seg, v);
  };
  worker_env_.notify_slots = notify_slots_.get();
  worker_env_.notify_received = [this](uint32_t w, const std::string& path, uint64_t incarnation,
                                       absl::Span<const uint8_t> bytes) {
    NotifyReceived(w, path, incarnation, bytes);
  };
  for (auto& c : contexts_) worker_env_.contexts.push_back(c.get());
  for (uint32_t w = 0; w < config_.workers; ++w)
    workers_.push_back(std::make_unique<engine::Worker>(w, &worker_env_));
  // The destroy give-up reset reaches every owner as a DEVICE_FATAL of the
  // context, through the same inbox path as a real one.
  worker_env_.reset_context = [this](uint32_t ctx) {
    hal::AsyncEvent ev;
    ev.type = hal::AsyncEventType::kDeviceFatal;
    ev.context = contexts_[ctx]->handle();
    for (uint32_t w = 0; w < workers_.size(); ++w) {
      workers_[w]->Push(engine::InboxAsync{ev});
      Wake(w);
    }
  };
}

void EngineImpl::BuildListener() {
  std::vector<engine::Worker*> raw;
  for (auto& w : workers_) raw.push_back(w.get());
  std::vector<std::string> nics;
  for (auto& c : contexts_) nics.push_back(c->device());
  async_ = std::make_unique<engine::AsyncReader>(env_.verbs, worker_env_.contexts, raw,
                                                 [this](uint32_t w) { Wake(w); });
  engine::ListenerEnv le;
  le.net = env_.control_net;
  le.workers = raw;
  le.nics = nics;
  le.descriptor_for = [this](const std::string& identity) { return DescriptorFor(identity); };
  le.descriptor_arrived = [this](uint64_t t, const SegmentDescriptor& d) {
    DescriptorArrived(t, d);
  };
  le.descriptor_refused = [this](uint64_t t, const std::string& from, const std::string& why) {
    DescriptorRefused(t, from, why);
  };
  le.wake = [this](uint32_t w) { Wake(w); };
  le.tick = [this] { RefetchTick(); };
  le.next_tick_ns = [this] { return NextRefetchNs(); };
  le.mutations = mutations_;
  listener_ = std::make_unique<engine::Listener>(std::move(le));
}

// ------------------------------------------------------------------ memory
absl::Status EngineImpl::RegisterMemory(void* addr, size_t len_bytes,
                                        const MemoryOptions& options) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  FERRY_RETURN_IF_ERROR(ValidateMemoryOptions(options));
  if (addr == nullptr) return absl::InvalidArgumentError("RegisterMemory: null address");
  if (len_bytes == 0) return absl::InvalidArgumentError("RegisterMemory: zero length");
  if (a + len_bytes < a) return absl::InvalidArgumentError("RegisterMemory: range overflows");
  base::MutexLock l(&mu_);
  if (shutdown_) return absl::FailedPreconditionError("engine is shutting down");
  // O(log n): mr_ranges_ holds exactly the ranges of regions_, each tagged
  // with its region's id (RouteOf takes the id from Submit's validation).
  const uint64_t id = next_region_;
  if (!mr_ranges_.Add(a, len_bytes, id).ok())
    return absl::AlreadyExistsError("RegisterMemory: overlaps a registered range");
  ++next_region_;
  for (size_t i = 0; i < contexts_.size(); ++i) {
    auto k = contexts_[i]->RegisterRegion(id, addr, len_bytes, engine::MrAccessFor(options.access),
                                          options.revocable);
    if (!k.ok()) {
      for (size_t j = 0; j < i; ++j) (void)contexts_[j]->DeregisterRegion(id);
      FERRY_CHECK(mr_ranges_.Remove(a).ok());
      return k.status();
    }
  }
  regions_[a] = Region{id, a, len_bytes, options.access, options.peers, options.revocable};
  ++version_;
  return absl::OkStatus();
}

absl::Status EngineImpl::UnregisterMemory(void* addr) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  base::MutexLock l(&mu_);
  auto it = regions_.find(a);
  if (it == regions_.end()) return absl::NotFoundError("UnregisterMemory: no range starts there");
  const Region r = it->second;
  for (const auto& [id, b] : batches_)
    for (const auto& t : b.tasks)
      if (t != nullptr && !IsTerminal(t->task->status()) && t->local_addr < r.addr + r.len_bytes &&
          r.addr < t->local_addr + t->task->geometry().length_bytes)
        return absl::FailedPreconditionError("UnregisterMemory: a pending task uses the range");
  for (auto& c : contexts_) FERRY_RETURN_IF_ERROR(c->DeregisterRegion(r.id));
  regions_.erase(it);
  FERRY_CHECK(mr_ranges_.Remove(a).ok());
  ++version_;
  return absl::OkStatus();
}

SegmentDescriptor EngineImpl::LocalSegment() const {
  base::MutexLock l(&mu_);
  return BuildDescriptor(nullptr);
}

SegmentDescriptor EngineImpl::BuildDescriptor(const std::string* peer) const {
  SegmentDescriptor d;
  d.address = env_.control_net->LocalAddress();
  d.incarnation = incarnation_;
  d.version = version_;
  // Only the devices that are up (a peer routing to one that is down
  // would wait out its handshake timeout): a device's rkeys are column i
  // of every buffer, i its place in `devices`.
  std::vector<const engine::Context*> up;
  for (const auto& c : contexts_) {
    const std::optional<engine::Context::Published> p = c->published();
    if (!p) continue;
    DeviceDescriptor dd;
    dd.name = c->device();
    dd.gid = p->gid.raw;
    dd.lid = p->lid;
    d.devices.push_back(std::move(dd));
    up.push_back(c.get());
  }
  for (const auto& [start, r] : regions_) {
    if (peer != nullptr && !OfferedTo(r, *peer))
      continue;  // not offered to this peer: no rkey of it leaves
    BufferDescriptor b;
    b.addr = r.addr;
    b.length_bytes = r.len_bytes;
    b.access = r.access;
    for (size_t i = 0; i < up.size(); ++i) {
      auto k = up[i]->KeysOf(r.id);
      b.rkeys.push_back(k.ok() ? k->rkey : 0);
      // Windowed there: the peer asks for windows by the range's id.
      if (k.ok() && k->windowed && i < 64) b.window_devices |= uint64_t{1} << i;
    }
    if (b.window_devices != 0) b.window = r.id;
    d.buffers.push_back(std::move(b));
  }
  return d;
}

// ------------------------------------------------------------------ peers
absl::StatusOr<OpenToken> EngineImpl::OpenSegmentAsync(std::string_view host_port) {
  FERRY_RETURN_IF_ERROR(ValidateHostPort(host_port));
  uint64_t token = 0;
  {
    base::MutexLock l(&mu_);
    if (shutdown_) return absl::FailedPreconditionError("engine is shutting down");
    token = next_token_++;
    OpenState& o = opens_[token];
    o.address = std::string(host_port);
    const uint64_t now = env_.clock->NowNs();
    o.deadline_ns = now + config_.handshake_timeout_ns * (uint64_t{config_.handshake_retries} + 1);
    o.last_send_ns = now;
  }
  engine::DescMessage m;
  m.type = engine::DescType::kReq;
  m.token = token;
  (void)env_.control_net->Send(host_port, engine::EncodeDesc(m));
  return OpenToken{token};
}

void EngineImpl::DescriptorArrived(uint64_t token, const SegmentDescriptor& d) {
  const uint32_t listener = static_cast<uint32_t>(workers_.size());
  std::string_view event;
  uint64_t segment = 0;
  {
    base::MutexLock l(&mu_);
    auto it = opens_.find(token);
    if (it == opens_.end()) {
      // An answer of a refetch that already ended (a resent DESC_REQ's
      // second answer, a duplicate, one overtaken): it changes nothing.
      if (ended_refetches_.contains(token)) ++late_refetch_answers_;
      return;
    }
    if (d.address != it->second.address) return;
    if (it->second.segment == 0) {
      it->second.descriptor = d;  // a user's open: PollOpenSegment takes it
      return;
    }
    // A refetch: the first answer ends it (duplicates find no entry).
    segment = it->second.segment;
    PeerSegment* found = EndRefetch(it);
    if (found == nullptr) return;
    PeerSegment& ps = *found;
    engine::RefetchAnswer answer = engine::DecideRefetchAnswer(ps.descriptor, d);
    // Test-only: an answer with a lower or equal version applied anyway.
    if (answer == engine::RefetchAnswer::kUnchanged && mutations_ != nullptr &&
        mutations_->on(base::Mutation::kEngineRefetchAnyVersion))
      answer = engine::RefetchAnswer::kApply;
    switch (answer) {
      case engine::RefetchAnswer::kApply: {
        ps.SetDescriptor(d);
        ps.stale = false;
        ++ps.refetches_applied;
        event = "refetch_applied";
        break;
      }
      case engine::RefetchAnswer::kUnchanged:
        ++ps.refetches_unchanged;
        event = "refetch_unchanged";
        break;
      case engine::RefetchAnswer::kOtherIncarnation:
        ++ps.refetches_unchanged;
        event = "refetch_other_incarnation";
        break;
      case engine::RefetchAnswer::kOtherAddress:
        FERRY_UNREACHABLE();  // the address was checked above
        break;
    }
  }
  Note(listener, event, d.address, segment, d.version);
}

EngineImpl::PeerSegment* EngineImpl::EndRefetch(std::map<uint64_t, OpenState>::iterator open) {
  const uint64_t token = open->first;
  const uint64_t segment = open->second.segment;
  opens_.erase(open);
  NoteRefetchEnded(token);
  auto sit = segments_.find(segment);
  if (sit == segments_.end() || sit->second.refetch_token != token) return nullptr;
  sit->second.refetch_token = 0;
  return &sit->second;
}

void EngineImpl::NoteRefetchEnded(uint64_t token) {
  ended_refetches_.insert(token);
  // Bounded: tokens grow, so the oldest is the first.
  if (ended_refetches_.size() > kEndedRefetchesMax)
    ended_refetches_.erase(ended_refetches_.begin());
}

void EngineImpl::RemoteAccessError(uint32_t worker, uint64_t segment, uint64_t version) {
  std::string address;
  uint64_t token = 0;
  {
    base::MutexLock l(&mu_);
    if (shutdown_) return;
    auto sit = segments_.find(segment);
    if (sit == segments_.end()) return;  // closed since the submit
    PeerSegment& ps = sit->second;
    const engine::RefetchStart start =
        engine::DecideRefetchStart(ps.descriptor.version, version, ps.refetch_token != 0);
    if (start == engine::RefetchStart::kOlderVersion) return;
    ps.stale = true;
    if (start == engine::RefetchStart::kInFlight) return;
    token = next_token_++;
    OpenState& o = opens_[token];
    o.address = ps.descriptor.address;
    o.segment = segment;
    o.sends = 1;
    const uint64_t now = env_.clock->NowNs();
    o.deadline_ns = now + config_.handshake_timeout_ns * (uint64_t{config_.handshake_retries} + 1);
    o.last_send_ns = now;
    ps.refetch_token = token;
    ++ps.refetches_started;
    address = o.address;
  }
  Note(worker, "refetch_start", address, segment, version);
  SendDescReq(address, token);
}

void EngineImpl::RefetchTick() {
  const uint32_t listener = static_cast<uint32_t>(workers_.size());
  struct Action {
    std::string address;
    uint64_t token = 0;
    uint64_t segment = 0;
    uint32_t sends = 0;  // 0: given up
  };
  std::vector<Action> actions;
  {
    base::MutexLock l(&mu_);
    const uint64_t now = env_.clock->NowNs();
    for (auto it = opens_.begin(); it != opens_.end();) {
      OpenState& o = it->second;
      if (o.segment == 0) {
        ++it;
        continue;
      }
      auto sit = segments_.find(o.segment);
      FERRY_CHECK(sit != segments_.end());  // CloseSegment erases its refetch
      FERRY_CHECK_EQ(sit->second.refetch_token, it->first);
      if (shutdown_ || now >= o.deadline_ns) {
        sit->second.refetch_token = 0;
        if (!shutdown_) {
          ++sit->second.refetches_given_up;
          actions.push_back(Action{o.address, it->first, o.segment, 0});
        }
        NoteRefetchEnded(it->first);
        it = opens_.erase(it);
        continue;
      }
      if (now >= o.last_send_ns + config_.handshake_timeout_ns) {
        o.last_send_ns = now;
        ++o.sends;
        actions.push_back(Action{o.address, it->first, o.segment, o.sends});
      }
      ++it;
    }
  }
  for (const Action& a : actions) {
    if (a.sends == 0) {
      Note(listener, "refetch_give_up", a.address, a.segment, 0);
      continue;
    }
    Note(listener, "refetch_resend", a.address, a.segment, a.sends);
    SendDescReq(a.address, a.token);
  }
}

std::optional<uint64_t> EngineImpl::NextRefetchNs() const {
  base::MutexLock l(&mu_);
  std::optional<uint64_t> next;
  for (const auto& [token, o] : opens_) {
    if (o.segment == 0) continue;
    const uint64_t due = std::min(o.deadline_ns, o.last_send_ns + config_.handshake_timeout_ns);
    if (!next.has_value() || due < *next) next = due;
  }
  return next;
}

void EngineImpl::Note(uint32_t worker, std::string_view kind, std::string_view key, uint64_t a,
                      uint64_t b) const {
  if (observer_ != nullptr) observer_->OnEvent(worker, kind, key, a, b);
}

void EngineImpl::SendDescReq(const std::string& address, uint64_t token) const {
  engine::DescMessage m;
  m.type = engine::DescType::kReq;
  m.token = token;
  (void)env_.control_net->Send(address, engine::EncodeDesc(m));  // loss: resent by the tick
}

absl::StatusOr<std::optional<SegmentHandle>> EngineImpl::PollOpenSegment(OpenToken token) {
  std::string resend_to;
  {
    base::MutexLock l(&mu_);
    auto it = opens_.find(token.id);
    if (it == opens_.end() || it->second.segment != 0)
      return absl::NotFoundError("unknown open token");
    OpenState& o = it->second;
    if (o.descriptor.has_value()) {
      const uint64_t id = next_segment_++;
      PeerSegment& ps = segments_[id];
      ps.SetDescriptor(std::move(*o.descriptor));
      FERRY_CHECK(segment_index_.emplace(id, &ps).second);
      opens_.erase(it);
      return std::optional<SegmentHandle>(SegmentHandle{id});
    }
    if (o.refused.has_value()) {
      const std::string why = *o.refused;
      opens_.erase(it);
      return absl::PermissionDeniedError(why);
    }
    const uint64_t now = env_.clock->NowNs();
    if (now >= o.deadline_ns) {
      opens_.erase(it);
      return absl::DeadlineExceededError("no descriptor from the peer in time");
    }
    if (now >= o.last_send_ns + config_.handshake_timeout_ns) {
      o.last_send_ns = now;
      resend_to = o.address;
    }
  }
  if (!resend_to.empty()) {
    engine::DescMessage m;
    m.type = engine::DescType::kReq;
    m.token = token.id;
    (void)env_.control_net->Send(resend_to, engine::EncodeDesc(m));
  }
  return std::optional<SegmentHandle>();
}

absl::Status EngineImpl::CloseSegment(SegmentHandle segment) {
  base::MutexLock l(&mu_);
  auto it = segments_.find(segment.id);
  if (it == segments_.end()) return absl::NotFoundError("unknown segment");
  // C8: refused, changing nothing, while a task that targets it can still
  // post (its route holds the descriptor's rkey and address).
  for (const auto& [id, b] : batches_)
    for (const auto& t : b.tasks)
      if (t->segment == segment.id && !IsTerminal(t->task->status()))
        return absl::FailedPreconditionError(
            "CloseSegment: a task that targets the segment is pending");
  if (it->second.refetch_token != 0) {
    opens_.erase(it->second.refetch_token);
    NoteRefetchEnded(it->second.refetch_token);
  }
  segments_.erase(it);
  FERRY_CHECK_EQ(segment_index_.erase(segment.id), 1u);
  return absl::OkStatus();
}

uint64_t EngineImpl::RefetchTokenOf(SegmentHandle segment) const {
  base::MutexLock l(&mu_);
  auto it = segments_.find(segment.id);
  return it == segments_.end() ? 0 : it->second.refetch_token;
}

absl::StatusOr<SegmentInfo> EngineImpl::GetSegmentInfo(SegmentHandle segment) const {
  base::MutexLock l(&mu_);
  auto it = segments_.find(segment.id);
  if (it == segments_.end()) return absl::NotFoundError("unknown segment");
  const PeerSegment& ps = it->second;
  SegmentInfo info;
  info.address = ps.descriptor.address;
  info.incarnation = ps.descriptor.incarnation;
  info.version = ps.descriptor.version;
  for (const BufferDescriptor& b : ps.descriptor.buffers)
    info.buffers.push_back(BufferRange{b.addr, b.length_bytes, b.access, b.window_devices != 0});
  info.stale = ps.stale;
  info.refetch_in_flight = ps.refetch_token != 0;
  info.refetches_started = ps.refetches_started;
  info.refetches_applied = ps.refetches_applied;
  info.refetches_unchanged = ps.refetches_unchanged;
  info.refetches_given_up = ps.refetches_given_up;
  return info;
}

// ------------------------------------------------------------------ batches
absl::StatusOr<BatchId> EngineImpl::AllocateBatch(uint32_t capacity) {
  if (capacity == 0 || capacity > config_.batch_capacity_max)
    return absl::InvalidArgumentError(
        absl::StrCat("batch capacity ", capacity, " not in 1..", config_.batch_capacity_max));
  base::MutexLock l(&mu_);
  if (shutdown_) return absl::FailedPreconditionError("engine is shutting down");
  const uint64_t id = next_batch_++;
  Batch& b = batches_[id];
  b.capacity = capacity;
  // Its task list sized now (up to kBatchTasksReserved, 16 KiB), so Submit
  // does not grow it: a batch of up to that many tasks allocates here,
  // never per request; a larger one grows as it fills.
  b.tasks.reserve(std::min<uint32_t>(capacity, kBatchTasksReserved));
  return BatchId{id};
}

void EngineImpl::PeerSegment::SetDescriptor(SegmentDescriptor d) {
  // Overlapping or empty buffers are left out of `ranges`; the tag is the
  // buffer's index (RouteOf takes its keys by it).
  engine::RangeSet rs;
  buffer_keys.clear();
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    const BufferDescriptor& b = d.buffers[i];
    (void)rs.Add(b.addr, b.length_bytes, i, static_cast<uint32_t>(b.access));
    buffer_keys.push_back(BufferKeys{{b.rkeys.begin(), b.rkeys.end()}, b.window, b.window_devices});
  }
  ranges = std::move(rs);
  descriptor = std::move(d);
}

const std::shared_ptr<const std::string>& EngineImpl::PeerPathOf(PeerSegment& ps, size_t pdev) {
  const SegmentDescriptor& seg = ps.descriptor;
  const std::pair<uint64_t, uint64_t> of{seg.version, seg.incarnation};
  const size_t n = std::max<size_t>(1, seg.devices.size());
  // The device count too: a same-version answer applied anyway (the test
  // switch engine_refetch_any_version) may list other devices.
  if (ps.paths_of != of || ps.peer_paths.size() != n) {
    ps.peer_paths.clear();
    ps.key_hashes.clear();
    for (size_t d = 0; d < n; ++d) {
      const std::string nic = seg.devices.empty() ? "" : seg.devices[d].name;
      ps.peer_paths.push_back(std::make_shared<const std::string>(seg.address + "@" + nic));
      for (uint32_t c = 0; c < contexts_.size(); ++c)
        ps.key_hashes.push_back(KeyHashOf(c, *ps.peer_paths.back()));
    }
    ps.paths_of = of;
  }
  FERRY_CHECK_LT(pdev, ps.peer_paths.size());
  return ps.peer_paths[pdev];
}

// One accepted request as its owner needs it (Submit, under mu_): the task,
// the rail (local context and peer device, spread by the task's index in
// its batch), the keys of the local region and of the remote buffer.
// `found` is what validation found for it (the local region's id is its
// local range's tag, the remote buffer's index its remote range's; an
// empty range: none, as for a notification), and `validated` the segment
// it was found in (null: RouteOf looks the request's segment up).
std::shared_ptr<engine::TaskRoute> EngineImpl::RouteOf(const Request& r, uint32_t index,
                                                       uint64_t now,
                                                       const engine::ResolvedRanges& found,
                                                       PeerSegment* validated, RouteMemo& memo) {
  // The descriptor held now, stale or not (a refetch in flight does not
  // hold the submit back; see Engine::GetSegmentInfo).
  PeerSegment& ps = validated != nullptr ? *validated : *segment_index_.at(r.segment.id);
  const SegmentDescriptor& seg = ps.descriptor;
  engine::TaskGeometry g;
  g.length_bytes = r.length_bytes;
  g.slice_size_bytes = config_.slice_size_bytes;
  g.submit_ns = now;
  g.deadline_ns = now + config_.slice_timeout_ns;
  std::shared_ptr<TaskRoute> route = engine::MakeTaskRoute(task_pool_, g, mutations_);
  route->op = r.opcode;
  route->local_addr = r.local_addr;
  route->remote_addr = r.remote_addr;
  route->segment = r.segment.id;
  route->segment_version = seg.version;
  route->peer_incarnation = seg.incarnation;
  // Rail: spread tasks over local contexts and the peer's devices; a
  // context that never came up (its bring-up still to be retried in
  // place) passes its share to the next one up. (One parked by
  // DEVICE_FATAL keeps its share: its tasks wait for the re-enable, and
  // time out if it keeps failing.)
  const uint32_t n = static_cast<uint32_t>(contexts_.size());
  route->context = index % n;
  for (uint32_t k = 0; k < n; ++k) {
    if (contexts_[(index + k) % n]->up()) {
      route->context = (index + k) % n;
      break;
    }
  }
  const size_t pdev = seg.devices.empty() ? 0 : index % seg.devices.size();
  route->peer_path = PeerPathOf(ps, pdev);
  FERRY_CHECK_EQ(ps.key_hashes.size(), ps.peer_paths.size() * n);  // PeerPathOf built both
  route->key_hash = ps.key_hashes[pdev * n + route->context];
  // The region validation found holding local_addr (none for a
  // notification's send slot).
  if (found.local.length_bytes != 0) SetLocalKeys(*route, found.local.tag, memo);
  // The buffer C8 validated the remote range against (its index is the
  // range's tag; none for a notification).
  if (found.remote.length_bytes != 0 && found.remote.tag < ps.buffer_keys.size()) {
    const BufferKeys& buf = ps.buffer_keys[found.remote.tag];
    route->rkey = pdev < buf.rkeys.size() ? buf.rkeys[pdev] : 0;
    // Reached through windows on that device: the owner takes the rkey
    // of the window bound on the QP each slice is posted on.
    if (pdev < 64 && ((buf.window_devices >> pdev) & 1) != 0) route->window = buf.window;
  }
  return route;
}

void EngineImpl::SetLocalKeys(engine::TaskRoute& route, uint64_t region, RouteMemo& memo) {
  // Epoch first: a re-enable in between only makes the owner refresh a key
  // that is already new (so a remembered key serves only its own epoch).
  route.lkey_epoch = contexts_[route.context]->epoch();
  route.region = region;
  if (memo.context != route.context || memo.region != region || memo.epoch != route.lkey_epoch) {
    // Not registered there (the context went down since): the owner takes
    // the keys of the new epoch before it posts.
    auto keys = contexts_[route.context]->KeysOf(region);
    memo.context = route.context;
    memo.region = region;
    memo.epoch = route.lkey_epoch;
    memo.lkey = keys.ok() ? keys->lkey : 0;
  }
  route.lkey = memo.lkey;
}

SubmitResult EngineImpl::Submit(BatchId batch, absl::Span<const Request> requests,
                                const NotifyRequest* notify) {
  SubmitResult out;
  Submit(batch, requests, notify, &out);
  return out;
}

void EngineImpl::Submit(BatchId batch, absl::Span<const Request> requests,
                        const NotifyRequest* notify, SubmitResult* result) {
  SubmitResult& out = *result;
  out.status = absl::OkStatus();
  out.per_request.clear();
  out.tasks.clear();
  out.notify_task.reset();
  out.notify_seq = 0;
  Routed routed;
  {
    base::MutexLock l(&mu_);
    if (shutdown_) {
      out.status = absl::FailedPreconditionError("engine is shutting down");
      return;
    }
    auto bit = batches_.find(batch.id);
    if (bit == batches_.end()) {
      out.status = absl::NotFoundError("unknown batch");
      return;
    }
    if (requests.empty() && notify == nullptr) {
      out.status = absl::InvalidArgumentError("no requests");
      return;
    }
    Batch& b = bit->second;
    const size_t notify_tasks = notify == nullptr ? 0 : 1;
    if (notify != nullptr) {
      out.status = CheckNotify(b, requests, *notify);
      if (!out.status.ok()) return;
    }
    const std::optional<size_t> validated = Validate(b, requests, notify_tasks, &out);
    if (!validated.has_value()) return;
    const size_t enqueue = *validated;
    const uint64_t now = env_.clock->NowNs();
    // The notification's route first (it can still be refused: no send
    // slot, or its receiver's window is full); nothing is enqueued then.
    std::shared_ptr<TaskRoute> note;
    if (notify != nullptr) {
      auto made = NotifyRouteOf(batch, *notify, static_cast<uint32_t>(b.tasks.size()), now,
                                &out.notify_seq);
      if (!made.ok()) {
        out.status = made.status();
        out.per_request.clear();
        return;
      }
      note = *std::move(made);
    }
    routed.reserve(enqueue + notify_tasks);
    out.tasks.reserve(enqueue);
    FERRY_CHECK_LE(enqueue, resolved_.size());
    RouteMemo memo;
    for (size_t i = 0; i < enqueue; ++i) {
      const uint32_t index = static_cast<uint32_t>(b.tasks.size());
      std::shared_ptr<TaskRoute> route =
          RouteOf(requests[i], index, now, resolved_[i], validated_segments_[i], memo);
      b.tasks.push_back(route);
      out.tasks.push_back(TaskId{batch, index});
      routed.emplace_back(OwnerOfRoute(*route), route);
    }
    if (note != nullptr) {
      out.notify_task = TaskId{batch, static_cast<uint32_t>(b.tasks.size())};
      b.tasks.push_back(note);
      EnqueueNotify(routed, enqueue, note);
    }
  }
  PushRouted(routed);
  // Validate left one OK per request (a mutation's prefix run too).
  if (out.per_request.size() != requests.size())
    out.per_request.assign(requests.size(), absl::OkStatus());
}

std::optional<size_t> EngineImpl::Validate(const Batch& b, absl::Span<const Request> requests,
                                           size_t notify_tasks, SubmitResult* out) {
  // C8: every request validated before any is enqueued, a status each.
  // The last segment found (a batch's requests mostly share one).
  // Each request's segment is kept for RouteOf (validated_segments_).
  uint64_t last_id = 0;
  PeerSegment* last = nullptr;
  validated_segments_.assign(requests.size(), nullptr);
  const bool all_ok = engine::ValidateRequestsInto(
      requests, mr_ranges_,
      [this, &last_id, &last](SegmentHandle h, size_t index)
          ABSL_NO_THREAD_SAFETY_ANALYSIS -> const engine::RangeSet* {
            if (last == nullptr || last_id != h.id) {
              auto it = segment_index_.find(h.id);
              if (it == segment_index_.end()) return nullptr;
              last_id = h.id;
              last = it->second;
            }
            validated_segments_[index] = last;
            return &last->ranges;
          },
      config_.request_bytes_max, b.capacity - b.tasks.size() - notify_tasks,
      mutations_ == nullptr || !mutations_->on(base::Mutation::kEngineC8NoRemoteAccessCheck),
      &out->per_request, &resolved_);
  if (all_ok) return requests.size();
  out->status = absl::InvalidArgumentError("a request is invalid; nothing was enqueued");
  if (mutations_ == nullptr || !mutations_->on(base::Mutation::kEngineC8SkipValidation))
    return std::nullopt;
  // Mutation: the valid prefix is enqueued before the bad request.
  size_t enqueue = 0;
  while (enqueue < out->per_request.size() && out->per_request[enqueue].ok()) ++enqueue;
  return enqueue;
}

void EngineImpl::PushRouted(Routed& routed) {
  // Each owner gets its requests in submit order, under one inbox lock and
  // one wake (a batch of B requests to one owner was B locks and B wakes).
  auto by_owner = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(routed.begin(), routed.end(), by_owner))
    std::stable_sort(routed.begin(), routed.end(), by_owner);
  for (size_t i = 0; i < routed.size();) {
    const uint32_t owner = routed[i].first;
    size_t end = i;
    while (end < routed.size() && routed[end].first == owner) ++end;
    workers_[owner]->PushSubmits(absl::MakeSpan(routed).subspan(i, end - i));
    i = end;
    Submitted(owner);
  }
}

absl::StatusOr<TaskStatus> EngineImpl::GetTaskStatus(TaskId task) const {
  base::MutexLock l(&mu_);
  auto it = batches_.find(task.batch.id);
  if (it == batches_.end()) return absl::NotFoundError("unknown batch");
  if (task.index >= it->second.tasks.size()) return TaskStatus::kInvalid;
  return it->second.tasks[task.index]->task->status();
}

std::shared_ptr<const engine::Task> EngineImpl::TaskOf(TaskId task) const {
  base::MutexLock l(&mu_);
  auto it = batches_.find(task.batch.id);
  if (it == batches_.end() || task.index >= it->second.tasks.size()) return nullptr;
  const std::shared_ptr<TaskRoute>& route = it->second.tasks[task.index];
  return std::shared_ptr<const engine::Task>(route, route->task);  // keeps the route's block
}

std::pair<uint64_t, uint64_t> EngineImpl::LocalRangeOf(TaskId task) const {
  base::MutexLock l(&mu_);
  auto it = batches_.find(task.batch.id);
  if (it == batches_.end() || task.index >= it->second.tasks.size()) return {0, 0};
  const TaskRoute& r = *it->second.tasks[task.index];
  return {r.local_addr, r.task->geometry().length_bytes};
}

absl::StatusOr<BatchStatus> EngineImpl::GetBatchStatus(BatchId batch) const {
  base::MutexLock l(&mu_);
  auto it = batches_.find(batch.id);
  if (it == batches_.end()) return absl::NotFoundError("unknown batch");
  BatchStatus bs;
  bs.tasks = static_cast<uint32_t>(it->second.tasks.size());
  for (const auto& t : it->second.tasks)
    ++bs.count_by_status[static_cast<size_t>(t->task->status())];
  auto c = [&bs](TaskStatus s) { return bs.count_by_status[static_cast<size_t>(s)]; };
  if (c(TaskStatus::kPending) > 0) {
    bs.overall = TaskStatus::kPending;
  } else if (c(TaskStatus::kFailed) > 0) {
    bs.overall = TaskStatus::kFailed;
  } else if (c(TaskStatus::kTimeout) > 0) {
    bs.overall = TaskStatus::kTimeout;
  } else if (c(TaskStatus::kCanceled) > 0) {
    bs.overall = TaskStatus::kCanceled;
  } else if (c(TaskStatus::kCompleted) > 0) {
    bs.overall = TaskStatus::kCompleted;
  } else {
    bs.overall = TaskStatus::kInvalid;
  }
  return bs;
}

std::optional<uint32_t> EngineImpl::CancelRoute(engine::TaskRoute& t) {
  if (!t.task->TryLatch(TaskStatus::kCanceled)) return std::nullopt;
  std::optional<TaskStatus> published;
  const uint32_t withdrawn = t.task->WithdrawQueued(&published);
  // A task with nothing posted publishes here, on this thread: its
  // waiters must not wait for the next worker step to learn it.
  if (published.has_value()) engine::RuntimeNotifyProgress(this);
  // The withdrawn slices are still in their owner's queue until its
  // PostAll drops them, and an owner asleep may be waiting on that very
  // queue (a full endpoint store whose only evictable endpoint is this
  // key's: ferry-sim seed 664135965). Its wait set now says work.
  const bool no_wake = mutations_ != nullptr && mutations_->on(base::Mutation::kEngineCancelNoWake);
  if (withdrawn == 0 || !t.key_hash.has_value() || no_wake) return std::nullopt;
  return OwnerOfRoute(t);
}

void EngineImpl::Recheck(uint32_t owner) {
  // An inbox item wakes it (any runtime steps an owner with inbox items).
  workers_[owner]->Push(engine::InboxRecheck{});
  Wake(owner);
}

absl::Status EngineImpl::Cancel(TaskId task) {
  std::shared_ptr<TaskRoute> t;
  {
    base::MutexLock l(&mu_);
    auto it = batches_.find(task.batch.id);
    if (it == batches_.end() || task.index >= it->second.tasks.size())
      return absl::NotFoundError("unknown task");
    t = it->second.tasks[task.index];
  }
  if (const std::optional<uint32_t> owner = CancelRoute(*t)) Recheck(*owner);
  return absl::OkStatus();
}

absl::Status EngineImpl::CancelBatch(BatchId batch) {
  std::vector<std::shared_ptr<TaskRoute>> tasks;
  {
    base::MutexLock l(&mu_);
    auto it = batches_.find(batch.id);
    if (it == batches_.end()) return absl::NotFoundError("unknown batch");
    tasks = it->second.tasks;
  }
  // Each owner is told once for the whole batch (in owner order).
  std::vector<bool> recheck(workers_.size(), false);
  for (const auto& t : tasks)
    if (const std::optional<uint32_t> owner = CancelRoute(*t)) recheck[*owner] = true;
  for (uint32_t w = 0; w < recheck.size(); ++w)
    if (recheck[w]) Recheck(w);
  return absl::OkStatus();
}

absl::Status EngineImpl::FreeBatch(BatchId batch) {
  base::MutexLock l(&mu_);
  auto it = batches_.find(batch.id);
  if (it == batches_.end()) return absl::NotFoundError("unknown batch");
  for (const auto& t : it->second.tasks)
    if (!IsTerminal(t->task->status()))
      return absl::FailedPreconditionError("FreeBatch: a task of the batch is pending");
  batches_.erase(it);
  return absl::OkStatus();
}

PendingReport EngineImpl::Pending() const {
  PendingReport r;
  base::MutexLock l(&mu_);
  for (const auto& [id, b] : batches_)
    for (size_t i = 0; i < b.tasks.size(); ++i)
      if (!IsTerminal(b.tasks[i]->task->status()))
        r.items.push_back(PendingItem{PendingItem::Kind::kTask, (id << 32) | i,
                                      "task has slices without evidence"});
  for (size_t k = 0; k < static_cast<size_t>(engine::HandleKind::kCount); ++k) {
    auto c = ledger_.Get(static_cast<engine::HandleKind>(k));
    if (c.live() == 0) continue;
    const auto kind = static_cast<engine::HandleKind>(k);
    PendingItem::Kind pk = kind == engine::HandleKind::kQp   ? PendingItem::Kind::kQp
                           : kind == engine::HandleKind::kCq ? PendingItem::Kind::kCq
                           : kind == engine::HandleKind::kMr ? PendingItem::Kind::kMr
                                                             : PendingItem::Kind::kContext;
    r.items.push_back(
        PendingItem{pk, k,
                    absl::StrCat(c.live(), " ", std::string(engine::HandleKindName(kind)),
                                 " object(s) alive, ", c.destroy_failures, " failed destroys")});
  }
  for (const auto& [id, ps] : segments_) {
    if (ps.refetch_token == 0) continue;
    const auto oit = opens_.find(ps.refetch_token);
    FERRY_CHECK(oit != opens_.end());
    r.items.push_back(PendingItem{
        PendingItem::Kind::kSegment, id,
        absl::StrCat("segment ", id, " (", ps.descriptor.address, "): descriptor v",
                     ps.descriptor.version, " rejected (REM_ACCESS_ERR), refetch in flight, send ",
                     oit->second.sends, " of ", uint64_t{config_.handshake_retries} + 1)});
  }
  return r;
}

// ------------------------------------------------------------------ lifecycle
void EngineImpl::BeginShutdown() {
  std::vector<std::shared_ptr<TaskRoute>> all;
  {
    base::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (const auto& [id, b] : batches_)
      for (const auto& t : b.tasks) all.push_back(t);
  }
  for (const auto& t : all) {
    if (t->task->TryLatch(TaskStatus::kCanceled)) {
      std::optional<TaskStatus> published;
      t->task->WithdrawQueued(&published);
    }
  }
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    workers_[w]->Push(engine::InboxShutdown{});
    Wake(w);
  }
}

bool EngineImpl::shutting_down() const {
  base::MutexLock l(&mu_);
  return shutdown_;
}

bool EngineImpl::WorkersDrained() const {
  for (const auto& w : workers_)
    if (!w->ShutDown()) return false;
  return true;
}

absl::Status EngineImpl::FinishShutdown() {
  absl::Status first;
  {
    base::MutexLock l(&mu_);
    regions_.clear();
  }
  for (auto& c : contexts_) {
    absl::Status s = c->Disable();
    if (!s.ok() && first.ok()) first = s;
  }
  if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC9LeakAtShutdown)) {
    // Mutation: the shutdown "forgets" one object (see RetireStep): nothing
    // more to do here; the leak check must report it.
  }
  return first;
}

// ------------------------------------------------------------------ Engine
Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_ != nullptr) (void)Shutdown(impl_->config().drain_timeout_ns);
  engine::StopThreadedRuntime(impl_.get());
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config,
                                                       const EngineEnv& env) {
  FERRY_ASSIGN_OR_RETURN(auto impl, EngineImpl::Create(config, env, nullptr, nullptr));
  engine::StartThreadedRuntime(impl.get());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::string Engine::ControlAddress() const { return impl_->env().control_net->LocalAddress(); }

absl::Status Engine::RegisterMemory(void* addr, size_t len_bytes) {
  return impl_->RegisterMemory(addr, len_bytes);
}

absl::Status Engine::RegisterMemory(void* addr, size_t len_bytes, const MemoryOptions& options) {
  return impl_->RegisterMemory(addr, len_bytes, options);
}

AuthStats Engine::GetAuthStats() const { return impl_->GetAuthStats(); }
absl::Status Engine::UnregisterMemory(void* addr) { return impl_->UnregisterMemory(addr); }
SegmentDescriptor Engine::LocalSegment() const { return impl_->LocalSegment(); }
absl::StatusOr<OpenToken> Engine::OpenSegmentAsync(std::string_view host_port) {
  return impl_->OpenSegmentAsync(host_port);
}
absl::StatusOr<std::optional<SegmentHandle>> Engine::PollOpenSegment(OpenToken token) {
  return impl_->PollOpenSegment(token);
}
absl::StatusOr<SegmentHandle> Engine::OpenSegment(std::string_view host_port, uint64_t timeout_ns) {
  FERRY_ASSIGN_OR_RETURN(OpenToken t, impl_->OpenSegmentAsync(host_port));
  const uint64_t end = impl_->env().clock->NowNs() + timeout_ns;
  // Woken by the listener's step that delivered the descriptor; the poll
  // also resends the request (its period is well above the wait's cap).
  engine::RuntimeWaiter waiter(impl_.get());
  for (;;) {
    const uint64_t seen = waiter.Generation();
    FERRY_ASSIGN_OR_RETURN(auto h, impl_->PollOpenSegment(t));
    if (h.has_value()) return *h;
    const uint64_t now = impl_->env().clock->NowNs();
    if (now >= end) return absl::DeadlineExceededError("OpenSegment timed out");
    waiter.Wait(seen, end - now);
  }
}
absl::Status Engine::CloseSegment(SegmentHandle segment) { return impl_->CloseSegment(segment); }
absl::StatusOr<SegmentInfo> Engine::GetSegmentInfo(SegmentHandle segment) const {
  return impl_->GetSegmentInfo(segment);
}
absl::StatusOr<BatchId> Engine::AllocateBatch(uint32_t capacity) {
  return impl_->AllocateBatch(capacity);
}
SubmitResult Engine::Submit(BatchId batch, absl::Span<const Request> requests) {
  return impl_->Submit(batch, requests);
}
void Engine::SubmitInto(BatchId batch, absl::Span<const Request> requests, SubmitResult* result) {
  FERRY_CHECK(result != nullptr);
  impl_->Submit(batch, requests, nullptr, result);
}
SubmitResult Engine::Submit(BatchId batch, absl::Span<const Request> requests,
                            const NotifyOptions& notify) {
  const EngineImpl::NotifyRequest n{requests.empty() ? SegmentHandle{} : requests[0].segment,
                                    notify.message};
  return impl_->Submit(batch, requests, &n);
}
SubmitResult Engine::SendNotify(BatchId batch, SegmentHandle segment, std::string_view message) {
  const EngineImpl::NotifyRequest n{segment, message};
  return impl_->Submit(batch, {}, &n);
}
std::vector<Notification> Engine::PollNotifies(size_t max) { return impl_->PollNotifies(max); }
std::vector<Notification> Engine::WaitNotifies(size_t max, uint64_t timeout_ns) {
  const uint64_t end = impl_->env().clock->NowNs() + timeout_ns;
  engine::RuntimeWaiter waiter(impl_.get());
  for (;;) {
    const uint64_t seen = waiter.Generation();
    std::vector<Notification> got = impl_->PollNotifies(max);
    const uint64_t now = impl_->env().clock->NowNs();
    if (!got.empty() || max == 0 || now >= end) return got;
    waiter.Wait(seen, end - now);
  }
}
absl::StatusOr<TaskStatus> Engine::GetTaskStatus(TaskId task) const {
  return impl_->GetTaskStatus(task);
}
absl::StatusOr<BatchStatus> Engine::GetBatchStatus(BatchId batch) const {
  return impl_->GetBatchStatus(batch);
}
absl::StatusOr<BatchStatus> Engine::WaitBatch(BatchId batch, uint64_t timeout_ns) {
  const uint64_t end = impl_->env().clock->NowNs() + timeout_ns;
  // Woken by the worker step that published (runtime_threads.h); the
  // generation is read before the status so no publish is missed. A
  // transfer is in flight: the spin polls its CQs for the whole budget.
  engine::RuntimeWaiter waiter(impl_.get(), engine::SpinPolicy::kFullBudget);
  for (;;) {
    const uint64_t seen = waiter.Generation();
    FERRY_ASSIGN_OR_RETURN(BatchStatus s, impl_->GetBatchStatus(batch));
    const uint64_t now = impl_->env().clock->NowNs();
    if (s.overall != TaskStatus::kPending || now >= end) return s;
    waiter.Wait(seen, end - now);
  }
}
absl::Status Engine::Cancel(TaskId task) { return impl_->Cancel(task); }
absl::Status Engine::CancelBatch(BatchId batch) { return impl_->CancelBatch(batch); }
absl::Status Engine::FreeBatch(BatchId batch) { return impl_->FreeBatch(batch); }
absl::Status Engine::Shutdown(uint64_t timeout_ns) {
  base::MutexLock l(&impl_->shutdown_mu);
  if (impl_->shutdown_result.has_value()) return *impl_->shutdown_result;
  impl_->shutdown_result = ShutdownOnce(impl_.get(), timeout_ns);
  return *impl_->shutdown_result;
}
PendingReport Engine::Pending() const { return impl_->Pending(); }

}  // namespace ferry
