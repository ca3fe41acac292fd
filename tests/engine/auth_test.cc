// tests/engine/auth_test.cc: the auth codec and AuthNet (engine/auth/) over
// an in-memory network that the test steps by hand, so each message can be
// dropped, replayed, truncated, reordered or forged at will.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/auth/auth_net.h"
#include "engine/auth/auth_wire.h"
#include "engine/auth/hmac_sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::engine::auth {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef-shared";

// Messages in flight between named endpoints; the test delivers them.
struct Wire {
  struct Item {
    std::string to;
    hal::Message msg;
  };
  std::deque<Item> in_flight;
};

class FakeNet final : public hal::ControlNet {
 public:
  FakeNet(Wire* wire, std::string addr) : wire_(wire), addr_(std::move(addr)) {}
  std::string LocalAddress() const override { return addr_; }
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override {
    hal::Message m;
    m.from = addr_;
    m.source_host = addr_.substr(0, addr_.rfind(':'));
    m.bytes.assign(bytes.begin(), bytes.end());
    wire_->in_flight.push_back({std::string(peer), std::move(m)});
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t) override {
    if (inbox.empty()) return std::optional<hal::Message>();
    hal::Message m = std::move(inbox.front());
    inbox.pop_front();
    return std::optional<hal::Message>(std::move(m));
  }
  std::deque<hal::Message> inbox;

 private:
  Wire* wire_;
  std::string addr_;
};

