// engine/endpoint.cc: QP creation and state walk, forward-only endpoint
// states and the retire ladder (see endpoint.h for what must stay true).
#include "engine/endpoint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace ferry::engine {

namespace {
// A QP still in RESET or INIT never carried a WR to the peer: its destroy
// waits for no drain (RetireStep and NextRetireNs share this rule).
bool NeverConnected(const DataQp& q) {
  return q.state == hal::QpState::kReset || q.state == hal::QpState::kInit;
}
}  // namespace

std::string_view EndpointStateName(EndpointState s) {
  switch (s) {
    case EndpointState::kConnecting:
      return "CONNECTING";
    case EndpointState::kReady:
      return "READY";
    case EndpointState::kRetiring:
      return "RETIRING";
    case EndpointState::kDestroyed:
      return "DESTROYED";
  }
  return "?";
}

std::string_view RetireReasonName(RetireReason r) {
  switch (r) {
    case RetireReason::kNone:
      return "none";
    case RetireReason::kHandshakeFailed:
      return "handshake_failed";
    case RetireReason::kErrorCompletion:
      return "error_completion";
    case RetireReason::kSuperseded:
      return "superseded";
    case RetireReason::kEvicted:
      return "evicted";
    case RetireReason::kTimeout:
      return "timeout";
    case RetireReason::kShutdown:
      return "shutdown";
    case RetireReason::kQpFatal:
      return "qp_fatal";
    case RetireReason::kCqError:
      return "cq_error";
  }
  return "?";
}

Endpoint::Endpoint(hal::Verbs* verbs, const QpParams& params, uint32_t context,
                   std::string peer_path, uint32_t generation)
    : params_(params),
      context_(context),
      generation_(generation),
      verbs_(verbs),
      peer_path_(std::move(peer_path)) {}

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(
    hal::Verbs* verbs, HandleLedger* ledger, hal::Entropy* entropy, const QpParams& params,
    uint32_t qps, uint32_t context, std::string peer_path, uint32_t generation,
    uint64_t* next_qp_uid, std::unique_ptr<Endpoint>* leftover) {
  FERRY_CHECK_GE(qps, 1u);
  FERRY_CHECK_GT(generation, 0u);
  FERRY_CHECK(leftover != nullptr);
  std::unique_ptr<Endpoint> ep(
      new Endpoint(verbs, params, context, std::move(peer_path), generation));
  ep->qps_.reserve(qps);
  auto fail = [&](absl::Status s) -> absl::Status {
    if (!ep->qps_.empty()) *leftover = std::move(ep);
    return s;
  };
  for (uint32_t i = 0; i < qps; ++i) {
    hal::QpInitAttr init;
    init.send_cq = params.cq;
    init.recv_cq = params.cq;
    init.cap.max_send_wr = params.wr_depth;
    init.cap.max_recv_wr = params.recv_depth;
    init.sq_sig_all = false;  // every WR is signalled explicitly
    init.cap.max_inline_data = params.max_inline_data;
    auto info = verbs->CreateQp(params.pd, init);
    // No verb says how much inline data a device takes: one that refuses
    // the size asked (EINVAL) gets a QP without inline, as rdmamojo's
    // ibv_create_qp page advises.
    if (!info.ok() && info.status().code() == absl::StatusCode::kInvalidArgument &&
        init.cap.max_inline_data > 0) {
      init.cap.max_inline_data = 0;
      info = verbs->CreateQp(params.pd, init);
    }
    if (!info.ok()) return fail(info.status());
    DataQp dq;
    dq.qp = OwnedQp(verbs, info->qp, ledger);
    dq.uid = (*next_qp_uid)++;
    dq.qpn = info->qp_num;
    dq.max_inline_data = init.cap.max_inline_data == 0 ? 0 : info->cap.max_inline_data;
    dq.sq_psn = static_cast<uint32_t>(entropy->Next64() & 0xffffffu);
    ep->qps_.push_back(std::move(dq));
  }
  for (DataQp& q : ep->qps_) {
    hal::QpAttr a;
    a.qp_state = hal::QpState::kInit;
    a.pkey_index = 0;
    a.port_num = params.port_num;
    a.qp_access_flags = hal::kAccessLocalWrite | hal::kAccessRemoteWrite | hal::kAccessRemoteRead;
    absl::Status s = verbs->ModifyQp(
        q.qp.get(), a, hal::kQpState | hal::kQpPkeyIndex | hal::kQpPort | hal::kQpAccessFlags);
    if (!s.ok()) return fail(s);
    q.state = hal::QpState::kInit;
  }
  return ep;
}

