// tests/hal/tcp_control_net_test.cc: TCP ControlNet over loopback.
//
// Covers: address parsing, round trip both ways (the reply goes to `from`),
// oversize rejected on send, an oversize frame announced by a raw socket
// dropped without delivery or allocation, malformed frames, connect refused
// and connect timeout, a stalled partial frame dropped after the read
// timeout, a peer closing mid-frame, a peer that closed and one that
// restarted on the same port, and the inbound connection bound.
#include "hal/tcp/tcp_control_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::hal {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMs = 1'000'000;
// How long a test waits for something that must happen. Only a failing
// test waits this long; none asserts an upper bound on elapsed wall time
// (a loaded CI machine must not fail a test; timing is for benchmarks).
constexpr uint64_t kWaitBudgetNs = 10'000 * kMs;
constexpr int kWaitBudgetMs = 10'000;

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

std::unique_ptr<TcpControlNet> Make(const TcpControlNetOptions& opt = {}) {
  auto net = TcpControlNet::Create("127.0.0.1:0", opt);
  EXPECT_TRUE(net.ok()) << net.status();
  return std::move(*net);
}

uint16_t PortOf(const std::string& addr) {
  auto hp = ParseHostPort(addr);
  EXPECT_TRUE(hp.ok()) << hp.status();
  return hp->port;
}

// Polls until a message arrives or `budget_ns` passes.
std::optional<Message> PollFor(ControlNet& net, uint64_t budget_ns) {
  auto m = net.Poll(budget_ns);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : std::nullopt;
}

// A raw client socket connected to 127.0.0.1:port.
int RawConnect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0) << strerror(errno);
  return fd;
}

void WriteAll(int fd, const std::vector<uint8_t>& b) {
  ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
}

