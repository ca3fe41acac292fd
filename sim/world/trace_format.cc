// sim/world/trace_format.cc: readable and Perfetto renderings of a recorded
// swarm trace (see trace_format.h for the attribution rule).
#include "sim/world/trace_format.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sim/net/sim_network.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fault_plan.h"

namespace ferry::simworld {
namespace {

struct Parsed {
  bool draw = false;
  std::string kind;
  uint64_t arg[3] = {0, 0, 0};
};

Parsed Parse(const std::string& text) {
  Parsed p;
  std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  if (parts.empty()) return p;
  if (parts[0] == "draw") {
    p.draw = true;
    p.kind = text;
    return p;
  }
  if (parts.size() >= 2) p.kind = std::string(parts[1]);
  for (size_t i = 0; i < 3 && i + 2 < parts.size(); ++i)
    (void)absl::SimpleAtoi(parts[i + 2], &p.arg[i]);
  return p;
}

bool SchedulerEvent(std::string_view k) {
  return k == "timers" || k == "jump" || k == "plan" || k == "stall" || k == "pct_change";
}

// Attributes each entry to a track: -1 sched, -2 main, else the scheduler
// actor index. Entries before a step are held until the step names them.
std::vector<int64_t> Attribute(const std::vector<sim::TraceEntry>& trace,
                               std::vector<Parsed>* parsed) {
  constexpr int64_t kSched = -1, kMain = -2, kUnknown = -3;
  parsed->clear();
  parsed->reserve(trace.size());
  std::vector<int64_t> track(trace.size(), kUnknown);
  std::vector<size_t> held;
  int main_depth = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    parsed->push_back(Parse(trace[i].text));
    const Parsed& p = parsed->back();
    if (p.draw) {
      held.push_back(i);
      continue;
    }
    if (p.kind == "main.begin") {
      for (size_t j : held) track[j] = kMain;  // nothing was stepping
      held.clear();
      ++main_depth;
      track[i] = kMain;
      continue;
    }
    if (p.kind == "main.end") {
      if (main_depth > 0) --main_depth;
      track[i] = kMain;
      continue;
    }
    if (main_depth > 0) {
      track[i] = kMain;
      continue;
    }
    if (SchedulerEvent(p.kind)) {
      track[i] = kSched;
      continue;
    }
    if (p.kind == "step") {
      const int64_t actor = static_cast<int64_t>(p.arg[0]);
      for (size_t j : held) track[j] = actor;
      held.clear();
      track[i] = actor;
      continue;
    }
    held.push_back(i);
  }
  for (size_t j : held) track[j] = kMain;  // after the last step: the driver
  return track;
}

std::string TrackName(const SwarmReport& r, int64_t t) {
  if (t == -1) return "sched";
  if (t == -2) return "main";
  if (t >= 0 && static_cast<size_t>(t) < r.actor_names.size()) return r.actor_names[t];
  return absl::StrCat("actor", t);
}

std::string Arg(const SwarmReport& r, uint64_t v) {
  auto it = r.names.find(v);
  return it == r.names.end() ? absl::StrCat(v) : it->second;
}

// The arguments of an event, decoded where the kind is known.
std::string Args(const SwarmReport& r, const Parsed& p) {
  const uint64_t* a = p.arg;
  if (p.kind == "fault")
    return std::string(sim::FaultKindName(static_cast<sim::FaultKind>(a[0] & 0xff)));
  if (p.kind == "violation")
    return absl::StrCat(std::string(sim::ViolationKindName(static_cast<sim::ViolationKind>(a[0]))),
                        " by actor id ", a[1]);
  if (p.kind == "net.drop")
    return absl::StrCat(std::string(sim::NetDropName(static_cast<sim::NetDrop>(a[0]))), " msg ",
                        a[1]);
  if (p.kind == "net.send")
    return absl::StrCat(Arg(r, a[0]), " -> ", Arg(r, a[1]), " msg ", a[2] >> 20, " ",
                        a[2] & 0xfffff, " B");
  if (p.kind == "net.poll")
    return absl::StrCat(Arg(r, a[0]), " <- ", Arg(r, a[1]), " ", a[2], " B");
  if (p.kind == "step")
    return absl::StrCat(TrackName(r, static_cast<int64_t>(a[0])), " cost ", a[1], " ns of ", a[2],
                        " runnable");
  if (p.kind == "jump") return absl::StrCat("time ", a[0], " -> ", a[1], " ns");
  if (p.kind.rfind("world.", 0) == 0)
    return absl::StrCat("h", a[0], a[1] != 0 ? absl::StrCat(" ", a[1], " ns") : "");
  return absl::StrCat(Arg(r, a[0]), " ", a[1], " ", a[2]);
}

void JsonEscape(std::string_view s, std::string* out) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      out->push_back(ch);
    }
  }
}