absl::Status Endpoint::ToRtr(const PeerInfo& peer) {
  FERRY_CHECK(state_ == EndpointState::kConnecting);
  FERRY_CHECK_EQ(peer.qpns.size(), qps_.size());
  FERRY_CHECK_EQ(peer.psns.size(), qps_.size());
  peer_ = peer;
  peer_incarnation_ = peer.incarnation;
  const hal::Mtu mtu = std::min(params_.local_mtu, peer.mtu);
  for (size_t i = 0; i < qps_.size(); ++i) {
    DataQp& q = qps_[i];
    if (q.state != hal::QpState::kInit) continue;  // already at RTR (resumable)
    hal::QpAttr a;
    a.qp_state = hal::QpState::kRtr;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpns[i];
    a.rq_psn = peer.psns[i];
    a.max_dest_rd_atomic = params_.rd_atomic_dest;
    a.min_rnr_timer = 12;
    a.ah_attr.dgid = peer.gid;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.is_global = true;
    a.ah_attr.port_num = params_.port_num;
    a.ah_attr.sgid_index = params_.sgid_index;
    FERRY_RETURN_IF_ERROR(verbs_->ModifyQp(q.qp.get(), a,
                                           hal::kQpState | hal::kQpAv | hal::kQpPathMtu |
                                               hal::kQpDestQpn | hal::kQpRqPsn |
                                               hal::kQpMaxDestRdAtomic | hal::kQpMinRnrTimer));
    q.state = hal::QpState::kRtr;
  }
  return absl::OkStatus();
}

absl::Status Endpoint::ToRts() {
  FERRY_CHECK(state_ == EndpointState::kConnecting);
  for (DataQp& q : qps_) {
    if (q.state == hal::QpState::kRts) continue;
    FERRY_CHECK(q.state == hal::QpState::kRtr);
    hal::QpAttr a;
    a.qp_state = hal::QpState::kRts;
    a.sq_psn = q.sq_psn;
    a.timeout = params_.timeout_exp;
    a.retry_cnt = params_.retry_cnt;
    a.rnr_retry = params_.rnr_retry;
    // At most what the peer's QPs accept (a responder out of READ
    // resources answers with a NAK that fails the QP).
    FERRY_CHECK(peer_.has_value());
    a.max_rd_atomic = std::min(params_.rd_atomic_init, peer_->rd_atomic);  // both >= 1
    FERRY_RETURN_IF_ERROR(verbs_->ModifyQp(q.qp.get(), a,
                                           hal::kQpState | hal::kQpSqPsn | hal::kQpTimeout |
                                               hal::kQpRetryCnt | hal::kQpRnrRetry |
                                               hal::kQpMaxQpRdAtomic));
    q.state = hal::QpState::kRts;
  }
  return absl::OkStatus();
}

Endpoint::~Endpoint() {
  if (state_ == EndpointState::kConnecting) LeaveConnecting();
}

void Endpoint::CountConnectingIn(uint32_t* counter) {
  FERRY_CHECK(state_ == EndpointState::kConnecting);
  FERRY_CHECK(counter != nullptr && connecting_counter_ == nullptr);
  connecting_counter_ = counter;
  ++*connecting_counter_;
}

void Endpoint::LeaveConnecting() {
  if (connecting_counter_ == nullptr) return;
  FERRY_CHECK_GT(*connecting_counter_, 0u);
  --*connecting_counter_;
}

void Endpoint::MarkReady() {
  FERRY_CHECK(state_ == EndpointState::kConnecting);
  for (const DataQp& q : qps_) FERRY_CHECK(q.state == hal::QpState::kRts);
  LeaveConnecting();
  state_ = EndpointState::kReady;
}

