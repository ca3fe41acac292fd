// engine/context.cc: bring-up, rollback, teardown and re-enable of one
// device context (see context.h for what must stay true).
#include "engine/context.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace ferry::engine {

namespace {
absl::Status Annotate(const absl::Status& s, std::string_view device, Context::Stage stage) {
  return absl::Status(s.code(),
                      absl::StrCat("context ", std::string(device), " bring-up failed at stage ",
                                   std::string(ContextStageName(stage)), ": ", s.message()));
}
}  // namespace

std::string_view ContextStageName(Context::Stage s) {
  switch (s) {
    case Context::Stage::kOpenDevice:
      return "open_device";
    case Context::Stage::kQuery:
      return "query";
    case Context::Stage::kAllocPd:
      return "alloc_pd";
    case Context::Stage::kCompChannels:
      return "comp_channels";
    case Context::Stage::kCqs:
      return "cqs";
    case Context::Stage::kArmCqs:
      return "arm_cqs";
    case Context::Stage::kRegions:
      return "regions";
    case Context::Stage::kDone:
      return "done";
  }
  return "?";
}

Context::Context(hal::Verbs* verbs, std::string device, const EngineConfig& config, uint32_t index,
                 HandleLedger* ledger, const base::Mutations* mutations)
    : verbs_(verbs),
      device_(std::move(device)),
      index_(index),
      workers_(config.workers),
      cqs_per_worker_(config.cqs_per_worker),
      cqe_limit_(config.cqe_limit),
      wr_depth_(config.wr_depth),
      qps_per_endpoint_(config.qps_per_endpoint),
      port_num_(config.port_num),
      gid_index_config_(config.gid_index),
      ledger_(ledger),
      mutations_(mutations) {
  FERRY_CHECK(verbs_ != nullptr);
  FERRY_CHECK_GE(workers_, 1u);
  FERRY_CHECK_GE(cqs_per_worker_, 1u);
}

Context::~Context() {
  // Best effort; whatever still fails to be destroyed is visible in the
  // ledger (C9).
  (void)Disable();
}

bool Context::empty() const {
  if (ctx_.held() || pd_.held()) return false;
  for (const auto& c : channels_)
    if (c.held()) return false;
  for (const auto& c : cqs_)
    if (c.held()) return false;
  base::MutexLock l(&mu_);
  for (const auto& [id, r] : regions_)
    if (r.mr.held()) return false;
  return true;
}

absl::Status Context::Enable() {
  FERRY_CHECK(!enabled_);
  FERRY_CHECK(empty());
  absl::Status s = EnableStages();
  if (s.ok()) {
    base::MutexLock l(&mu_);
    reached_ = Stage::kRegions;
    s = RegisterRecorded();
    if (s.ok()) {
      // Published: from here new regions register at once and the engine
      // routes tasks here.
      reg_pd_ = pd_.get();
      published_ = Published{gid_, lid_};
      up_.store(true, std::memory_order_release);
    }
  }
  if (s.ok()) {
    enabled_ = true;
    reached_ = Stage::kDone;
    reenable_backoff_ns_ = 0;
    reenable_at_ns_.store(0, std::memory_order_release);
    base::MutexLock l(&async_mu_);
    async_ctx_ = ctx_.get();
    return s;
  }
  // Rollback on held handles. The C7 mutation "forgets" the device context
  // here so a test can show the leak check catches a rollback that skips a
  // handle.
  if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineC7LeakOnRollback) &&
      ctx_.held()) {
    ctx_.LeakForMutation();
  }
  absl::Status d = Disable();
  FERRY_CHECK(d.ok() || !empty());  // a failed destroy keeps its handle
  return Annotate(s, device_, reached_);
}

bool Context::PortActiveNow() const {
  absl::StatusOr<hal::PortAttr> port = verbs_->QueryPort(ctx_.get(), port_num_);
  if (!port.ok()) return port_active_at_enable_;
  return port->state == hal::PortState::kActive || port->state == hal::PortState::kActiveDefer;
}

