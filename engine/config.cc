// engine/config.cc: EngineConfig::Validate (include/ferry/config.h).
//
// Owns: the list of config invariants. What must stay true: each rejection
// is kInvalidArgument and names the knob and the values involved; every
// product is computed in 64 bits from 32-bit fields, so nothing overflows.
#include "ferry/config.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ferry/types.h"

namespace ferry {
namespace {

template <typename... Args>
absl::Status Bad(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrFormat(fmt, args...));
}

}  // namespace

uint64_t EngineConfig::EndpointsPerCq() const {
  if (cqs_per_worker == 0) return 0;
  return (uint64_t{endpoint_store_capacity} + cqs_per_worker - 1) / cqs_per_worker;
}

namespace {

// Workers, queues and the CQ budget (C4/C8).
absl::Status CheckQueues(const EngineConfig& c) {
  if (c.workers == 0 || c.workers > kWorkersMax)
    return Bad("workers = %u: must be in [1, %u]", c.workers, kWorkersMax);
  if (c.cqs_per_worker == 0) return Bad("cqs_per_worker = 0: every owner needs a CQ per context");
  if (c.qps_per_endpoint == 0 || c.qps_per_endpoint > kQpsPerEndpointMax)
    return Bad("qps_per_endpoint = %u: must be in [1, %u]", c.qps_per_endpoint, kQpsPerEndpointMax);
  if (c.wr_depth == 0) return Bad("wr_depth = 0: a QP must hold at least one WR");
  if (c.inline_bytes_max > kInlineBytesMax)
    return Bad("inline_bytes_max = %u: at most %u", c.inline_bytes_max, kInlineBytesMax);
  if (c.cqe_limit == 0) return Bad("cqe_limit = 0");
  if (c.endpoint_store_capacity == 0) return Bad("endpoint_store_capacity = 0");
  // C4/C8: a CQ fully loaded by its live endpoints must not overrun.
  if (c.notify_recv_slots > kNotifyRecvSlotsMax)
    return Bad("notify_recv_slots = %u: at most %u", c.notify_recv_slots, kNotifyRecvSlotsMax);
  // Receive WRs hold CQ quota as send WRs do (C4, N4).
  const uint64_t per_cq =
      (uint64_t{c.wr_depth} + c.notify_recv_slots) * c.qps_per_endpoint * c.EndpointsPerCq();
  if (per_cq > c.cqe_limit)
    return Bad(
        "(wr_depth (%u) + notify_recv_slots (%u)) x qps_per_endpoint (%u) x endpoints per CQ (%u) "
        "= %u exceeds cqe_limit (%u)",
        c.wr_depth, c.notify_recv_slots, c.qps_per_endpoint, c.EndpointsPerCq(), per_cq,
        c.cqe_limit);
  if (uint64_t{c.wr_depth} > c.cqe_limit)
    return Bad("wr_depth (%u) exceeds cqe_limit (%u)", c.wr_depth, c.cqe_limit);
  if (c.zombie_quota_max > c.cqe_limit)
    return Bad("zombie_quota_max (%u) exceeds cqe_limit (%u)", c.zombie_quota_max, c.cqe_limit);
  return absl::OkStatus();
}

// Slices, requests and batches.
absl::Status CheckSizes(const EngineConfig& c) {
  if (c.slice_size_bytes == 0) return Bad("slice_size_bytes = 0");
  if (c.slice_size_bytes > uint64_t{UINT32_MAX})
    return Bad("slice_size_bytes = %u: one WR moves at most %u bytes", c.slice_size_bytes,
               uint64_t{UINT32_MAX});
  if (c.request_bytes_max == 0) return Bad("request_bytes_max = 0");
  if (c.slice_size_bytes > c.request_bytes_max)
    return Bad("slice_size_bytes (%u) exceeds request_bytes_max (%u)", c.slice_size_bytes,
               c.request_bytes_max);
  const uint64_t slices_max = (c.request_bytes_max + c.slice_size_bytes - 1) / c.slice_size_bytes;
  if (slices_max > kSlicesPerTaskMax)
    return Bad("request_bytes_max / slice_size_bytes = %u slices per task exceeds %u", slices_max,
               kSlicesPerTaskMax);
  if (c.batch_capacity_max == 0 || c.batch_capacity_max > kBatchCapacityMax)
    return Bad("batch_capacity_max = %u: must be in [1, %u]", c.batch_capacity_max,
               kBatchCapacityMax);
  return absl::OkStatus();
}

// Retries, timeouts and the retire ladder.
absl::Status CheckRetriesAndTimers(const EngineConfig& c) {
  if (c.slice_attempts_max == 0 || c.slice_attempts_max > kSliceAttemptsLimit)
    return Bad("slice_attempts_max = %u: must be in [1, %u]", c.slice_attempts_max,
               kSliceAttemptsLimit);
  if (uint64_t{c.slice_retries} + 1 > c.slice_attempts_max)
    return Bad("slice_retries (%u) + 1 exceeds slice_attempts_max (%u)", c.slice_retries,
               c.slice_attempts_max);
  if (c.slice_timeout_ns == 0) return Bad("slice_timeout_ns = 0");
  if (c.handshake_timeout_ns == 0) return Bad("handshake_timeout_ns = 0");
  if (c.handshake_retries == 0) return Bad("handshake_retries = 0: at least one REQ is sent");
  if (c.drain_timeout_ns == 0) return Bad("drain_timeout_ns = 0");
  if (c.destroy_backoff_ns_min == 0) return Bad("destroy_backoff_ns_min = 0");
  if (c.destroy_backoff_ns_min > c.destroy_backoff_ns_max)
    return Bad("destroy_backoff_ns_min (%u) exceeds destroy_backoff_ns_max (%u)",
               c.destroy_backoff_ns_min, c.destroy_backoff_ns_max);
  if (c.reset_context_on_destroy_give_up && c.destroy_give_up_ns == 0)
    return Bad("destroy_give_up_ns = 0 with reset_context_on_destroy_give_up");
  return absl::OkStatus();
}

// The threaded runtime's waits.
absl::Status CheckRuntime(const EngineConfig& c) {
  if (c.owner_poll_mode != OwnerPollMode::kBlocking &&
      c.owner_poll_mode != OwnerPollMode::kAdaptive &&
      c.owner_poll_mode != OwnerPollMode::kBusyPoll)
    return Bad("owner_poll_mode = %d is none of blocking (0), adaptive (1), busy poll (2)",
               static_cast<int>(c.owner_poll_mode));
  if (c.owner_poll_mode == OwnerPollMode::kAdaptive && c.owner_spin_ns_max == 0)
    return Bad("owner_spin_ns_max = 0 with owner_poll_mode adaptive (use blocking)");
  if (c.owner_spin_ns_max > 1'000'000'000 || c.user_spin_ns > 1'000'000'000)
    return Bad("owner_spin_ns_max (%u) and user_spin_ns (%u) must be <= 1 s", c.owner_spin_ns_max,
               c.user_spin_ns);
  return absl::OkStatus();
}

// Rail error pauses.
absl::Status CheckRails(const EngineConfig& c) {
  if (c.rail_error_threshold == 0) return Bad("rail_error_threshold = 0");
  if (c.rail_error_window_ns == 0) return Bad("rail_error_window_ns = 0");
  if (c.rail_cooldown_ns == 0 || c.rail_cooldown_ns > c.rail_cooldown_ns_max)
    return Bad("rail_cooldown_ns (%u) must be in [1, rail_cooldown_ns_max = %u]",
               c.rail_cooldown_ns, c.rail_cooldown_ns_max);
  return absl::OkStatus();
}

// QP attributes, port, GID and device names.
absl::Status CheckQpAndDevice(const EngineConfig& c) {
  // C1: timeout 0 = the RNIC never gives up, so a lost peer never yields a CQE.
  if (c.qp_timeout_exp == 0)
    return Bad("qp_timeout_exp = 0: the QP would wait forever (no evidence ever)");
  if (c.qp_timeout_exp > 31)
    return Bad("qp_timeout_exp = %u: a 5-bit field (1..31)", c.qp_timeout_exp);
  if (c.qp_retries > 7) return Bad("qp_retries = %u: a 3-bit field (0..7)", c.qp_retries);
  if (c.qp_rnr_retries > 7)
    return Bad("qp_rnr_retries = %u: a 3-bit field (0..7)", c.qp_rnr_retries);
  if (c.qp_rd_atomic_max == 0)
    return Bad("qp_rd_atomic_max = 0: a QP could never issue a READ (1..255)");
  if (c.notify_recv_slots > 0 && c.qp_rnr_retries == 7)
    return Bad(
        "notify_recv_slots = %u needs qp_rnr_retries < 7: a notification to a peer that posts no "
        "receive WRs would wait out RNR forever",
        c.notify_recv_slots);
  if (c.port_num == 0) return Bad("port_num = 0: ports are numbered from 1");
  if (c.gid_index < -1) return Bad("gid_index = %d: -1 (auto) or a table index", c.gid_index);
  for (const std::string& d : c.devices)
    if (d.empty()) return Bad("devices: an empty device name");
  return absl::OkStatus();
}

bool PrintableId(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char ch : s)
    if (ch < 0x21 || ch > 0x7e) return false;
  return true;
}

