// tests/softroce/probe/reconnect_probe.cc: reconnect and restart on real
// verbs (issue 10 item 2). Engines on rxe1 (initiators) and rxe0 (targets),
// each over libibverbs behind a HoldVerbs (to see its QPs) and a CountingNet
// (to count handshake REQs).
//   - Reconnect.InitiatorRetires...: the initiator's endpoint is retired
//     (evicted: endpoint_store_capacity 1, a second peer) while the target
//     still holds its side; the next transfer reconnects with new QPs and
//     its first REQ succeeds.
//   - Reconnect.TargetRetires...: the target's endpoint is retired
//     (evicted for another initiator) while the initiator still holds its
//     READY side; the initiator's next WR finds no peer QP, fails
//     RETRY_EXC_ERR (qp_retries 6: on rxe 7 never gives up), and the slice
//     completes on a new endpoint whose first REQ succeeds.
//   - Restart.AKilledInitiator...: an initiator PROCESS (this binary re-run
//     as RestartChild.DISABLED_Initiator) transfers, is killed with SIGKILL
//     mid-transfer, and is started again on the SAME control port while the
//     target (this process) still holds the old endpoint: the new process's
//     first open and first REQ succeed and its transfers verify.
// Every test skips (GTEST_SKIP) without two RDMA devices.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/softroce/probe/real_side.h"

extern char** environ;