absl::Status Context::EnableStages() {
  reached_ = Stage::kOpenDevice;
  {
    FERRY_ASSIGN_OR_RETURN(hal::ContextHandle h, verbs_->OpenDevice(device_));
    ctx_ = OwnedContext(verbs_, h, ledger_);
  }
  reached_ = Stage::kQuery;
  FERRY_ASSIGN_OR_RETURN(attr_, verbs_->QueryDevice(ctx_.get()));
  FERRY_ASSIGN_OR_RETURN(hal::PortAttr port, verbs_->QueryPort(ctx_.get(), port_num_));
  lid_ = port.lid;
  active_mtu_ = port.active_mtu;
  port_active_at_enable_ =
      port.state == hal::PortState::kActive || port.state == hal::PortState::kActiveDefer;
  if (gid_index_config_ >= 0) {
    gid_index_ = gid_index_config_;
    gid_choice_ = GidChoice::kConfigured;
  } else {
    FERRY_ASSIGN_OR_RETURN(const GidSelection sel,
                           ChooseGid(verbs_, ctx_.get(), port_num_, port.gid_tbl_len));
    gid_index_ = sel.index;
    gid_choice_ = sel.why;
  }
  FERRY_ASSIGN_OR_RETURN(gid_, verbs_->QueryGid(ctx_.get(), port_num_, gid_index_));
  exceeds_device_ = true;  // until every capability check passed
  if (wr_depth_ > attr_.max_qp_wr) {
    return absl::InvalidArgumentError(
        absl::StrCat("wr_depth ", wr_depth_, " exceeds the device's max_qp_wr ", attr_.max_qp_wr));
  }
  if (qps_per_endpoint_ > attr_.max_qp) {
    return absl::InvalidArgumentError(absl::StrCat("qps_per_endpoint ", qps_per_endpoint_,
                                                   " exceeds the device's max_qp ", attr_.max_qp));
  }
  if (cqe_limit_ > attr_.max_cqe) {
    return absl::InvalidArgumentError(
        absl::StrCat("cqe_limit ", cqe_limit_, " exceeds the device's max_cqe ", attr_.max_cqe));
  }
  if (uint64_t{workers_} * cqs_per_worker_ > attr_.max_cq) {
    return absl::ResourceExhaustedError(
        absl::StrCat("workers x cqs_per_worker = ", uint64_t{workers_} * cqs_per_worker_,
                     " exceeds the device's max_cq ", attr_.max_cq));
  }
  exceeds_device_ = false;
  reached_ = Stage::kAllocPd;
  {
    FERRY_ASSIGN_OR_RETURN(hal::PdHandle h, verbs_->AllocPd(ctx_.get()));
    pd_ = OwnedPd(verbs_, h, ledger_);
  }
  reached_ = Stage::kCompChannels;
  channels_.reserve(workers_);
  for (uint32_t w = 0; w < workers_; ++w) {
    FERRY_ASSIGN_OR_RETURN(hal::CompChannelHandle h, verbs_->CreateCompChannel(ctx_.get()));
    channels_.emplace_back(verbs_, h, ledger_);
  }
  reached_ = Stage::kCqs;
  cqs_.reserve(uint64_t{workers_} * cqs_per_worker_);
  cqe_capacity_ = 0;
  for (uint32_t w = 0; w < workers_; ++w) {
    for (uint32_t i = 0; i < cqs_per_worker_; ++i) {
      FERRY_ASSIGN_OR_RETURN(hal::CqInfo info,
                             verbs_->CreateCq(ctx_.get(), cqe_limit_, channels_[w].get()));
      cqs_.emplace_back(verbs_, info.cq, ledger_);
      FERRY_CHECK_GE(info.cqe, cqe_limit_);
      cqe_capacity_ = cqe_limit_;  // the quota ledger uses what we asked
    }
  }
  reached_ = Stage::kArmCqs;
  for (const OwnedCq& cq : cqs_) FERRY_RETURN_IF_ERROR(verbs_->ReqNotifyCq(cq.get(), false));
  return absl::OkStatus();
}