// Control-plane authentication (docs/security.md).
absl::Status CheckAuth(const AuthConfig& a) {
  using Mode = AuthConfig::Mode;
  if (a.mode != Mode::kOff && a.mode != Mode::kSharedSecret)
    return Bad("auth.mode = %u: kOff or kSharedSecret", static_cast<uint32_t>(a.mode));
  if (!a.identity.empty() && !PrintableId(a.identity))
    return Bad("auth.identity: 1..128 printable ASCII bytes without space");
  if (a.sessions_max == 0 || a.pending_max == 0)
    return Bad("auth.sessions_max and auth.pending_max must be >= 1");
  for (const std::string& h : a.allowlist)
    if (h.empty()) return Bad("auth.allowlist: an empty host");
  if (a.mode == Mode::kOff) {
    if (!a.secret.empty() || !a.peer_secrets.empty())
      return Bad("auth.secret or auth.peer_secrets set with auth.mode kOff (nothing would use it)");
    return absl::OkStatus();
  }
  if (a.secret.empty() && a.peer_secrets.empty())
    return Bad("auth.mode kSharedSecret without auth.secret or auth.peer_secrets");
  if (!a.secret.empty() && a.secret.size() < kAuthSecretBytesMin)
    return Bad("auth.secret has %u bytes: at least %u", a.secret.size(), kAuthSecretBytesMin);
  for (const PeerSecret& p : a.peer_secrets) {
    if (!PrintableId(p.identity))
      return Bad("auth.peer_secrets: identity '%s' is not 1..128 printable bytes", p.identity);
    if (p.secret.size() < kAuthSecretBytesMin)
      return Bad("auth.peer_secrets[%s]: secret has %u bytes, at least %u", p.identity,
                 p.secret.size(), kAuthSecretBytesMin);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EngineConfig::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckAuth(auth));
  FERRY_RETURN_IF_ERROR(CheckQueues(*this));
  FERRY_RETURN_IF_ERROR(CheckSizes(*this));
  FERRY_RETURN_IF_ERROR(CheckRetriesAndTimers(*this));
  FERRY_RETURN_IF_ERROR(CheckRails(*this));
  FERRY_RETURN_IF_ERROR(CheckRuntime(*this));
  return CheckQpAndDevice(*this);
}

std::string_view TaskStatusName(TaskStatus s) {
  switch (s) {
    case TaskStatus::kPending:
      return "PENDING";
    case TaskStatus::kCompleted:
      return "COMPLETED";
    case TaskStatus::kFailed:
      return "FAILED";
    case TaskStatus::kTimeout:
      return "TIMEOUT";
    case TaskStatus::kCanceled:
      return "CANCELED";
    case TaskStatus::kInvalid:
      return "INVALID";
  }
  return "?";
}

std::string_view OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kRead:
      return "READ";
    case OpKind::kWrite:
      return "WRITE";
  }
  return "?";
}

std::string_view RemoteAccessName(RemoteAccess a) {
  switch (a) {
    case RemoteAccess::kRead:
      return "read-only";
    case RemoteAccess::kWrite:
      return "write-only";
    case RemoteAccess::kReadWrite:
      return "read-write";
  }
  return "?";
}

}  // namespace ferry