std::vector<uint8_t> Frame(uint32_t len_field, std::string_view from, std::string_view payload,
                           uint8_t version = kTcpFrameVersion) {
  std::vector<uint8_t> f = {static_cast<uint8_t>(len_field >> 24),
                            static_cast<uint8_t>(len_field >> 16),
                            static_cast<uint8_t>(len_field >> 8),
                            static_cast<uint8_t>(len_field),
                            version,
                            static_cast<uint8_t>(from.size())};
  f.insert(f.end(), from.begin(), from.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

std::vector<uint8_t> GoodFrame(std::string_view from, std::string_view payload) {
  return Frame(static_cast<uint32_t>(2 + from.size() + payload.size()), from, payload);
}

// True when the server closed `fd` within `budget_ms` (EOF or reset).
bool ClosedByServer(int fd, int budget_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, budget_ms) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

TEST(HostPortTest, ParsesAndFormats) {
  auto a = ParseHostPort("127.0.0.1:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 80);
  auto b = ParseHostPort("[::1]:65535");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 65535);
  EXPECT_EQ(FormatHostPort("::1", 7), "[::1]:7");
  EXPECT_EQ(FormatHostPort("node-1", 0), "node-1:0");
}

TEST(HostPortTest, RejectsMalformed) {
  for (const char* bad : {"", "nocolon", "host:", ":80", "host:65536", "host:8x", "host:-1",
                          "::1:80", "[::1]80", "[::1:80", "a b:1", "host:123456"}) {
    auto r = ParseHostPort(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("malformed address")) << bad;
  }
  EXPECT_EQ(ParseHostPort(std::string(300, 'a') + ":1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpControlNetTest, CreateRejectsBadInput) {
  EXPECT_EQ(TcpControlNet::Create("localhost").status().code(), absl::StatusCode::kInvalidArgument);
  TcpControlNetOptions opt;
  opt.read_timeout_ns = 0;
  EXPECT_EQ(TcpControlNet::Create("127.0.0.1:0", opt).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpControlNetTest, EphemeralPortIsReported) {
  auto net = Make();
  EXPECT_NE(PortOf(net->LocalAddress()), 0);
  EXPECT_THAT(net->LocalAddress(), testing::StartsWith("127.0.0.1:"));
  // The port is really bound: a second listener on it fails.
  auto dup = TcpControlNet::Create(net->LocalAddress());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists) << dup.status();
}

TEST(TcpControlNetTest, RoundTripBothWaysReplyToFrom) {
  auto a = Make();
  auto b = Make();
  ASSERT_TRUE(a->Send(b->LocalAddress(), Bytes("ping")).ok());
  auto got = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->bytes, Bytes("ping"));
  EXPECT_EQ(got->from, a->LocalAddress());
  // The reply goes to whatever `from` says.
  ASSERT_TRUE(b->Send(got->from, Bytes("pong")).ok());
  auto reply = PollFor(*a, kWaitBudgetNs);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->bytes, Bytes("pong"));
  EXPECT_EQ(reply->from, b->LocalAddress());
  // Nothing else is pending.
  EXPECT_FALSE(PollFor(*a, 0).has_value());
  EXPECT_FALSE(PollFor(*b, 0).has_value());
}

TEST(TcpControlNetTest, ManyMessagesInOrderOnOneConnectionAndEdgeSizes) {
  auto a = Make();
  auto b = Make();
  std::vector<uint8_t> max(kMaxMessageBytes);
  for (size_t i = 0; i < max.size(); ++i) max[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(a->Send(b->LocalAddress(), {}).ok());
  ASSERT_TRUE(a->Send(b->LocalAddress(), max).ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(a->Send(b->LocalAddress(), Bytes(std::to_string(i))).ok());
  }
  auto empty = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->bytes.empty());
  auto big = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->bytes, max);
  for (int i = 0; i < 50; ++i) {
    auto m = PollFor(*b, kWaitBudgetNs);
    ASSERT_TRUE(m.has_value()) << i;
    EXPECT_EQ(m->bytes, Bytes(std::to_string(i)));
  }
  EXPECT_EQ(b->stats().messages_received, 52u);
  EXPECT_EQ(a->stats().outbound_open, 1u);
}

TEST(TcpControlNetTest, OversizeRejectedOnSend) {
  auto a = Make();
  auto b = Make();
  std::vector<uint8_t> big(kMaxMessageBytes + 1);
  absl::Status s = a->Send(b->LocalAddress(), big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exceeds kMaxMessageBytes"));
  EXPECT_EQ(a->stats().outbound_open, 0u);  // rejected before connecting
  EXPECT_FALSE(PollFor(*b, 50 * kMs).has_value());
}

TEST(TcpControlNetTest, MalformedPeerAddressRejectedOnSend) {
  auto a = Make();
  for (const char* bad : {"nope", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:0"}) {
    EXPECT_EQ(a->Send(bad, Bytes("x")).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(TcpControlNetTest, OversizeAnnouncedFrameDropsConnection) {
  auto b = Make();
  const int fd = RawConnect(PortOf(b->LocalAddress()));
  // A 4 GiB announcement: must be dropped at once, never allocated.
  WriteAll(fd, {0xff, 0xff, 0xff, 0xff, 1, 2, 'x', 'y'});
  EXPECT_FALSE(PollFor(*b, 200 * kMs).has_value());
  EXPECT_TRUE(ClosedByServer(fd, kWaitBudgetMs));
  auto st = b->stats();
  EXPECT_EQ(st.inbound_dropped_oversize, 1u);
  EXPECT_EQ(st.inbound_open, 0u);
  EXPECT_EQ(st.messages_received, 0u);
  close(fd);
  // Just above the limit is dropped too, even with a valid header.
  const int fd2 = RawConnect(PortOf(b->LocalAddress()));
  WriteAll(fd2, Frame(static_cast<uint32_t>(kTcpMaxFrameBytes + 1), "127.0.0.1:1", "x"));
  EXPECT_FALSE(PollFor(*b, 200 * kMs).has_value());
  EXPECT_TRUE(ClosedByServer(fd2, kWaitBudgetMs));
  EXPECT_EQ(b->stats().inbound_dropped_oversize, 2u);
  close(fd2);
}

TEST(TcpControlNetTest, MalformedFramesDropConnection) {
  auto b = Make();
  const uint16_t port = PortOf(b->LocalAddress());
  const std::vector<std::vector<uint8_t>> bad = {
      Frame(13, "127.0.0.1:1", "", /*version=*/9),         // unknown version
      Frame(2, "", ""),                                    // shorter than any header
      {0, 0, 0, 5, kTcpFrameVersion, 200, 'a', 'a', 'a'},  // address beyond the frame
      GoodFrame("not-an-address", "x"),
      GoodFrame("127.0.0.1:0", "x"),
  };
  uint64_t expect_dropped = 0;
  for (size_t i = 0; i < bad.size(); ++i) {
    const int fd = RawConnect(port);
    const std::vector<uint8_t>& f = bad[i];
    WriteAll(fd, f);
    EXPECT_FALSE(PollFor(*b, 100 * kMs).has_value()) << i;
    EXPECT_TRUE(ClosedByServer(fd, kWaitBudgetMs)) << i;
    ++expect_dropped;
    EXPECT_EQ(b->stats().inbound_dropped_malformed, expect_dropped) << i;
    close(fd);
  }
  EXPECT_EQ(b->stats().messages_received, 0u);
}

TEST(TcpControlNetTest, RawFrameDeliveredAndWildcardSenderSubstituted) {
  auto b = Make();
  const int fd = RawConnect(PortOf(b->LocalAddress()));
  // Two frames in one write, the second split across writes.
  std::vector<uint8_t> two = GoodFrame("10.0.0.9:4000", "one");
  std::vector<uint8_t> second = GoodFrame("0.0.0.0:4001", "two");
  two.insert(two.end(), second.begin(), second.begin() + 5);
  WriteAll(fd, two);
  auto m1 = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(m1.has_value());
  EXPECT_EQ(m1->from, "10.0.0.9:4000");
  EXPECT_EQ(m1->bytes, Bytes("one"));
  EXPECT_FALSE(PollFor(*b, 20 * kMs).has_value());
  WriteAll(fd, std::vector<uint8_t>(second.begin() + 5, second.end()));
  auto m2 = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(m2.has_value());
  EXPECT_EQ(m2->from, "127.0.0.1:4001");  // wildcard host -> source address
  EXPECT_EQ(m2->bytes, Bytes("two"));
  close(fd);
}

TEST(TcpControlNetTest, ConnectRefusedOnClosedPort) {
  // Find a port nothing listens on: bind, read the port, close.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  socklen_t len = sizeof(sin);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&sin), &len), 0);
  const uint16_t port = ntohs(sin.sin_port);
  close(probe);

  auto a = Make();
  absl::Status s = a->Send("127.0.0.1:" + std::to_string(port), Bytes("x"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("ECONNREFUSED"));
  EXPECT_EQ(a->stats().outbound_open, 0u);
}

TEST(TcpControlNetTest, ConnectTimeoutWhenListenerNeverAnswers) {
  // A listener with backlog 0 that never accepts: once its queue is full the
  // kernel drops further SYNs, so a connect neither succeeds nor fails.
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  ASSERT_EQ(listen(lfd, 0), 0);
  socklen_t len = sizeof(sin);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&sin), &len), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    (void)connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    fillers.push_back(fd);
  }
  TcpControlNetOptions opt;
  opt.connect_timeout_ns = 200 * kMs;
  auto a = Make(opt);
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = a->Send("127.0.0.1:" + std::to_string(ntohs(sin.sin_port)), Bytes("x"));
  const auto elapsed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
  // A lower bound only: the timeout is honoured; how much later a loaded
  // machine returns is not this test's business (benchmarks measure time).
  EXPECT_GE(elapsed_ms, 190);
  for (int fd : fillers) close(fd);
  close(lfd);
}

TEST(TcpControlNetTest, StalledPartialFrameDroppedAfterReadTimeout) {
  TcpControlNetOptions opt;
  opt.read_timeout_ns = 150 * kMs;
  auto b = Make(opt);
  auto a = Make();
  const int fd = RawConnect(PortOf(b->LocalAddress()));
  std::vector<uint8_t> f = GoodFrame("127.0.0.1:9", "hello");
  WriteAll(fd, std::vector<uint8_t>(f.begin(), f.begin() + 8));  // then stall
  const auto t0 = std::chrono::steady_clock::now();
  // Poll in short slices, as a runtime would; the stall is still detected.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(PollFor(*b, 30 * kMs).has_value());
  const auto elapsed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_GE(elapsed_ms, 150);
  EXPECT_EQ(b->stats().inbound_dropped_stalled, 1u);
  EXPECT_TRUE(ClosedByServer(fd, kWaitBudgetMs));
  // The rest of the frame arriving late is not delivered.
  (void)::send(fd, f.data() + 8, f.size() - 8, MSG_NOSIGNAL);
  // Meanwhile the listener still serves others.
  ASSERT_TRUE(a->Send(b->LocalAddress(), Bytes("alive")).ok());
  auto m = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, Bytes("alive"));
  EXPECT_EQ(b->stats().messages_received, 1u);
  close(fd);
}

TEST(TcpControlNetTest, SlowPeerDoesNotBlockListener) {
  TcpControlNetOptions opt;
  opt.read_timeout_ns = 5000 * kMs;
  auto b = Make(opt);
  auto a = Make();
  const int fd = RawConnect(PortOf(b->LocalAddress()));
  std::vector<uint8_t> f = GoodFrame("127.0.0.1:9", "slow");
  WriteAll(fd, std::vector<uint8_t>(f.begin(), f.begin() + 3));
  ASSERT_TRUE(a->Send(b->LocalAddress(), Bytes("fast")).ok());
  auto m = PollFor(*b, 10'000 * kMs);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, Bytes("fast"));
  // "fast" was delivered while "slow" was still a partial frame, and that
  // frame was not given up on: the listener never waited on the slow peer.
  EXPECT_EQ(b->stats().inbound_dropped_stalled, 0u);
  WriteAll(fd, std::vector<uint8_t>(f.begin() + 3, f.end()));
  auto slow = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->bytes, Bytes("slow"));
  close(fd);
}

TEST(TcpControlNetTest, PeerClosingMidFrameDeliversNothing) {
  auto b = Make();
  const int fd = RawConnect(PortOf(b->LocalAddress()));
  std::vector<uint8_t> f = GoodFrame("127.0.0.1:9", "cut short");
  WriteAll(fd, std::vector<uint8_t>(f.begin(), f.end() - 3));
  close(fd);
  EXPECT_FALSE(PollFor(*b, 200 * kMs).has_value());
  auto st = b->stats();
  EXPECT_EQ(st.inbound_closed_mid_frame, 1u);
  EXPECT_EQ(st.messages_received, 0u);
  EXPECT_EQ(st.inbound_open, 0u);
}

TEST(TcpControlNetTest, PeerClosedThenRestartedOnSamePort) {
  auto a = Make();
  auto b = Make();
  const std::string b_addr = b->LocalAddress();
  ASSERT_TRUE(a->Send(b_addr, Bytes("1")).ok());
  ASSERT_TRUE(PollFor(*b, kWaitBudgetNs).has_value());
  b.reset();  // peer closed: its listener and the accepted connection go away
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  absl::Status s = a->Send(b_addr, Bytes("2"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("ECONNREFUSED"));
  EXPECT_GE(a->stats().outbound_reconnects, 1u);
  EXPECT_EQ(a->stats().outbound_open, 0u);
  // A new incarnation on the same port is reached with a fresh connection.
  auto b2 = TcpControlNet::Create(b_addr);
  ASSERT_TRUE(b2.ok()) << b2.status();
  ASSERT_TRUE(a->Send(b_addr, Bytes("3")).ok());
  auto m = PollFor(**b2, kWaitBudgetNs);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, Bytes("3"));
}

TEST(TcpControlNetTest, InboundConnectionsAreBounded) {
  TcpControlNetOptions opt;
  opt.max_inbound_connections = 2;
  auto b = Make(opt);
  std::vector<std::unique_ptr<TcpControlNet>> senders;
  for (int i = 0; i < 4; ++i) {
    senders.push_back(Make());
    ASSERT_TRUE(senders.back()->Send(b->LocalAddress(), Bytes(std::to_string(i))).ok());
  }
  std::set<std::string> got;
  for (int i = 0; i < 4; ++i) {
    auto m = PollFor(*b, kWaitBudgetNs);
    ASSERT_TRUE(m.has_value()) << i;
    got.insert(std::string(m->bytes.begin(), m->bytes.end()));
    EXPECT_LE(b->stats().inbound_open, 2u);
  }
  // Newcomers waited in the backlog until idle connections could be evicted:
  // every message arrived and the table never exceeded its bound.
  EXPECT_EQ(got, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(b->stats().inbound_evicted_idle, 2u);
  // An evicted sender notices at its next send and reconnects.
  ASSERT_TRUE(senders[0]->Send(b->LocalAddress(), Bytes("again")).ok());
  auto m = PollFor(*b, kWaitBudgetNs);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, Bytes("again"));
  EXPECT_EQ(senders[0]->stats().outbound_reconnects, 1u);
  EXPECT_LE(b->stats().inbound_open, 2u);
}

TEST(TcpControlNetTest, PollZeroDoesNotWaitAndTimeoutIsHonoured) {
  auto b = Make();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(PollFor(*b, 0).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE(PollFor(*b, 100 * kMs).has_value());
  const auto waited = std::chrono::steady_clock::now() - t1;
  EXPECT_GE(waited, std::chrono::milliseconds(95));
  EXPECT_LT(waited, std::chrono::milliseconds(1000));
}

TEST(TcpControlNetTest, SendToSelfAndNonWaitingPolls) {
  auto a = Make();
  ASSERT_TRUE(a->Send(a->LocalAddress(), Bytes("me")).ok());
  // A runtime that only ever polls with timeout 0 still gets the message.
  std::optional<Message> m;
  for (int i = 0; i < 200 && !m.has_value(); ++i) {
    m = PollFor(*a, 0);
    if (!m.has_value()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, Bytes("me"));
  EXPECT_EQ(m->from, a->LocalAddress());
}

TEST(TcpControlNetTest, SendAndPollFromDifferentThreads) {
  auto a = Make();
  auto b = Make();
  constexpr int kCount = 200;
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      ASSERT_TRUE(a->Send(b->LocalAddress(), Bytes(std::to_string(i))).ok());
    }
  });
  int got = 0;
  for (int i = 0; i < kCount * 2 && got < kCount; ++i) {
    auto m = PollFor(*b, kWaitBudgetNs);
    if (m.has_value()) {
      EXPECT_EQ(m->bytes, Bytes(std::to_string(got)));
      ++got;
    }
  }
  sender.join();
  EXPECT_EQ(got, kCount);
}

}  // namespace
}  // namespace ferry::hal
