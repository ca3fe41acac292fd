// fuzz/fault_schedule_fuzz.cc: libFuzzer target over fault schedules on the
// two-host simulated world (fuzz/fault_schedule_fuzz.h). A non-empty
// verdict (a broken contract, a stuck run, a leak) aborts with it printed,
// which libFuzzer reports as a crash and saves the input.
//
// Build: meson setup -Dfuzzing=true (clang); run e.g.
//   build/fuzz/fault_schedule_fuzz fuzz/corpus/fault_schedule -max_total_time=60
#include "fuzz/fault_schedule_fuzz.h"

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string verdict = ferry::fuzz::FaultScheduleFuzzOne(data, size);
  if (!verdict.empty()) {
    std::fprintf(stderr, "fault_schedule_fuzz: %s\n", verdict.c_str());
    std::abort();
  }
  return 0;
}