class CountingEntropy final : public hal::Entropy {
 public:
  explicit CountingEntropy(uint64_t seed) : x_(seed) {}
  uint64_t Next64() override {  // splitmix64: distinct, deterministic draws
    uint64_t z = (x_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t x_;
};

AuthConfig Shared(std::string identity, std::string secret = kSecret) {
  AuthConfig a;
  a.mode = AuthConfig::Mode::kSharedSecret;
  a.identity = std::move(identity);
  a.secret = std::move(secret);
  return a;
}

struct Side {
  Side(Wire* wire, std::string addr, const AuthConfig& cfg, uint64_t seed,
       const base::Mutations* m = nullptr)
      : net(wire, std::move(addr)), entropy(seed), auth(&net, cfg, &entropy, m) {}
  FakeNet net;
  CountingEntropy entropy;
  AuthNet auth;
  std::vector<hal::Message> got;
  void Drain() {
    for (int i = 0; i < 1024; ++i) {
      auto m = auth.Poll(0);
      if (!m.ok() || !m->has_value()) return;
      got.push_back(std::move(**m));
    }
  }
};

class AuthNetTest : public ::testing::Test {
 protected:
  std::map<std::string, Side*> sides_;
  Wire wire_;
  std::vector<Wire::Item> seen_;  // every message that crossed, in order

  void Add(Side* s) { sides_[s->net.LocalAddress()] = s; }
  // Delivers everything in flight (and what that causes) until quiet.
  void Pump() {
    for (int round = 0; round < 32 && !wire_.in_flight.empty(); ++round) {
      while (!wire_.in_flight.empty()) {
        Wire::Item it = std::move(wire_.in_flight.front());
        wire_.in_flight.pop_front();
        seen_.push_back(it);
        if (auto s = sides_.find(it.to); s != sides_.end()) s->second->net.inbox.push_back(it.msg);
      }
      for (auto& [a, s] : sides_) s->Drain();
    }
  }
  std::vector<AuthMessage> Seen(AuthType t) {
    std::vector<AuthMessage> out;
    for (const auto& it : seen_)
      if (auto d = DecodeAuth(it.msg.bytes); d.ok() && d->type == t) out.push_back(*d);
    return out;
  }
  const Wire::Item* SeenItem(AuthType t) {
    for (const auto& it : seen_)
      if (auto d = DecodeAuth(it.msg.bytes); d.ok() && d->type == t) return &it;
    return nullptr;
  }
  // Re-injects a copy of `item` into its receiver, as an eavesdropper can.
  void Replay(const Wire::Item& item) {
    sides_.at(item.to)->net.inbox.push_back(item.msg);
    sides_.at(item.to)->Drain();
  }
};

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

// ------------------------------------------------------------ codec
TEST(AuthWire, EveryTypeRoundTripsAndEveryPrefixIsRejected) {
  std::vector<AuthMessage> ms(5);
  ms[0].type = AuthType::kHello;
  ms[0].identity = "node-a";
  ms[0].client_nonce.fill(1);
  ms[1].type = AuthType::kChallenge;
  ms[1].session = 9;
  ms[1].identity = "node-b";
  ms[1].server_nonce.fill(2);
  ms[1].proof.fill(3);
  ms[2].type = AuthType::kProof;
  ms[2].session = 9;
  ms[2].proof.fill(4);
  ms[3].type = AuthType::kData;
  ms[3].session = 9;
  ms[3].seq = 3;
  ms[3].payload = Bytes("hello");
  ms[3].tag.fill(5);
  ms[4].type = AuthType::kUnknown;
  ms[4].session = 9;
  for (const AuthMessage& m : ms) {
    auto b = EncodeAuth(m);
    ASSERT_TRUE(b.ok()) << AuthTypeName(m.type);
    auto d = DecodeAuth(*b);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, m);
    for (size_t n = 0; n < b->size(); ++n)  // truncated anywhere: refused, said why
      EXPECT_THAT(DecodeAuth(absl::MakeConstSpan(b->data(), n)).status().message(),
                  ::testing::HasSubstr("auth message rejected"))
          << AuthTypeName(m.type) << " cut at " << n;
    std::vector<uint8_t> longer = *b;
    longer.push_back(0);
    EXPECT_THAT(DecodeAuth(longer).status().message(), ::testing::HasSubstr("trailing bytes"));
  }
}

TEST(AuthWire, InvalidFieldsAreRefused) {
  AuthMessage m;
  m.type = AuthType::kData;
  m.session = 0;
  m.seq = 1;
  EXPECT_THAT(EncodeAuth(m).status().message(), ::testing::HasSubstr("session 0"));
  m.session = 1;
  m.seq = 0;
  EXPECT_THAT(EncodeAuth(m).status().message(), ::testing::HasSubstr("seq 0"));
  AuthMessage h;
  h.type = AuthType::kHello;
  h.identity = "has space";
  EXPECT_THAT(EncodeAuth(h).status().message(), ::testing::HasSubstr("identity"));
  // A DATA announcing more payload than the bound: refused before any
  // allocation from the announced length.
  m.seq = 1;
  auto b = *EncodeAuth(m);
  b[4 + 2 + 1 + 8 + 8 + 3] = 0x7f;  // length's top byte
  EXPECT_FALSE(DecodeAuth(b).ok());
}

TEST(AuthWire, TagsUseHmacSha256) {
  // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
  const Tag t = HmacSha256(Bytes("Jefe"), Bytes("what do ya want for nothing?"));
  const uint8_t want[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                          0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                          0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_TRUE(std::equal(t.begin(), t.end(), std::begin(want)));
}

// ------------------------------------------------------------ AuthNet
TEST_F(AuthNetTest, MutualSessionCarriesMessagesBothWays) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("ping")).ok());
  Pump();
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].bytes, Bytes("ping"));
  EXPECT_EQ(b.got[0].identity, "node-a");
  EXPECT_EQ(b.got[0].from, "a:1");
  ASSERT_TRUE(b.auth.Send("a:1", Bytes("pong")).ok());
  Pump();
  ASSERT_EQ(a.got.size(), 1u);
  EXPECT_EQ(a.got[0].identity, "node-b");
  // The order of the exchange: HELLO, CHALLENGE, PROOF, then DATA.
  ASSERT_GE(seen_.size(), 4u);
  std::vector<AuthType> order;
  for (size_t i = 0; i < 4; ++i) order.push_back(DecodeAuth(seen_[i].msg.bytes)->type);
  EXPECT_THAT(order, ::testing::ElementsAre(AuthType::kHello, AuthType::kChallenge,
                                            AuthType::kProof, AuthType::kData));
  EXPECT_EQ(a.auth.stats().sessions_established, 1u);
  EXPECT_EQ(b.auth.stats().sessions_established, 1u);
}

