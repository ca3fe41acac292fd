// tools/ferry-sim/tally.cc: a sweep's tally and summary table, the JSONL
// line of a seed and `ferry-sim summarize` (sim_tool.h). JSON is written and
// read with nlohmann/json (Debian's nlohmann-json3-dev).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fnv1a.h"
#include "engine/task.h"
#include "ferry/engine.h"
#include "nlohmann/json.hpp"
#include "tools/ferry-sim/sim_tool.h"

namespace ferry::tools {

void Tally::Add(SeedResult r) {
  ++seeds;
  first_seed = std::min(first_seed, r.report.seed);
  last_seed = std::max(last_seed, r.report.seed);
  ++verdicts[static_cast<size_t>(r.verdict)];
  for (size_t k = 0; k < sim::kFaultKinds; ++k) {
    faults[k] += r.report.faults[k];
    fault_seeds[k] += r.report.faults[k] != 0;
  }
  for (const auto& [k, v] : r.report.probes) {
    probes[k] += v;
    probe_seeds[k] += v != 0;
  }
  for (size_t k = 0; k < status.size(); ++k) status[k] += r.report.status[k];
  dead += r.report.tasks_dead;
  ++hosts[r.report.shape.hosts];
  ++nics[r.report.shape.nics];
  ++workers[r.report.shape.workers];
  stall_seeds += r.report.stall_drawn;
  wall_s += r.wall_s;
  if (Severity(r.verdict) > Severity(worst)) worst = r.verdict;
  if (r.verdict != Verdict::kOk) failures.push_back(std::move(r));
}

std::string Tally::NeverHit() const {
  std::string out;
  const size_t gated = stall_gated || stall_seeds != 0 ? sim::kFaultKinds : sim::kSeededFaultKinds;
  for (size_t k = 0; k < gated; ++k) {
    if (k >= sim::kSeededFaultKinds && !sim::IsStallKind(static_cast<sim::FaultKind>(k))) continue;
    if (faults[k] == 0)
      absl::StrAppend(&out, out.empty() ? "" : " ",
                      "fault:", std::string(sim::FaultKindName(static_cast<sim::FaultKind>(k))));
  }
  const std::vector<std::string> defensive = simworld::DefensiveProbes();
  for (const std::string& p : simworld::KnownProbes()) {
    if (std::find(defensive.begin(), defensive.end(), p) != defensive.end()) continue;
    auto it = probes.find(p);
    if (it == probes.end() || it->second == 0) absl::StrAppend(&out, out.empty() ? "" : " ", p);
  }
  return out;
}

void PrintSummary(const char* argv0, const Args& a, const Tally& t, double secs) {
  std::printf(
      "ferry-sim: %llu seeds (%llu..%llu), profile %s, wake %s, mode %s, families %s%s%s: %llu ok",
      static_cast<unsigned long long>(t.seeds),
      static_cast<unsigned long long>(t.seeds == 0 ? a.first : t.first_seed),
      static_cast<unsigned long long>(t.seeds == 0 ? a.last : t.last_seed),
      std::string(simworld::WorldProfileName(a.profile)).c_str(),
      std::string(simworld::WakeModelName(a.wake)).c_str(),
      a.mode == Mode::kSwarm ? "swarm" : "determinism", a.families.ToString().c_str(),
      a.mutation_name.empty() ? "" : ", mutation ", a.mutation_name.c_str(),
      static_cast<unsigned long long>(t.verdicts[0]));
  for (Verdict v :
       {Verdict::kSafety, Verdict::kLiveness, Verdict::kCrash, Verdict::kNondeterminism})
    std::printf(", %llu %s", static_cast<unsigned long long>(t.verdicts[static_cast<size_t>(v)]),
                std::string(VerdictName(v)).c_str());
  std::printf(" in %.1f s (%.1f seeds/s; %.1f seeds/s per core: %.1f s of seed runs)\n", secs,
              secs > 0 ? static_cast<double>(t.seeds) / secs : 0.0,
              t.wall_s > 0 ? static_cast<double>(t.seeds) / t.wall_s : 0.0, t.wall_s);
  auto dist = [&](const char* name, const std::map<uint32_t, uint64_t>& m) {
    std::printf("  %-8s", name);
    for (const auto& [k, v] : m) std::printf(" %u:%llu", k, static_cast<unsigned long long>(v));
    std::printf("\n");
  };
  std::printf("worlds (seeds by value):\n");
  dist("hosts", t.hosts);
  dist("nics", t.nics);
  dist("workers", t.workers);
  std::printf("faults injected (total, seeds where it fired):\n");
  for (size_t k = 0; k < sim::kFaultKinds; ++k) {
    if (k >= sim::kSeededFaultKinds && !sim::IsStallKind(static_cast<sim::FaultKind>(k))) continue;
    std::printf("  %-18s %10llu  %6llu\n",
                std::string(sim::FaultKindName(static_cast<sim::FaultKind>(k))).c_str(),
                static_cast<unsigned long long>(t.faults[k]),
                static_cast<unsigned long long>(t.fault_seeds[k]));
  }
  if (t.stall_seeds != 0)
    std::printf("  (stall kinds drawn in %llu seeds)\n",
                static_cast<unsigned long long>(t.stall_seeds));
  std::printf("probes hit (total, seeds where it was hit):\n");
  std::string never;
  for (const auto& [k, v] : t.probes) {
    if (v == 0) {
      absl::StrAppend(&never, never.empty() ? "" : " ", k);
      continue;
    }
    std::printf("  %-28s %10llu  %6llu\n", k.c_str(), static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(t.probe_seeds.at(k)));
  }
  if (!never.empty()) std::printf("  never hit: %s\n", never.c_str());
  std::printf("judged tasks:");
  for (size_t k = 0; k < 6; ++k)
    std::printf(" %s=%llu", std::string(TaskStatusName(static_cast<TaskStatus>(k))).c_str(),
                static_cast<unsigned long long>(t.status[k]));
  std::printf("; died with a restarted process: %llu\n", static_cast<unsigned long long>(t.dead));
  if (!t.failures.empty()) {
    std::printf("failures:\n");
    for (const SeedResult& f : t.failures) {
      std::printf("  seed %llu: %s: %s\n    replay: %s\n",
                  static_cast<unsigned long long>(f.report.seed),
                  std::string(VerdictName(f.verdict)).c_str(), f.message.c_str(),
                  ReplayCommand(argv0, a, f.report.seed).c_str());
    }
  }
  std::printf("exit %d (%s)\n", ExitCodeOf(t.worst), std::string(VerdictName(t.worst)).c_str());
}

using nlohmann::json;

std::string JsonlLine(const Args& a, const SeedResult& r) {
  const simworld::SwarmReport& rep = r.report;
  json j;
  j["seed"] = rep.seed;
  j["profile"] = std::string(simworld::WorldProfileName(a.profile));
  j["families"] = a.families.ToString();
  j["wake"] = std::string(simworld::WakeModelName(a.wake));
  j["wake_probes"] = rep.wake_probes;
  if (!a.mutation_name.empty()) j["mutation"] = a.mutation_name;
  j["hosts"] = rep.shape.hosts;
  j["nics_per_host"] = rep.shape.nics;
  j["workers"] = rep.shape.workers;
  j["plan_digest"] = absl::StrFormat("0x%016x", base::Fnv1a64(rep.plan_text));
  j["outcome"] = std::string(VerdictName(r.verdict));
  if (!r.message.empty()) j["message"] = r.message;
  json faults = json::object();
  for (size_t k = 0; k < sim::kFaultKinds; ++k)
    if (rep.faults[k] != 0)
      faults[std::string(sim::FaultKindName(static_cast<sim::FaultKind>(k)))] = rep.faults[k];
  j["faults"] = faults;
  json probes = json::object();
  for (const auto& [k, v] : rep.probes)
    if (v != 0) probes[k] = v;
  j["probes"] = probes;
  json status = json::object();
  for (size_t k = 0; k < 6; ++k)
    status[std::string(TaskStatusName(static_cast<TaskStatus>(k)))] = rep.status[k];
  j["tasks"] = status;
  j["tasks_dead"] = rep.tasks_dead;
  j["virtual_ns"] = rep.end_ns;
  j["wall_ms"] = static_cast<uint64_t>(r.wall_s * 1000.0 + 0.5);
  j["wall_us"] = static_cast<uint64_t>(r.wall_s * 1e6);
  j["trace_hash"] = absl::StrFormat("0x%016x", rep.trace_hash);
  if (rep.stall_drawn) j["stall"] = true;
  return j.dump();
}

bool ParseJsonlLine(std::string_view line, SeedResult* r, std::string* profile, std::string* why) {
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "not a JSON object";
    return false;
  }
  for (const char* key : {"seed", "hosts", "nics_per_host", "workers", "outcome", "faults",
                          "probes", "tasks", "trace_hash"}) {
    if (!j.contains(key)) {
      *why = absl::StrCat("no \"", key, "\" field");
      return false;
    }
  }
  if (!j["seed"].is_number_unsigned() || !j["faults"].is_object() || !j["probes"].is_object() ||
      !j["tasks"].is_object() || !j["outcome"].is_string()) {
    *why = "a field of the wrong type";
    return false;
  }
  const std::optional<Verdict> v = ParseVerdict(j["outcome"].get<std::string>());
  if (!v) {
    *why = "unknown outcome " + j["outcome"].get<std::string>();
    return false;
  }
  r->verdict = *v;
  r->message = j.value("message", "");
  r->report.seed = j["seed"].get<uint64_t>();
  r->report.shape.hosts = j["hosts"].get<uint32_t>();
  r->report.shape.nics = j["nics_per_host"].get<uint32_t>();
  r->report.shape.workers = j["workers"].get<uint32_t>();
  for (size_t k = 0; k < sim::kFaultKinds; ++k) {
    const std::string name(sim::FaultKindName(static_cast<sim::FaultKind>(k)));
    r->report.faults[k] = j["faults"].value(name, uint64_t{0});
  }
  for (const std::string& p : simworld::KnownProbes()) r->report.probes[p] = 0;
  for (const auto& [k, val] : j["probes"].items())
    if (val.is_number_unsigned()) r->report.probes[k] = val.get<uint64_t>();
  for (size_t k = 0; k < 6; ++k) {
    const std::string name(TaskStatusName(static_cast<TaskStatus>(k)));
    r->report.status[k] = j["tasks"].value(name, uint64_t{0});
  }
  r->report.tasks_dead = j.value("tasks_dead", uint64_t{0});
  r->report.stall_drawn = j.value("stall", false);
  r->report.end_ns = j.value("virtual_ns", uint64_t{0});
  r->wall_s = static_cast<double>(j.value("wall_us", uint64_t{0})) / 1e6;
  *profile = j.value("profile", "");
  return true;
}