namespace ferry::probe {
namespace {

constexpr uint64_t kBufBytes = 256 * 1024;
constexpr uint64_t kLen = 64 * 1024;
constexpr uint64_t kWaitNs = 20'000'000'000;

bool HaveTwo() { return RdmaDevices().size() >= 2; }

// Waits (bounded) until the QP with this handle id is destroyed.
bool WaitDestroyed(Side& s, uint64_t qp_id) {
  for (int i = 0; i < 5000; ++i) {
    auto r = s.verbs->RecordOf(qp_id);
    if (r && r->destroyed) return true;
    SleepNs(2'000'000);
  }
  return false;
}

TEST(Reconnect, InitiatorRetiresItsEndpointTheTargetHoldsOnFirstReqOfTheReconnectSucceeds) {
  if (!HaveTwo()) GTEST_SKIP() << "needs two RDMA devices";
  const auto devs = RdmaDevices();
  std::atomic<uint64_t> seq{0};
  base::Mutations none;
  auto a = StartSide(devs[0], OneEndpointConfig(), kBufBytes, &seq, none);
  auto b = StartSide(devs[0], OneEndpointConfig(), kBufBytes, &seq, none);
  auto i = StartSide(devs[1], OneEndpointConfig(), kBufBytes, &seq, none);
  ASSERT_TRUE(a.ok() && b.ok() && i.ok());
  Side& A = **a;
  Side& B = **b;
  Side& I = **i;
  auto sa = Open(I, A.net->LocalAddress(), kWaitNs);
  auto sb = Open(I, B.net->LocalAddress(), kWaitNs);
  ASSERT_TRUE(sa.ok() && sb.ok());

  ASSERT_EQ(WriteReadBack(I, *sa, A.addr(0), kLen, 1, kWaitNs), "");
  const auto q1 = I.verbs->NewestLiveRts();
  ASSERT_TRUE(q1.has_value());
  const auto a1 = A.verbs->PairedWith(q1->qp_num);
  ASSERT_TRUE(a1.has_value());
  EXPECT_EQ(I.net->reqs_sent.load(), 1u);
  // A transfer to B takes the only endpoint slot: A's endpoint is evicted
  // (retired, its QP destroyed) at the initiator; A still holds its side.
  ASSERT_EQ(WriteReadBack(I, *sb, B.addr(0), kLen, 2, kWaitNs), "");
  ASSERT_TRUE(WaitDestroyed(I, q1->qp.id)) << "the initiator never retired its endpoint to A";
  const auto a1_now = A.verbs->RecordOf(a1->qp.id);
  ASSERT_TRUE(a1_now.has_value());
  EXPECT_FALSE(a1_now->destroyed) << "the target should still hold its side";
  const uint64_t reqs_before = I.net->reqs_sent.load();
  const uint64_t refusals_before = I.net->refusals_got.load();
  // The reconnect: new QPs, one REQ, answered.
  ASSERT_EQ(WriteReadBack(I, *sa, A.addr(0), kLen, 3, kWaitNs), "");
  const auto q2 = I.verbs->NewestLiveRts();
  ASSERT_TRUE(q2.has_value());
  EXPECT_NE(q2->qp.id, q1->qp.id);
  EXPECT_TRUE(A.verbs->PairedWith(q2->qp_num).has_value());
  EXPECT_EQ(I.net->reqs_sent.load() - reqs_before, 1u)
      << "the reconnect's first REQ was not enough";
  EXPECT_EQ(I.net->refusals_got.load(), refusals_before);
  std::printf("reconnect (initiator retired): REQs %llu (1 per connect), QP %u -> %u, verified\n",
              static_cast<unsigned long long>(I.net->reqs_sent.load()), q1->qp_num, q2->qp_num);
  for (Side* s : {&I, &A, &B}) EXPECT_EQ(Shutdown(*s, 10'000'000'000), "");
}

TEST(Reconnect, TargetRetiresItsEndpointTheInitiatorHoldsTheNextSliceCompletesOnANewOne) {
  if (!HaveTwo()) GTEST_SKIP() << "needs two RDMA devices";
  const auto devs = RdmaDevices();
  std::atomic<uint64_t> seq{0};
  base::Mutations none;
  auto t = StartSide(devs[0], OneEndpointConfig(), kBufBytes, &seq, none);
  auto i1 = StartSide(devs[1], OneEndpointConfig(), kBufBytes, &seq, none);
  auto i2 = StartSide(devs[1], OneEndpointConfig(), kBufBytes, &seq, none);
  ASSERT_TRUE(t.ok() && i1.ok() && i2.ok());
  Side& T = **t;
  Side& I1 = **i1;
  Side& I2 = **i2;
  auto s1 = Open(I1, T.net->LocalAddress(), kWaitNs);
  auto s2 = Open(I2, T.net->LocalAddress(), kWaitNs);
  ASSERT_TRUE(s1.ok() && s2.ok());

  ASSERT_EQ(WriteReadBack(I1, *s1, T.addr(0), kLen, 1, kWaitNs), "");
  const auto q1 = I1.verbs->NewestLiveRts();
  ASSERT_TRUE(q1.has_value());
  const auto t1 = T.verbs->PairedWith(q1->qp_num);
  ASSERT_TRUE(t1.has_value());
  // I2 connects: the target's only slot goes to it, I1's side is evicted.
  ASSERT_EQ(WriteReadBack(I2, *s2, T.addr(kLen * 2), kLen, 2, kWaitNs), "");
  ASSERT_TRUE(WaitDestroyed(T, t1->qp.id)) << "the target never retired its endpoint to I1";
  const auto q1_now = I1.verbs->RecordOf(q1->qp.id);
  ASSERT_TRUE(q1_now.has_value());
  EXPECT_FALSE(q1_now->destroyed) << "I1 should still hold its READY side";
  const uint64_t reqs_before = I1.net->reqs_sent.load();
  // I1's next WRITE goes to a QP that is gone: RETRY_EXC_ERR, then the
  // slice is retried on a new endpoint.
  ASSERT_EQ(WriteReadBack(I1, *s1, T.addr(0), kLen, 3, kWaitNs), "");
  const auto q2 = I1.verbs->NewestLiveRts();
  ASSERT_TRUE(q2.has_value());
  EXPECT_NE(q2->qp.id, q1->qp.id);
  EXPECT_EQ(I1.net->reqs_sent.load() - reqs_before, 1u)
      << "the reconnect's first REQ was not enough";
  const auto q1_end = I1.verbs->RecordOf(q1->qp.id);
  ASSERT_TRUE(q1_end.has_value());
  EXPECT_EQ(q1_end->first_error, hal::WcStatus::kRetryExcErr)
      << "the old QP's WR ended " << hal::WcStatusName(q1_end->first_error);
  std::printf(
      "reconnect (target retired): old QP's WR ended %s; I1 REQs %llu, QP %u -> %u, "
      "verified\n",
      std::string(hal::WcStatusName(q1_end->first_error)).c_str(),
      static_cast<unsigned long long>(I1.net->reqs_sent.load()), q1->qp_num, q2->qp_num);
  for (Side* s : {&I1, &I2, &T}) EXPECT_EQ(Shutdown(*s, 10'000'000'000), "");
}

// ------------------------------------------------------------------ restart
// The child: an initiator process on FERRY_PROBE_LISTEN that opens the
// target at FERRY_PROBE_TARGET and runs FERRY_PROBE_ROUNDS verified
// write-read-backs at FERRY_PROBE_REMOTE (0 rounds: until killed),
// printing one line per round and a final summary line.
TEST(RestartChild, DISABLED_Initiator) {
  const char* listen = std::getenv("FERRY_PROBE_LISTEN");
  const char* target = std::getenv("FERRY_PROBE_TARGET");
  const char* remote = std::getenv("FERRY_PROBE_REMOTE");
  const char* rounds_s = std::getenv("FERRY_PROBE_ROUNDS");
  ASSERT_TRUE(listen && target && remote && rounds_s) << "run by Restart.* only";
  uint64_t remote_addr = 0, rounds = 0;
  uint32_t port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(remote, &remote_addr) && absl::SimpleAtoi(rounds_s, &rounds));
  ASSERT_TRUE(absl::SimpleAtoi(listen, &port) && port > 0 && port < 65536);
  std::atomic<uint64_t> seq{0};
  auto i = StartSide(RdmaDevices().at(1), OneEndpointConfig(), kBufBytes, &seq, base::Mutations{},
                     static_cast<uint16_t>(port));
  ASSERT_TRUE(i.ok()) << i.status();
  Side& I = **i;
  auto seg = Open(I, target, kWaitNs);
  std::printf("child %d: open %s desc_reqs=%llu\n", getpid(), seg.ok() ? "ok" : "FAILED",
              static_cast<unsigned long long>(I.net->desc_reqs_sent.load()));
  std::fflush(stdout);
  ASSERT_TRUE(seg.ok()) << seg.status();
  uint64_t verified = 0;
  for (uint64_t r = 0; rounds == 0 || r < rounds; ++r) {
    const std::string e =
        WriteReadBack(I, *seg, remote_addr, kLen, static_cast<uint32_t>(r), kWaitNs);
    if (e.empty()) ++verified;
    std::printf("child %d: round %llu %s reqs=%llu\n", getpid(), static_cast<unsigned long long>(r),
                e.empty() ? "verified" : e.c_str(),
                static_cast<unsigned long long>(I.net->reqs_sent.load()));
    std::fflush(stdout);
  }
  std::printf("child %d: done rounds=%llu verified=%llu reqs=%llu refusals=%llu desc_reqs=%llu\n",
              getpid(), static_cast<unsigned long long>(rounds),
              static_cast<unsigned long long>(verified),
              static_cast<unsigned long long>(I.net->reqs_sent.load()),
              static_cast<unsigned long long>(I.net->refusals_got.load()),
              static_cast<unsigned long long>(I.net->desc_reqs_sent.load()));
  std::fflush(stdout);
  EXPECT_EQ(verified, rounds);
  EXPECT_EQ(Shutdown(I, 10'000'000'000), "");
}

// A child process with its stdout on a pipe.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
};

Child Spawn(const std::string& port, const std::string& target, uint64_t remote, int rounds) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  env_s.push_back("FERRY_PROBE_LISTEN=" + port);
  env_s.push_back("FERRY_PROBE_TARGET=" + target);
  env_s.push_back(absl::StrCat("FERRY_PROBE_REMOTE=", remote));
  env_s.push_back(absl::StrCat("FERRY_PROBE_ROUNDS=", rounds));
  std::vector<char*> envp;
  for (std::string& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", f = "--gtest_filter=RestartChild.DISABLED_Initiator",
              d = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), f.data(), d.data(), nullptr};
  Child c;
  if (posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv, envp.data()) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  c.out = fdopen(fds[0], "r");
  return c;
}

// Reads the child's lines until one contains `want` (or EOF); echoes them.
bool ReadUntil(Child& c, const std::string& want, std::string* last) {
  char line[512];
  while (c.out != nullptr && std::fgets(line, sizeof line, c.out) != nullptr) {
    std::printf("  | %s", line);
    *last = line;
    if (last->find(want) != std::string::npos) return true;
  }
  return false;
}

TEST(Restart, AKilledInitiatorRestartedOnTheSamePortOpensAndTransfersAtTheFirstTry) {
  if (!HaveTwo()) GTEST_SKIP() << "needs two RDMA devices";
  const auto devs = RdmaDevices();
  std::atomic<uint64_t> seq{0};
  auto t = StartSide(devs[0], OneEndpointConfig(), kBufBytes, &seq, base::Mutations{});
  ASSERT_TRUE(t.ok()) << t.status();
  Side& T = **t;
  const std::string port = "7310";
  const std::string target = T.net->LocalAddress();
  std::string last;

  Child first = Spawn(port, target, T.addr(0), 0);
  ASSERT_GT(first.pid, 0);
  const bool ran = ReadUntil(first, "round 3 verified", &last);
  // SIGKILL while its next round is in flight: no shutdown, QPs die with
  // the process, the target still holds its endpoint.
  kill(first.pid, SIGKILL);
  int status = 0;
  waitpid(first.pid, &status, 0);
  std::fclose(first.out);
  ASSERT_TRUE(ran) << "the first initiator never verified 4 rounds; last: " << last;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  std::printf("first initiator killed (SIGKILL) after 4 verified rounds\n");

  Child second = Spawn(port, target, T.addr(0), 10);
  ASSERT_GT(second.pid, 0);
  const bool done = ReadUntil(second, "done rounds", &last);
  waitpid(second.pid, &status, 0);
  std::fclose(second.out);
  ASSERT_TRUE(done) << "the restarted initiator did not finish; last: " << last;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
  // First open: one descriptor request; first connect: one REQ, no refusal.
  EXPECT_NE(last.find("verified=10 reqs=1 refusals=0 desc_reqs=1"), std::string::npos) << last;
  EXPECT_EQ(Shutdown(T, 10'000'000'000), "");
}

}  // namespace
}  // namespace ferry::probe