TEST_F(AuthNetTest, WrongSecretOpensNothingEitherWay) {
  Side a(&wire_, "a:1", Shared("node-a", std::string(40, 'x')), 1);
  Side b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("ping")).ok());
  Pump();
  EXPECT_TRUE(b.got.empty());
  EXPECT_EQ(a.auth.stats().dropped_bad_proof, 1u);  // the client refused the server proof
  EXPECT_TRUE(Seen(AuthType::kProof).empty());      // and sent no proof of its own
  EXPECT_EQ(a.auth.stats().sessions_established + b.auth.stats().sessions_established, 0u);
}

TEST_F(AuthNetTest, PlainMessagesAreDroppedWhileAuthIsOn) {
  Side b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&b);
  hal::Message m;
  m.from = "a:1";
  m.bytes = Bytes("FDSC plain");
  b.net.inbox.push_back(m);
  b.Drain();
  EXPECT_TRUE(b.got.empty());
  EXPECT_EQ(b.auth.stats().dropped_unauthenticated, 1u);
}

TEST_F(AuthNetTest, ReplayedMessagesAreRefusedAtEveryStep) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("one")).ok());
  Pump();
  ASSERT_EQ(b.got.size(), 1u);
  Replay(*SeenItem(AuthType::kData));  // DATA again: same seq
  EXPECT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.auth.stats().dropped_replayed, 1u);
  Replay(*SeenItem(AuthType::kProof));  // PROOF again: its challenge is answered
  EXPECT_EQ(b.auth.stats().dropped_stale, 1u);
  Replay(*SeenItem(AuthType::kChallenge));  // CHALLENGE again: no HELLO outstanding
  EXPECT_EQ(a.auth.stats().dropped_stale, 1u);
  EXPECT_EQ(b.auth.stats().sessions_established, 1u);
  EXPECT_EQ(a.auth.stats().sessions_established, 1u);
}

TEST_F(AuthNetTest, ReplayWindowAcceptsReorderedButNotOld) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("m0")).ok());
  Pump();
  // 70 more, delivered last-first: within the window each is new once.
  for (int i = 1; i <= 70; ++i) ASSERT_TRUE(a.auth.Send("b:1", Bytes("m")).ok());
  std::vector<Wire::Item> items(wire_.in_flight.begin(), wire_.in_flight.end());
  wire_.in_flight.clear();
  for (auto it = items.rbegin(); it != items.rend(); ++it) b.net.inbox.push_back(it->msg);
  b.Drain();
  // seq 71 first, then 70..2: 71-64 = 7, so seqs 2..7 fall out of the window.
  EXPECT_EQ(b.got.size(), 1u + 64u);
  EXPECT_EQ(b.auth.stats().dropped_replayed, 6u);
}

TEST_F(AuthNetTest, TamperedOrTruncatedDataIsRefused) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("one")).ok());
  Pump();
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("two")).ok());
  // In flight: the PROOF again (b has not answered yet, so a's session is
  // unconfirmed) and the DATA.
  ASSERT_EQ(wire_.in_flight.size(), 2u);
  EXPECT_EQ(DecodeAuth(wire_.in_flight[0].msg.bytes)->type, AuthType::kProof);
  Wire::Item item = wire_.in_flight[1];
  wire_.in_flight.clear();
  Wire::Item flipped = item;
  flipped.msg.bytes[4 + 2 + 1 + 8 + 8 + 4] ^= 1;  // first payload byte
  Replay(flipped);
  EXPECT_EQ(b.auth.stats().dropped_bad_tag, 1u);
  Wire::Item cut = item;
  cut.msg.bytes.resize(cut.msg.bytes.size() - 1);
  Replay(cut);
  EXPECT_EQ(b.auth.stats().dropped_malformed, 1u);
  Wire::Item other = item;  // the right bytes, claimed by another sender
  other.msg.from = "evil:1";
  Replay(other);
  EXPECT_EQ(b.auth.stats().dropped_wrong_sender, 1u);
  EXPECT_EQ(b.got.size(), 1u);
  Replay(item);  // the real one still goes through, once
  EXPECT_EQ(b.got.size(), 2u);
}

