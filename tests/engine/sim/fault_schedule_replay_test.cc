// tests/engine/sim/fault_schedule_replay_test.cc: the fault-schedule fuzz
// target's body (fuzz/fault_schedule_fuzz.h) replayed over its seed corpus
// fuzz/corpus/fault_schedule (dir in FERRY_FAULT_SCHEDULE_CORPUS) in every
// build, gcc too (suite fuzz): every file's run keeps the contracts, is live
// and leaves nothing. And the proof that it could fail: with a contract's
// mutation switch on, the same corpus yields that contract's verdict.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fault_schedule_fuzz.h"
#include "sim/prng.h"

namespace ferry::fuzz {
namespace {

std::vector<std::vector<uint8_t>> Corpus() {
  const char* dir = std::getenv("FERRY_FAULT_SCHEDULE_CORPUS");
  std::vector<std::vector<uint8_t>> out;
  if (dir == nullptr) return out;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file()) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    out.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return out;
}

TEST(FaultScheduleReplay, SeedCorpusKeepsEveryContract) {
  const auto corpus = Corpus();
  if (corpus.empty()) GTEST_SKIP() << "FERRY_FAULT_SCHEDULE_CORPUS not set";
  EXPECT_GE(corpus.size(), 9u);
  size_t ops_total = 0;
  for (const auto& bytes : corpus) {
    size_t ops = 0;
    EXPECT_EQ(FaultScheduleFuzzOne(bytes.data(), bytes.size(), &ops), "");
    EXPECT_GE(ops, 3u);
    ops_total += ops;
  }
  EXPECT_GE(ops_total, 35u);
}

TEST(FaultScheduleReplay, EmptyAndShortInputsRunToo) {
  EXPECT_EQ(FaultScheduleFuzzOne(nullptr, 0), "");
  const uint8_t one[] = {7};
  EXPECT_EQ(FaultScheduleFuzzOne(one, 1), "");
  std::vector<uint8_t> many(4 * kOpsMax * 2, 0x02);  // Advance, capped at kOpsMax
  size_t ops = 0;
  EXPECT_EQ(FaultScheduleFuzzOne(many.data(), many.size(), &ops), "");
  EXPECT_EQ(ops, kOpsMax);
}

// With the mutation switch FERRY_MUTATION on (the meson tests
// fuzz_fault_schedule_mut_*), some corpus input must fail with a verdict
// naming FERRY_FAULT_SCHEDULE_EXPECT (the oracle rule of that contract).
TEST(FaultScheduleReplay, AMutationIsCaughtWithItsVerdict) {
  const char* expect = std::getenv("FERRY_FAULT_SCHEDULE_EXPECT");
  if (expect == nullptr) GTEST_SKIP() << "not a mutation run";
  const auto corpus = Corpus();
  ASSERT_FALSE(corpus.empty());
  size_t caught = 0;
  std::string match, any;
  for (const auto& bytes : corpus) {
    const std::string v = FaultScheduleFuzzOne(bytes.data(), bytes.size());
    if (v.empty()) continue;
    ++caught;
    if (any.empty()) any = v;
    if (match.empty() && v.find(expect) != std::string::npos) match = v;
  }
  ASSERT_GE(caught, 1u) << "the corpus did not catch the mutation";
  ASSERT_FALSE(match.empty()) << "no verdict names '" << expect << "'; one was:\n" << any;
  std::printf("verdict:\n%s\n", match.c_str());
}

// How the corpus's "catches_*" inputs were found (run by hand, never by CI):
// FERRY_MUTATION=<switch> FERRY_FAULT_SCHEDULE_SEARCH_OUT=<dir> runs
// random schedules (sim::Prng, seed 1) until one's verdict is non-empty
// and writes it there. libFuzzer does the same, guided by coverage.
TEST(FaultScheduleReplay, DISABLED_RandomSearch) {
  const char* out = std::getenv("FERRY_FAULT_SCHEDULE_SEARCH_OUT");
  ASSERT_NE(out, nullptr);
  sim::Prng prng(1);
  for (int attempt = 0; attempt < 20'000; ++attempt) {
    std::vector<uint8_t> bytes(2 + 4 * prng.Range(4, 24));
    for (auto& b : bytes) b = static_cast<uint8_t>(prng.Next());
    const std::string v = FaultScheduleFuzzOne(bytes.data(), bytes.size());
    if (v.empty()) continue;
    std::ofstream(std::filesystem::path(out) / ("found_" + std::to_string(attempt)),
                  std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    std::printf("attempt %d:\n%s\n", attempt, v.c_str());
    return;
  }
  FAIL() << "nothing found in 20000 attempts";
}

}  // namespace
}  // namespace ferry::fuzz