int Summarize(const char* argv0, const std::vector<std::string>& files) {
  Tally t;
  Args a;
  std::string profile;
  uint64_t lines = 0;
  for (const std::string& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "ferry-sim summarize: cannot read %s\n", f.c_str());
      return kExitIo;
    }
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      SeedResult r;
      std::string p, why;
      if (!ParseJsonlLine(line, &r, &p, &why)) {
        std::fprintf(stderr, "ferry-sim summarize: %s:%llu: %s\n", f.c_str(),
                     static_cast<unsigned long long>(n), why.c_str());
        return kExitUsage;
      }
      if (!profile.empty() && p != profile) {
        std::fprintf(stderr,
                     "ferry-sim summarize: %s:%llu: profile %s after %s (merge one profile)\n",
                     f.c_str(), static_cast<unsigned long long>(n), p.c_str(), profile.c_str());
        return kExitUsage;
      }
      profile = p;
      ++lines;
      t.Add(std::move(r));
    }
  }
  if (auto pr = simworld::ParseWorldProfile(profile); pr.ok()) a.profile = *pr;
  std::printf("ferry-sim summarize: %llu seeds from %zu file(s)\n",
              static_cast<unsigned long long>(lines), files.size());
  PrintSummary(argv0, a, t, t.wall_s);
  if (std::string never = t.NeverHit(); !never.empty())
    std::printf("never hit (probes and seeded fault kinds): %s\n", never.c_str());
  return ExitCodeOf(t.worst);
}

}  // namespace ferry::tools