TEST_F(AuthNetTest, DataOvertakingItsProofIsHeldThenJudged) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("early")).ok());
  // HELLO to b, CHALLENGE back to a.
  for (int i = 0; i < 2; ++i) {
    Wire::Item it = wire_.in_flight.front();
    wire_.in_flight.pop_front();
    sides_.at(it.to)->net.inbox.push_back(it.msg);
    sides_.at(it.to)->Drain();
  }
  // a sent PROOF then DATA: deliver DATA first.
  ASSERT_EQ(wire_.in_flight.size(), 2u);
  Wire::Item proof = wire_.in_flight[0], data = wire_.in_flight[1];
  wire_.in_flight.clear();
  Replay(data);
  EXPECT_TRUE(b.got.empty());
  Replay(proof);
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].bytes, Bytes("early"));
}

TEST_F(AuthNetTest, ALostProofIsResentUntilTheServerAnswers) {
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("one")).ok());
  for (int i = 0; i < 2; ++i) {  // HELLO, CHALLENGE
    Wire::Item it = wire_.in_flight.front();
    wire_.in_flight.pop_front();
    sides_.at(it.to)->net.inbox.push_back(it.msg);
    sides_.at(it.to)->Drain();
  }
  wire_.in_flight.pop_front();  // the PROOF is lost
  Pump();                       // the DATA waits at b for its PROOF
  EXPECT_TRUE(b.got.empty());
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("two")).ok());  // PROOF again, then DATA
  Pump();
  ASSERT_EQ(b.got.size(), 2u);
  EXPECT_EQ(b.got[0].bytes, Bytes("one"));
  ASSERT_TRUE(b.auth.Send("a:1", Bytes("ack")).ok());  // confirms a's session
  Pump();
  const size_t proofs = Seen(AuthType::kProof).size();
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("three")).ok());
  Pump();
  EXPECT_EQ(Seen(AuthType::kProof).size(), proofs);  // no PROOF once confirmed
  EXPECT_EQ(b.got.size(), 3u);
}

TEST_F(AuthNetTest, ProofBeforeAnyChallengeIsStale) {
  Side b(&wire_, "b:1", Shared("node-b"), 2);
  Add(&b);
  AuthMessage p;
  p.type = AuthType::kProof;
  p.session = 1234;
  hal::Message m;
  m.from = "a:1";
  m.bytes = *EncodeAuth(p);
  b.net.inbox.push_back(m);
  b.Drain();
  EXPECT_EQ(b.auth.stats().dropped_stale, 1u);
  EXPECT_EQ(b.auth.stats().sessions_established, 0u);
}

TEST_F(AuthNetTest, PeerRestartReauthenticatesAndResends) {
  Side a(&wire_, "a:1", Shared("node-a"), 1);
  auto b = std::make_unique<Side>(&wire_, "b:1", Shared("node-b"), 2);
  Add(&a);
  Add(b.get());
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("before")).ok());
  Pump();
  ASSERT_EQ(b->got.size(), 1u);
  b = std::make_unique<Side>(&wire_, "b:1", Shared("node-b"), 3);  // a new process
  Add(b.get());
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("after")).ok());
  Pump();
  // The new b answered UNKNOWN; a authenticated again and resent what it
  // had sent on the lost session (a duplicate the engine tolerates).
  EXPECT_EQ(b->auth.stats().dropped_unknown_session, 1u);
  ASSERT_FALSE(b->got.empty());
  EXPECT_EQ(b->got.back().bytes, Bytes("after"));
  EXPECT_EQ(a.auth.stats().sessions_established, 2u);
}

