// engine/config.cc: EngineConfig::Validate (include/ferry/config.h).
//
// Owns: the list of config invariants. What must stay true: each rejection
// is kInvalidArgument and names the knob and the values involved; every
// product is computed in 64 bits from 32-bit fields, so nothing overflows.
#include "ferry/config.h"

#include "absl/strings/str_format.h"
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

absl::Status EngineConfig::Validate() const {
  if (workers == 0 || workers > kWorkersMax)
    return Bad("workers = %u: must be in [1, %u]", workers, kWorkersMax);
  if (cqs_per_worker == 0) return Bad("cqs_per_worker = 0: every owner needs a CQ per context");
  if (qps_per_endpoint == 0 || qps_per_endpoint > kQpsPerEndpointMax)
    return Bad("qps_per_endpoint = %u: must be in [1, %u]", qps_per_endpoint, kQpsPerEndpointMax);
  if (wr_depth == 0) return Bad("wr_depth = 0: a QP must hold at least one WR");
  if (cqe_limit == 0) return Bad("cqe_limit = 0");
  if (endpoint_store_capacity == 0) return Bad("endpoint_store_capacity = 0");
  // C4/C8: a CQ fully loaded by its live endpoints must not overrun.
  const uint64_t per_cq = uint64_t{wr_depth} * qps_per_endpoint * EndpointsPerCq();
  if (per_cq > cqe_limit)
    return Bad(
        "wr_depth (%u) x qps_per_endpoint (%u) x endpoints per CQ (%u) = %u exceeds cqe_limit (%u)",
        wr_depth, qps_per_endpoint, EndpointsPerCq(), per_cq, cqe_limit);
  if (uint64_t{wr_depth} > cqe_limit)
    return Bad("wr_depth (%u) exceeds cqe_limit (%u)", wr_depth, cqe_limit);
  if (zombie_quota_max > cqe_limit)
    return Bad("zombie_quota_max (%u) exceeds cqe_limit (%u)", zombie_quota_max, cqe_limit);

  if (slice_size_bytes == 0) return Bad("slice_size_bytes = 0");
  if (slice_size_bytes > uint64_t{UINT32_MAX})
    return Bad("slice_size_bytes = %u: one WR moves at most %u bytes", slice_size_bytes,
               uint64_t{UINT32_MAX});
  if (request_bytes_max == 0) return Bad("request_bytes_max = 0");
  if (slice_size_bytes > request_bytes_max)
    return Bad("slice_size_bytes (%u) exceeds request_bytes_max (%u)", slice_size_bytes,
               request_bytes_max);
  const uint64_t slices_max = (request_bytes_max + slice_size_bytes - 1) / slice_size_bytes;
  if (slices_max > kSlicesPerTaskMax)
    return Bad("request_bytes_max / slice_size_bytes = %u slices per task exceeds %u", slices_max,
               kSlicesPerTaskMax);
  if (batch_capacity_max == 0 || batch_capacity_max > kBatchCapacityMax)
    return Bad("batch_capacity_max = %u: must be in [1, %u]", batch_capacity_max,
               kBatchCapacityMax);

  if (repost_max == 0 || repost_max > kRepostMax)
    return Bad("repost_max = %u: must be in [1, %u]", repost_max, kRepostMax);
  if (uint64_t{retry_count} + 1 > repost_max)
    return Bad("retry_count (%u) + 1 exceeds repost_max (%u)", retry_count, repost_max);
  if (slice_timeout_ns == 0) return Bad("slice_timeout_ns = 0");
  if (handshake_timeout_ns == 0) return Bad("handshake_timeout_ns = 0");
  if (handshake_retries == 0) return Bad("handshake_retries = 0: at least one REQ is sent");
  if (drain_timeout_ns == 0) return Bad("drain_timeout_ns = 0");
  if (destroy_backoff_min_ns == 0) return Bad("destroy_backoff_min_ns = 0");
  if (destroy_backoff_min_ns > destroy_backoff_max_ns)
    return Bad("destroy_backoff_min_ns (%u) exceeds destroy_backoff_max_ns (%u)",
               destroy_backoff_min_ns, destroy_backoff_max_ns);
  if (reset_context_on_destroy_give_up && destroy_give_up_ns == 0)
    return Bad("destroy_give_up_ns = 0 with reset_context_on_destroy_give_up");

  if (rail_error_threshold == 0) return Bad("rail_error_threshold = 0");
  if (rail_error_window_ns == 0) return Bad("rail_error_window_ns = 0");
  if (rail_cooldown_ns == 0 || rail_cooldown_ns > rail_cooldown_max_ns)
    return Bad("rail_cooldown_ns (%u) must be in [1, rail_cooldown_max_ns = %u]", rail_cooldown_ns,
               rail_cooldown_max_ns);

  // C1: timeout 0 = the RNIC never gives up, so a lost peer never yields a CQE.
  if (qp_timeout_exp == 0)
    return Bad("qp_timeout_exp = 0: the QP would wait forever (no evidence ever)");
  if (qp_timeout_exp > 31) return Bad("qp_timeout_exp = %u: a 5-bit field (1..31)", qp_timeout_exp);
  if (qp_retry_cnt > 7) return Bad("qp_retry_cnt = %u: a 3-bit field (0..7)", qp_retry_cnt);
  if (qp_rnr_retry > 7) return Bad("qp_rnr_retry = %u: a 3-bit field (0..7)", qp_rnr_retry);
  if (port_num == 0) return Bad("port_num = 0: ports are numbered from 1");
  if (gid_index < -1) return Bad("gid_index = %d: -1 (auto) or a table index", gid_index);
  for (const std::string& d : devices)
    if (d.empty()) return Bad("devices: an empty device name");
  return absl::OkStatus();
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

}  // namespace ferry