absl::Status Context::Disable() {
  absl::Status first;
  auto note = [&first](absl::Status s) {
    if (!s.ok() && first.ok()) first = std::move(s);
  };
  {
    base::MutexLock l(&mu_);
    reg_pd_ = {};  // up() stays: a rollback of a re-enable keeps the rail
    for (auto& [id, r] : regions_) {
      note(DeallocWindows(r));
      note(r.mr.Reset());
    }
  }
  for (OwnedCq& cq : cqs_) note(cq.Reset());
  for (OwnedCompChannel& ch : channels_) note(ch.Reset());
  note(pd_.Reset());
  // Closing the device frees whatever it still holds; only close when
  // everything else is gone, so each object is destroyed exactly once by
  // its own call (or reported, C9).
  if (first.ok()) {
    base::MutexLock l(&async_mu_);
    async_ctx_ = {};
    note(ctx_.Reset());
  }
  if (first.ok()) {
    cqs_.clear();
    channels_.clear();
    enabled_ = false;
  }
  return first;
}

void Context::ForgetAll() {
  for (auto& [id, r] : regions_) {
    for (auto& [mw, w] : r.windows) w.Forget();
    r.windows.clear();
    r.mr.Forget();
  }
  for (OwnedCq& cq : cqs_) cq.Forget();
  for (OwnedCompChannel& ch : channels_) ch.Forget();
  pd_.Forget();
  cqs_.clear();
  channels_.clear();
}

absl::Status Context::Reenable() {
  {
    // Under mu_ from here to the forgetting: a region registered meanwhile
    // is recorded (no new MR: reg_pd_ is cleared) and registered by the
    // Enable below, never twice; a DeregisterRegion waits, so it never
    // releases an MR the close already freed. The context stays up() and
    // published (tasks wait on its parked rail, peers keep its entry and
    // refetch on the REM_ACCESS_ERR its new rkeys cause).
    base::MutexLock l(&mu_);
    reg_pd_ = {};
    // Close the device: every object it holds dies with it. A context
    // whose bring-up failed holds at most what its rollback could not
    // destroy, and then the device too (it is closed last).
    if (ctx_.held()) {
      {
        base::MutexLock a(&async_mu_);
        async_ctx_ = {};
        FERRY_RETURN_IF_ERROR(ctx_.Reset());
      }
      ForgetAll();
    }
  }
  enabled_ = false;
  FERRY_CHECK(empty());
  return Enable();  // registers every region
}

void Context::ReenableFailed(uint64_t now_ns, uint64_t first_ns, uint64_t max_ns) {
  reenable_backoff_ns_ =
      reenable_backoff_ns_ == 0 ? first_ns : std::min(reenable_backoff_ns_ * 2, max_ns);
  ++reenable_failures_;
  reenable_at_ns_.store(now_ns + reenable_backoff_ns_, std::memory_order_release);
}

std::optional<Context::Published> Context::published() const {
  if (!up()) return std::nullopt;
  base::MutexLock l(&mu_);
  return published_;
}

absl::Status Context::RegisterRecorded() {
  for (auto& [id, r] : regions_) {
    FERRY_CHECK(!r.mr.held());
    FERRY_ASSIGN_OR_RETURN(hal::MrInfo info,
                           verbs_->RegMr(pd_.get(), r.addr, r.len_bytes, r.access));
    Install(r, info);
  }
  return absl::OkStatus();
}

void Context::Install(Region& r, const hal::MrInfo& info) {
  r.mr = OwnedMr(verbs_, info.mr, ledger_);
  const bool windowed = r.window_access != 0;
  // A windowed MR's own rkey grants nothing remotely: it is never offered.
  r.keys = RegionKeys{info.lkey, windowed ? 0 : info.rkey, windowed};
}

hal::CqHandle Context::cq(uint32_t worker, uint32_t i) const {
  FERRY_CHECK_LT(worker, workers_);
  FERRY_CHECK_LT(i, cqs_per_worker_);
  const size_t k = size_t{worker} * cqs_per_worker_ + i;
  if (k >= cqs_.size()) return hal::CqHandle{};
  return cqs_[k].get();
}

hal::CompChannelHandle Context::channel(uint32_t worker) const {
  FERRY_CHECK_LT(worker, workers_);
  if (worker >= channels_.size()) return hal::CompChannelHandle{};
  return channels_[worker].get();
}

