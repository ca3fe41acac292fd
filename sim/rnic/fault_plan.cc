// sim/rnic/fault_plan.cc: fault kinds, swarm plans and the script parser.
// What must stay true: the draw order is fixed (one enable draw and one rate
// draw per seeded kind, in enum order) so plans replay from the seed.
#include "sim/rnic/fault_plan.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/check.h"
#include "base/string_view.h"

namespace ferry::sim {

namespace {
using base::AV;
}  // namespace
namespace {

constexpr std::array<const char*, kFaultKinds> kNames = {
    "wr_flush",         "late_cqe",        "hung_qp",        "destroy_qp_fail", "modify_qp_fail",
    "post_send_enomem", "cq_overrun",      "packet_loss",    "link_down",       "port_flap",
    "resource_fail",    "peer_restart",    "paused_peer",    "ctrl_delay",      "ctrl_loss",
    "ctrl_dup",         "ctrl_reorder",    "ctrl_partition", "link_up",         "device_fatal",
    "gid_change",       "hung_qp_recover", "qp_err_hold",    "dup_cqe",         "recv_drop",
    "rnr_storm",
};

// Per-kind menu of rates (denominators); the numerator is always 1.
constexpr std::array<std::array<uint64_t, 3>, kSeededFaultKinds> kMenus = {{
    {100, 1000, 10000},     // wr_flush
    {10, 100, 1000},        // late_cqe
    {20, 100, 1000},        // hung_qp
    {3, 10, 100},           // destroy_qp_fail
    {10, 100, 1000},        // modify_qp_fail
    {10, 100, 1000},        // post_send_enomem
    {1000, 10000, 100000},  // cq_overrun
    {100, 1000, 10000},     // packet_loss
    {50, 200, 1000},        // link_down
    {50, 200, 1000},        // port_flap
    {20, 100, 1000},        // resource_fail
    {100, 1000, 10000},     // peer_restart
    {20, 100, 1000},        // paused_peer
    {3, 10, 100},           // ctrl_delay
    {10, 100, 1000},        // ctrl_loss
    {10, 100, 1000},        // ctrl_dup
    {3, 10, 100},           // ctrl_reorder
    {100, 1000, 10000},     // ctrl_partition
}};

}  // namespace

std::string_view FaultKindName(FaultKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kFaultKinds ? kNames[i] : "?";
}

absl::StatusOr<FaultKind> ParseFaultKind(std::string_view name) {
  for (size_t i = 0; i < kFaultKinds; ++i) {
    if (kNames[i] == name) return static_cast<FaultKind>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown fault kind '", AV(name), "'"));
}

bool FaultPlan::AnyEnabled() const {
  return std::any_of(rate.begin(), rate.end(), [](Ratio r) { return r.num != 0; });
}

FaultPlan FaultPlan::Draw(Prng& prng) {
  FaultPlan plan;
  for (size_t i = 0; i < kSeededFaultKinds; ++i) {
    const bool enabled = prng.Below(2) == 1;
    const uint64_t pick = prng.Below(kMenus[i].size());
    if (enabled) plan.rate[i] = Ratio{1, kMenus[i][pick]};
  }
  return plan;
}

std::string FaultPlan::ToString() const {
  std::string out = "fault plan:\n";
  for (size_t i = 0; i < kSeededFaultKinds; ++i) {
    if (rate[i].num == 0) {
      absl::StrAppend(&out, "  ", kNames[i], " off\n");
    } else {
      absl::StrAppend(&out, "  ", kNames[i], " ", rate[i].num, "/", rate[i].den, "\n");
    }
  }
  return out;
}

std::string FaultTarget::ToString() const {
  switch (kind) {
    case TargetKind::kQp:
      if (number == kEveryQp) return absl::StrFormat("qp:h%u/%s/*", host, device);
      return absl::StrFormat("qp:h%u/%s/%u", host, device, number);
    case TargetKind::kCq:
      return absl::StrFormat("cq:h%u/%s/%u", host, device, number);
    case TargetKind::kDevice:
      return absl::StrFormat("dev:h%u/%s", host, device);
    case TargetKind::kHost:
      return absl::StrFormat("host:h%u", host);
  }
  return "?";
}

std::string ScriptedFault::ToString() const {
  std::string out =
      absl::StrCat("at ", at_ns, " ", AV(FaultKindName(kind)), " ", target.ToString());
  if (FaultTakesDuration(kind)) absl::StrAppend(&out, " for ", duration_ns);
  return out;
}

bool FaultTakesDuration(FaultKind k) {
  return k == FaultKind::kPausedPeer || k == FaultKind::kCtrlPartition ||
         k == FaultKind::kCtrlDelay || IsStallKind(k) || k == FaultKind::kRnrStorm;
}

StallPlan StallPlan::Draw(Prng& prng, uint64_t slice_timeout_ns) {
  StallPlan s;
  const uint64_t t = std::max<uint64_t>(slice_timeout_ns, 1000);
  constexpr std::array<uint64_t, 3> kHungDen = {20, 100, 1000};
  constexpr std::array<uint64_t, 3> kHoldDen = {2, 10, 100};
  constexpr std::array<uint64_t, 3> kDupDen = {100, 1000, 10000};
  const std::array<uint64_t, 3> hung_ns = {t / 2, 2 * t, 8 * t};
  constexpr std::array<uint64_t, 3> kHoldNs = {100'000, 5'000'000, 50'000'000};
  constexpr std::array<uint64_t, 3> kDupNs = {20'000, 1'000'000, 20'000'000};
  // Three draws per kind, always, in this order.
  const bool hung_on = prng.Below(2) == 1;
  const uint64_t hung_den = kHungDen[prng.Below(3)];
  const uint64_t hung_max = hung_ns[prng.Below(3)];
  const bool hold_on = prng.Below(2) == 1;
  const uint64_t hold_den = kHoldDen[prng.Below(3)];
  const uint64_t hold_max = kHoldNs[prng.Below(3)];
  const bool dup_on = prng.Below(2) == 1;
  const uint64_t dup_den = kDupDen[prng.Below(3)];
  const uint64_t dup_max = kDupNs[prng.Below(3)];
  if (hung_on) s.hung_recover = Ratio{1, hung_den}, s.hung_recover_ns_max = hung_max;
  if (hold_on) s.err_hold = Ratio{1, hold_den}, s.err_hold_ns_max = hold_max;
  if (dup_on) s.dup_cqe = Ratio{1, dup_den}, s.dup_cqe_ns_max = dup_max;
  s.seed = prng.Next();
  return s;
}

std::string StallPlan::ToString() const {
  if (!AnyEnabled()) return "stall plan: off\n";
  std::string out = "stall plan:\n";
  auto line = [&out](const char* name, Ratio r, uint64_t ns) {
    if (r.num == 0) {
      absl::StrAppend(&out, "  ", name, " off\n");
    } else {
      absl::StrAppend(&out, "  ", name, " ", r.num, "/", r.den, " up to ", ns, " ns\n");
    }
  };
  line("hung_qp_recover", hung_recover, hung_recover_ns_max);
  line("qp_err_hold", err_hold, err_hold_ns_max);
  line("dup_cqe", dup_cqe, dup_cqe_ns_max);
  return out;
}

RecvPlan RecvPlan::Draw(Prng& prng) {
  RecvPlan r;
  constexpr std::array<uint64_t, 3> kDropDen = {20, 100, 1000};
  constexpr std::array<uint64_t, 3> kStormDen = {5, 50, 500};
  constexpr std::array<uint64_t, 3> kStormNs = {100'000, 2'000'000, 20'000'000};
  // Five draws, always, in this order.
  const bool drop_on = prng.Below(2) == 1;
  const uint64_t drop_den = kDropDen[prng.Below(3)];
  const bool storm_on = prng.Below(2) == 1;
  const uint64_t storm_den = kStormDen[prng.Below(3)];
  const uint64_t storm_max = kStormNs[prng.Below(3)];
  if (drop_on) r.drop = Ratio{1, drop_den};
  if (storm_on) r.rnr_storm = Ratio{1, storm_den}, r.rnr_storm_ns_max = storm_max;
  r.seed = prng.Next();
  return r;
}

std::string RecvPlan::ToString() const {
  if (!AnyEnabled()) return "recv plan: off\n";
  std::string out = "recv plan:\n";
  if (drop.num == 0) {
    absl::StrAppend(&out, "  recv_drop off\n");
  } else {
    absl::StrAppend(&out, "  recv_drop ", drop.num, "/", drop.den, "\n");
  }
  if (rnr_storm.num == 0) {
    absl::StrAppend(&out, "  rnr_storm off\n");
  } else {
    absl::StrAppend(&out, "  rnr_storm ", rnr_storm.num, "/", rnr_storm.den, " up to ",
                    rnr_storm_ns_max, " ns\n");
  }
  return out;
}

namespace {

absl::StatusOr<FaultTarget> ParseTarget(absl::string_view text) {
  FaultTarget t;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "qp:")) {
    t.kind = TargetKind::kQp;
  } else if (absl::ConsumePrefix(&rest, "cq:")) {
    t.kind = TargetKind::kCq;
  } else if (absl::ConsumePrefix(&rest, "dev:")) {
    t.kind = TargetKind::kDevice;
  } else if (absl::ConsumePrefix(&rest, "host:")) {
    t.kind = TargetKind::kHost;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", text, "': expected qp:, cq:, dev: or host:"));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(rest, '/');
  const size_t want = t.kind == TargetKind::kHost ? 1 : (t.kind == TargetKind::kDevice ? 2 : 3);
  if (parts.size() != want || !absl::ConsumePrefix(&parts[0], "h") ||
      !absl::SimpleAtoi(parts[0], &t.host)) {
    return absl::InvalidArgumentError(absl::StrCat("target '", text, "': malformed"));
  }
  if (want >= 2) {
    if (parts[1].empty())
      return absl::InvalidArgumentError(absl::StrCat("target '", text, "': empty device"));
    t.device = std::string(parts[1]);
  }
  if (want == 3 && t.kind == TargetKind::kQp && parts[2] == "*") {
    t.number = kEveryQp;
  } else if (want == 3 && (!absl::SimpleAtoi(parts[2], &t.number) || t.number == kEveryQp)) {
    return absl::InvalidArgumentError(absl::StrCat("target '", text, "': bad number"));
  }
  return t;
}

}  // namespace

absl::StatusOr<std::vector<ScriptedFault>> ParseFaultScript(std::string_view text_in) {
  const absl::string_view text = AV(text_in);
  std::vector<ScriptedFault> out;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("fault script line ", line_no, ": ", why));
    };
    if ((words.size() != 4 && words.size() != 6) || words[0] != "at")
      return error("expected 'at <ns> <kind> <target> [for <ns>]'");
    ScriptedFault f;
    if (!absl::SimpleAtoi(words[1], &f.at_ns)) return error("bad time");
    auto kind = ParseFaultKind(std::string_view(words[2].data(), words[2].size()));
    if (!kind.ok()) return error(kind.status().message());
    f.kind = *kind;
    auto target = ParseTarget(words[3]);
    if (!target.ok()) return error(target.status().message());
    f.target = *std::move(target);
    if (words.size() == 6 && (words[4] != "for" || !absl::SimpleAtoi(words[5], &f.duration_ns)))
      return error("expected 'for <ns>' after the target");
    if (FaultTakesDuration(f.kind) && (words.size() != 6 || f.duration_ns == 0))
      return error(absl::StrCat(words[2], " needs 'for <ns>' (ns > 0)"));
    if (!FaultTakesDuration(f.kind) && words.size() == 6)
      return error(absl::StrCat(words[2], " takes no 'for <ns>'"));
    out.push_back(std::move(f));
  }
  std::stable_sort(out.begin(), out.end(), [](const ScriptedFault& a, const ScriptedFault& b) {
    return a.at_ns < b.at_ns;
  });
  return out;
}

}  // namespace ferry::sim