std::string Us(uint64_t ns) { return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000); }

}  // namespace

std::string FormatTrace(const SwarmReport& r, const TraceFormat& format) {
  std::vector<Parsed> parsed;
  const std::vector<int64_t> track = Attribute(r.trace, &parsed);
  std::string out = absl::StrFormat(
      "trace: seed %d, %d entries, hash 0x%016x; showing the last %d recorded%s%s\n", r.seed,
      r.trace_entries, r.trace_hash, r.trace.size(), format.draws ? "" : " (draws hidden)",
      format.steps ? "" : " (steps hidden)");
  absl::StrAppend(&out, "      time (ms)  actor           event\n");
  for (size_t i = 0; i < r.trace.size(); ++i) {
    const Parsed& p = parsed[i];
    if (p.draw && !format.draws) continue;
    if (p.kind == "step" && !format.steps) continue;
    if (p.kind == "main.begin" || p.kind == "main.end") continue;
    const uint64_t t = r.trace[i].time_ns;
    absl::StrAppendFormat(&out, "%8d.%06d  %-15s %s", t / 1'000'000, t % 1'000'000,
                          TrackName(r, track[i]), p.draw ? r.trace[i].text : p.kind);
    if (!p.draw) absl::StrAppend(&out, "  ", Args(r, p));
    out.push_back('\n');
  }
  return out;
}

std::string PerfettoJson(const SwarmReport& r, size_t events_max) {
  std::vector<Parsed> parsed;
  const std::vector<int64_t> track = Attribute(r.trace, &parsed);
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  auto tid = [](int64_t t) { return t + 3; };  // sched 2, main 1, actors from 3
  absl::StrAppend(&out,
                  "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":"
                  "\"ferry-sim seed ",
                  r.seed, "\"}}");
  std::vector<int64_t> tracks = {-1, -2};
  for (size_t i = 0; i < r.actor_names.size(); ++i) tracks.push_back(static_cast<int64_t>(i));
  for (int64_t t : tracks) {
    absl::StrAppend(&out, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":", tid(t),
                    ",\"name\":\"thread_name\",\"args\":{\"name\":\"");
    JsonEscape(TrackName(r, t), &out);
    absl::StrAppend(&out, "\"}}");
  }
  size_t written = 0, skipped = 0;
  for (size_t i = 0; i < r.trace.size(); ++i) {
    const Parsed& p = parsed[i];
    if (p.draw || p.kind == "main.begin" || p.kind == "main.end") continue;
    if (written >= events_max) {
      ++skipped;
      continue;
    }
    ++written;
    const uint64_t t = r.trace[i].time_ns;
    if (p.kind == "step") {
      // A complete slice on the actor's track: the step starts at its
      // traced time and lasts its modelled cost.
      absl::StrAppend(&out, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":", tid(track[i]), ",\"ts\":", Us(t),
                      ",\"dur\":", Us(p.arg[1]), ",\"name\":\"step\"}");
      continue;
    }
    absl::StrAppend(&out, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":", tid(track[i]),
                    ",\"ts\":", Us(t), ",\"name\":\"");
    JsonEscape(p.kind, &out);
    absl::StrAppend(&out, "\",\"args\":{\"detail\":\"");
    JsonEscape(Args(r, p), &out);
    absl::StrAppend(&out, "\",\"seq\":", r.trace[i].seq, "}}");
  }
  absl::StrAppend(&out, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"ferry_sim\",\"args\":{",
                  "\"seed\":", r.seed, ",\"trace_hash\":\"",
                  absl::StrFormat("0x%016x", r.trace_hash), "\",\"entries\":", r.trace_entries,
                  ",\"recorded\":", r.trace.size(), ",\"events_written\":", written,
                  ",\"events_skipped\":", skipped, "}}\n]}\n");
  return out;
}

}  // namespace ferry::simworld