TEST_F(AuthNetTest, PerPeerSecretsBindTheIdentity) {
  AuthConfig bc;
  bc.mode = AuthConfig::Mode::kSharedSecret;
  bc.identity = "node-b";
  bc.peer_secrets = {{"node-a", std::string(40, 'a')}};
  AuthConfig ac = Shared("node-a", std::string(40, 'a'));
  AuthConfig mallory = Shared("node-m", std::string(40, 'a'));  // a's key, own name
  Side a(&wire_, "a:1", ac, 1), b(&wire_, "b:1", bc, 2), m(&wire_, "m:1", mallory, 4);
  Add(&a);
  Add(&b);
  Add(&m);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("x")).ok());
  ASSERT_TRUE(m.auth.Send("b:1", Bytes("y")).ok());
  Pump();
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].identity, "node-a");
  EXPECT_EQ(b.auth.stats().dropped_unknown_identity, 1u);  // node-m has no key at b
}

TEST_F(AuthNetTest, AllowlistChecksTheTransportSourceInEveryMode) {
  AuthConfig off;
  off.allowlist = {"a"};
  Side b(&wire_, "b:1", off, 2);
  Add(&b);
  hal::Message ok, bad;
  ok.from = "a:1";
  ok.source_host = "a";
  ok.bytes = Bytes("fine");
  bad.from = "a:1";          // claims a's address...
  bad.source_host = "evil";  // ...from another host
  bad.bytes = Bytes("nope");
  b.net.inbox.push_back(bad);
  b.net.inbox.push_back(ok);
  b.Drain();
  ASSERT_EQ(b.got.size(), 1u);
  EXPECT_EQ(b.got[0].bytes, Bytes("fine"));
  EXPECT_EQ(b.auth.stats().dropped_allowlist, 1u);
}

TEST_F(AuthNetTest, BoundedQueuesDropOldestAndCount) {
  AuthConfig cfg = Shared("node-a");
  cfg.pending_max = 4;
  Side a(&wire_, "a:1", cfg, 1);
  Add(&a);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a.auth.Send("nobody:1", Bytes("q")).ok());
  EXPECT_EQ(a.auth.stats().dropped_queue_full, 6u);
}

// The mutations of the two protocol guards, shown by these unit tests too.
TEST_F(AuthNetTest, MutationNoReplayWindowDeliversAReplay) {
  base::Mutations mut;
  mut.Enable(base::Mutation::kEngineAuthNoReplayWindow);
  Side a(&wire_, "a:1", Shared("node-a"), 1), b(&wire_, "b:1", Shared("node-b"), 2, &mut);
  Add(&a);
  Add(&b);
  ASSERT_TRUE(a.auth.Send("b:1", Bytes("one")).ok());
  Pump();
  Replay(*SeenItem(AuthType::kData));
  EXPECT_EQ(b.got.size(), 2u);
}

TEST_F(AuthNetTest, MutationAcceptBadProofOpensASession) {
  base::Mutations mut;
  mut.Enable(base::Mutation::kEngineAuthAcceptBadProof);
  Side b(&wire_, "b:1", Shared("node-b"), 2, &mut);
  Add(&b);
  AuthMessage h;
  h.type = AuthType::kHello;
  h.identity = "node-x";
  hal::Message m;
  m.from = "x:1";
  m.bytes = *EncodeAuth(h);
  b.net.inbox.push_back(m);
  b.Drain();
  ASSERT_EQ(wire_.in_flight.size(), 1u);
  const uint64_t sid = DecodeAuth(wire_.in_flight.front().msg.bytes)->session;
  AuthMessage p;
  p.type = AuthType::kProof;
  p.session = sid;  // proof bytes all zero: no key behind them
  m.bytes = *EncodeAuth(p);
  b.net.inbox.push_back(m);
  b.Drain();
  EXPECT_EQ(b.auth.stats().sessions_established, 1u);
}

}  // namespace
}  // namespace ferry::engine::auth