// The new CQ is made (and armed) before the errored one is destroyed: when
// either step fails, the errored CQ stays installed, so its owner still sees
// the context as recovering (no endpoint is built on it) and retries at its
// next sweep. Destroying first left an empty slot when the create failed,
// and the owner then built endpoints on CQ handle 0 (random-world seed
// 552845864: cq_overrun, then resource_fail on the re-create).
absl::Status Context::RecreateCq(uint32_t worker, uint32_t i) {
  FERRY_CHECK(enabled_);
  const size_t k = size_t{worker} * cqs_per_worker_ + i;
  FERRY_CHECK_LT(k, cqs_.size());
  if (mutations_ != nullptr && mutations_->on(base::Mutation::kEngineCqRecreateDestroysFirst)) {
    // Test-only: the old order.
    FERRY_RETURN_IF_ERROR(cqs_[k].Reset());
    FERRY_ASSIGN_OR_RETURN(hal::CqInfo info,
                           verbs_->CreateCq(ctx_.get(), cqe_limit_, channels_[worker].get()));
    cqs_[k] = OwnedCq(verbs_, info.cq, ledger_);
    return verbs_->ReqNotifyCq(info.cq, false);
  }
  FERRY_ASSIGN_OR_RETURN(hal::CqInfo info,
                         verbs_->CreateCq(ctx_.get(), cqe_limit_, channels_[worker].get()));
  OwnedCq fresh(verbs_, info.cq, ledger_);  // destroyed on the way out unless installed
  FERRY_RETURN_IF_ERROR(verbs_->ReqNotifyCq(info.cq, false));
  FERRY_RETURN_IF_ERROR(cqs_[k].Reset());
  cqs_[k] = std::move(fresh);
  return absl::OkStatus();
}

absl::StatusOr<RegionKeys> Context::RegisterRegion(uint64_t region, void* addr, size_t len_bytes,
                                                   uint32_t access, bool revocable) {
  base::MutexLock l(&mu_);
  FERRY_CHECK(regions_.find(region) == regions_.end());
  // Windowed where the device binds type 2 windows (a context that never
  // came up has no attributes yet: its regions stay MR-keyed).
  const uint32_t remote = access & (hal::kAccessRemoteRead | hal::kAccessRemoteWrite);
  const bool windowed = revocable && attr_.mw_type2 && remote != 0;
  const uint32_t mr_access = windowed ? kWindowedMrAccess : access;
  std::optional<hal::MrInfo> info;
  if (reg_pd_.valid()) {
    FERRY_ASSIGN_OR_RETURN(info, verbs_->RegMr(reg_pd_, addr, len_bytes, mr_access));
  }
  Region& r = regions_[region];
  r.addr = addr;
  r.len_bytes = len_bytes;
  r.access = mr_access;
  r.window_access = windowed ? remote : 0;
  r.keys.windowed = windowed;
  // Down (a failed bring-up, or a re-enable under way): recorded without
  // an MR; the next successful Enable registers it.
  if (info.has_value()) Install(r, *info);
  return r.keys;
}

absl::Status Context::DeregisterRegion(uint64_t region) {
  base::MutexLock l(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return absl::NotFoundError(absl::StrCat("no region ", region));
  // Windows first: while one is bound, dereg_mr fails (EINVAL on rxe),
  // and each dealloc refuses that window's rkey at once.
  if (!(mutations_ != nullptr && mutations_->on(base::Mutation::kEngineMwUnregisterKeepsWindows)))
    FERRY_RETURN_IF_ERROR(DeallocWindows(it->second));
  FERRY_RETURN_IF_ERROR(it->second.mr.Reset());
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<RegionKeys> Context::KeysOf(uint64_t region) const {
  base::MutexLock l(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return absl::NotFoundError(absl::StrCat("no region ", region));
  if (!it->second.mr.held())
    return absl::UnavailableError(absl::StrCat("region ", region, " is not registered on ", device_,
                                               ": the context is down"));
  return it->second.keys;
}

size_t Context::region_count() const {
  base::MutexLock l(&mu_);
  return regions_.size();
}

}  // namespace ferry::engine
