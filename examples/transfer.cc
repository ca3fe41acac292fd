// examples/transfer.cc: Ferry between two processes on real RDMA devices,
// using only <ferry/engine.h> (build: examples/README.md).
//
//   transfer target LISTEN [DEVICE]          serve a 1 MiB buffer until SIGINT/SIGTERM
//   transfer initiator LISTEN PEER [DEVICE]  READ and WRITE it, verify the bytes
//
// The target fills its buffer with a pattern; the initiator opens the
// target's segment, READs the first 64 KiB and checks the pattern, WRITEs
// 64 KiB of its own at offset 512 KiB, READs them back and checks them,
// then prints "transfer: WRITE ok, READ ok" and exits 0 (1 on any error).
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ferry/engine.h"

namespace {

constexpr uint64_t kBufBytes = 1 << 20;
constexpr uint64_t kIoBytes = 64 * 1024;
constexpr uint64_t kWaitNs = 10'000'000'000;  // per batch and for the open
volatile std::sig_atomic_t g_stop = 0;

uint8_t Pattern(uint64_t i, uint8_t salt) { return static_cast<uint8_t>(i * 7 + 3 + salt); }

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "transfer: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

// One request in its own batch, waited for; OK only when COMPLETED.
absl::Status RunOne(ferry::Engine& e, const ferry::Request& r) {
  absl::StatusOr<ferry::BatchId> batch = e.AllocateBatch(1);
  if (!batch.ok()) return batch.status();
  ferry::SubmitResult sr = e.Submit(*batch, {r});
  if (!sr.status.ok()) return sr.status;
  absl::StatusOr<ferry::BatchStatus> bs = e.WaitBatch(*batch, kWaitNs);
  absl::Status freed = e.FreeBatch(*batch);
  if (!bs.ok()) return bs.status();
  if (bs->overall != ferry::TaskStatus::kCompleted)
    return absl::UnavailableError(std::string(ferry::TaskStatusName(bs->overall)));
  return freed;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 2 ? argv[1] : "";
  if ((role != "target" && role != "initiator") || (role == "initiator" && argc < 4)) {
    std::fprintf(stderr,
                 "usage: transfer target LISTEN [DEVICE]\n"
                 "       transfer initiator LISTEN PEER [DEVICE]\n");
    return 2;
  }
  ferry::EngineConfig config;
  const int device_arg = role == "target" ? 3 : 4;
  if (argc > device_arg) config.devices = {argv[device_arg]};
  absl::StatusOr<std::unique_ptr<ferry::Engine>> engine =
      ferry::Engine::Create(config, ferry::RealEnvOptions{.listen = argv[2]});
  if (!engine.ok()) return Fail("engine", engine.status());
  ferry::Engine& e = **engine;
  std::vector<uint8_t> buf(kBufBytes);
  if (absl::Status s = e.RegisterMemory(buf.data(), buf.size()); !s.ok())
    return Fail("register", s);

  if (role == "target") {
    for (uint64_t i = 0; i < kBufBytes; ++i) buf[i] = Pattern(i, 0);
    std::signal(SIGINT, [](int) { g_stop = 1; });
    std::signal(SIGTERM, [](int) { g_stop = 1; });
    std::printf("transfer target: listening on %s\n", e.ControlAddress().c_str());
    std::fflush(stdout);
    while (g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    absl::Status s = e.Shutdown(1'000'000'000);
    std::printf("transfer target: shutdown %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }

  absl::StatusOr<ferry::SegmentHandle> seg = e.OpenSegment(argv[3], kWaitNs);
  if (!seg.ok()) return Fail("open", seg.status());
  absl::StatusOr<ferry::SegmentInfo> info = e.GetSegmentInfo(*seg);
  if (!info.ok()) return Fail("segment info", info.status());
  if (info->buffers.empty() || info->buffers[0].length_bytes < kBufBytes)
    return Fail("segment", absl::NotFoundError("the target has no 1 MiB buffer"));
  const uint64_t remote = info->buffers[0].addr;
  const auto req = [&](ferry::OpKind op, uint64_t local_off, uint64_t remote_off) {
    ferry::Request r;
    r.opcode = op;
    r.local_addr = reinterpret_cast<uint64_t>(buf.data()) + local_off;
    r.length_bytes = kIoBytes;
    r.segment = *seg;
    r.remote_addr = remote + remote_off;
    return r;
  };
  // READ the target's pattern.
  if (absl::Status s = RunOne(e, req(ferry::OpKind::kRead, 0, 0)); !s.ok()) return Fail("READ", s);
  for (uint64_t i = 0; i < kIoBytes; ++i)
    if (buf[i] != Pattern(i, 0)) return Fail("READ", absl::DataLossError("wrong bytes"));
  // WRITE ours at 512 KiB, READ it back into another range, compare.
  for (uint64_t i = 0; i < kIoBytes; ++i) buf[kIoBytes + i] = Pattern(i, 99);
  if (absl::Status s = RunOne(e, req(ferry::OpKind::kWrite, kIoBytes, 512 * 1024)); !s.ok())
    return Fail("WRITE", s);
  if (absl::Status s = RunOne(e, req(ferry::OpKind::kRead, 2 * kIoBytes, 512 * 1024)); !s.ok())
    return Fail("READ back", s);
  if (std::memcmp(buf.data() + kIoBytes, buf.data() + 2 * kIoBytes, kIoBytes) != 0)
    return Fail("READ back", absl::DataLossError("the WRITE's bytes did not land"));
  std::printf("transfer: WRITE ok, READ ok (%llu bytes each, peer %s)\n",
              static_cast<unsigned long long>(kIoBytes), argv[3]);
  absl::Status s = e.Shutdown(1'000'000'000);
  return s.ok() ? 0 : Fail("shutdown", s);
}