void Endpoint::BeginRetire(RetireReason why, uint64_t now_ns, uint64_t drain_timeout_ns) {
  if (state_ == EndpointState::kRetiring || state_ == EndpointState::kDestroyed) return;
  if (state_ == EndpointState::kConnecting) LeaveConnecting();
  state_ = EndpointState::kRetiring;
  retire_reason_ = why;
  drain_deadline_ns_ = now_ns + drain_timeout_ns;
  for (DataQp& q : qps_) {
    if (q.state == hal::QpState::kRtr || q.state == hal::QpState::kRts) {
      hal::QpAttr a;
      a.qp_state = hal::QpState::kErr;
      // A failed modify (e.g. the device died) leaves the drain deadline
      // as the only way forward: destroy after it.
      if (verbs_->ModifyQp(q.qp.get(), a, hal::kQpState).ok()) q.state = hal::QpState::kErr;
    }
    q.next_destroy_ns = now_ns;
  }
}

bool Endpoint::RetireStep(uint64_t now_ns, uint64_t backoff_min_ns, uint64_t backoff_max_ns,
                          bool mutation_skip_destroy) {
  FERRY_CHECK(state_ == EndpointState::kRetiring);
  bool all = true;
  for (DataQp& q : qps_) {
    if (q.destroyed) continue;
    const bool never_connected = NeverConnected(q);
    // Receive WRs too: a receive CQE not polled before the destroy is gone
    // (mlx5 cleans the QP's CQEs out of the CQ), and with it a
    // notification its sender already saw COMPLETED.
    const bool drained = (q.fifo.empty() && q.recv.empty()) || now_ns >= drain_deadline_ns_;
    if (!never_connected && !drained) {
      all = false;
      continue;
    }
    if (now_ns < q.next_destroy_ns) {
      all = false;
      continue;
    }
    if (mutation_skip_destroy) {
      q.qp.LeakForMutation();
      q.destroyed = true;
      continue;
    }
    absl::Status s = q.qp.Reset();
    if (s.ok()) {
      q.destroyed = true;
      continue;
    }
    if (q.destroy_failures == 0) q.first_destroy_fail_ns = now_ns;
    ++q.destroy_failures;
    q.backoff_ns = q.backoff_ns == 0 ? backoff_min_ns : std::min(q.backoff_ns * 2, backoff_max_ns);
    q.next_destroy_ns = now_ns + q.backoff_ns;
    all = false;
  }
  return all;
}

std::optional<uint64_t> Endpoint::NextRetireNs(bool mutation_drain_unconnected) const {
  if (state_ != EndpointState::kRetiring) return std::nullopt;
  std::optional<uint64_t> t;
  for (const DataQp& q : qps_) {
    if (q.destroyed) continue;
    const bool waits =
        !(q.fifo.empty() && q.recv.empty()) && (!NeverConnected(q) || mutation_drain_unconnected);
    const uint64_t at = std::max(q.next_destroy_ns, waits ? drain_deadline_ns_ : 0);
    if (!t || at < *t) t = at;
  }
  return t;
}

void Endpoint::MarkDestroyed() {
  FERRY_CHECK(state_ == EndpointState::kRetiring);
  for (const DataQp& q : qps_) {
    FERRY_CHECK(q.destroyed);
    FERRY_CHECK(q.released);
    FERRY_CHECK(q.fifo.empty());
  }
  state_ = EndpointState::kDestroyed;
}

std::vector<uint32_t> Endpoint::qpns() const {
  std::vector<uint32_t> v;
  v.reserve(qps_.size());
  for (const DataQp& q : qps_) v.push_back(q.qpn);
  return v;
}

std::vector<uint32_t> Endpoint::psns() const {
  std::vector<uint32_t> v;
  v.reserve(qps_.size());
  for (const DataQp& q : qps_) v.push_back(q.sq_psn);
  return v;
}

uint64_t Endpoint::Outstanding() const {
  uint64_t n = 0;
  for (const DataQp& q : qps_) n += q.fifo.size();
  return n;
}

}  // namespace ferry::engine
