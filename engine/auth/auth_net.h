// engine/auth/auth_net.h: AuthNet, the hal::ControlNet decorator that
// authenticates every control message between engines (docs/security.md).
//
// The engine wraps its control network in one AuthNet (EngineImpl), so the
// listener and the owners speak through it unchanged, on TCP and on the
// simulated network alike (LevelDB's EnvWrapper pattern for the ControlNet
// port). With AuthConfig::Mode::kOff it only applies the allowlist.
//
// Protocol (kSharedSecret; wire format in auth_wire.h). K is the key of the
// identity a side claims (AuthConfig::peer_secrets, else the shared secret):
//   client -> server  HELLO     Nc, client identity
//   server -> client  CHALLENGE Nc, Ns, session, server identity,
//                               HMAC(K, "S" | T)
//   client -> server  PROOF     session, HMAC(K, "C" | T)
// with T = "ferry-auth-v1" | Nc | Ns | session | client id | server id and
// Nc, Ns fresh 32-byte nonces from each side's hal::Entropy. Both sides then
// hold the session key SK = HMAC(K, "K" | T); each control message travels
// as DATA {session, seq, payload, HMAC(SK, dir | session | seq | payload)}.
// A payload sent before a session exists waits (bounded) for it. Until the
// server's first DATA confirms a session, the client resends its PROOF
// before each DATA (datagrams: the PROOF may be lost).
//
// What must stay true (each is a unit test and a sim scenario):
// - Nothing unauthenticated reaches the engine while kSharedSecret is on:
//   Poll returns only DATA whose tag verified under a session that was
//   opened by a verified proof, from the peer address the session was
//   opened with, with a sequence number not seen before (a 64-wide window
//   per session; older ones are refused). Everything else is dropped and
//   counted in AuthStats, and changes no session.
// - Mutual: a client opens a session only on a CHALLENGE answering the
//   HELLO it has outstanding (nonce equal) whose server proof verifies; a
//   server only on a PROOF for a challenge it issued to that peer.
// - Bounded: at most sessions_max sessions (least recently opened evicted),
//   2 per peer (one per role); at most pending_max outstanding challenges;
//   at most pending_max payloads queued per peer; one Poll reads at most
//   kPollBatchMax inner messages.
// - The allowlist (when non-empty) is checked on Message::source_host, the
//   host the transport saw, before anything is decoded.
//
// Thread safety: Send and Poll may be called from different threads (the
// ControlNet contract). One mutex guards the state; the inner network is
// called with it released.
#ifndef FERRY_ENGINE_AUTH_AUTH_NET_H_
#define FERRY_ENGINE_AUTH_AUTH_NET_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "engine/auth/auth_wire.h"
#include "ferry/config.h"
#include "ferry/types.h"
#include "hal/control_net.h"
#include "hal/entropy.h"

namespace ferry::engine::auth {

inline constexpr size_t kPollBatchMax = 64;
inline constexpr size_t kRecentPayloadsMax = 4;  // resent after an UNKNOWN
inline constexpr size_t kEarlyDataMax = 8;       // DATA held until its PROOF
inline constexpr uint32_t kReplayWindow = 64;

class AuthNet final : public hal::ControlNet {
 public:
  // `inner`, `entropy` and `mutations` (may be null) outlive this object.
  AuthNet(hal::ControlNet* inner, const AuthConfig& config, hal::Entropy* entropy,
          const base::Mutations* mutations);

  std::string LocalAddress() const override { return inner_->LocalAddress(); }
  absl::Status Send(std::string_view peer, absl::Span<const uint8_t> bytes) override;
  absl::StatusOr<std::optional<hal::Message>> Poll(uint64_t timeout_ns) override;

  AuthStats stats() const;
  // This side's identity (AuthConfig::identity, else the control address).
  const std::string& identity() const { return identity_; }
  bool authenticating() const { return config_.mode == AuthConfig::Mode::kSharedSecret; }

 private:
  struct Session {
    std::string peer;      // the peer's control address
    std::string identity;  // the peer's proven identity
    Tag key{};             // SK
    bool client = false;   // we sent the HELLO
    // A client session is unconfirmed until a DATA of the server's
    // verifies on it: until then every DATA is preceded by the PROOF again
    // (a lost PROOF would otherwise leave the server holding our DATA
    // for a session it never opens).
    bool confirmed = false;
    Tag proof{};
    uint64_t send_seq = 0;
    uint64_t recv_high = 0;                   // highest seq received
    uint64_t recv_mask = 0;                   // bit i: seq recv_high - i received
    uint64_t order = 0;                       // when opened (recency)
    std::deque<std::vector<uint8_t>> recent;  // last payloads sent
  };
  struct Hello {  // our outstanding HELLO to one peer
    Nonce nonce{};
    std::deque<std::vector<uint8_t>> queue;  // payloads waiting for the session
  };
  struct Challenge {  // a CHALLENGE we issued
    std::string peer;
    std::string identity;  // the client's claimed identity
    Nonce client_nonce{}, server_nonce{};
    uint64_t order = 0;
    std::deque<hal::Message> early;  // DATA that arrived before the PROOF
  };
  struct Out {  // a message to send once the lock is released
    std::string peer;
    std::vector<uint8_t> bytes;
  };

  bool on(base::Mutation m) const { return mutations_ != nullptr && mutations_->on(m); }
  std::optional<std::string> KeyFor(std::string_view identity) const;
  Nonce NewNonce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NewSessionId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(std::string peer, const AuthMessage& m, std::vector<Out>& out);
  // The id of the most recently opened session with `peer`, 0 if none.
  uint64_t NewestFor(std::string_view peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Open(uint64_t sid, Session s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendData(uint64_t sid, Session& s, std::vector<uint8_t> payload, std::vector<Out>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(const std::string& peer, std::vector<uint8_t> payload, std::vector<Out>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Inbound: each returns the messages to deliver (DATA, possibly held ones).
  void OnMessage(hal::Message msg, std::vector<Out>& out, std::deque<hal::Message>& deliver)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnHello(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnChallenge(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnProof(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out,
               std::deque<hal::Message>& deliver) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnData(hal::Message msg, const AuthMessage& m, std::vector<Out>& out,
              std::deque<hal::Message>& deliver) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnUnknown(const hal::Message& msg, const AuthMessage& m, std::vector<Out>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Verifies a DATA on session `sid` and moves its window; false = dropped.
  bool AcceptData(uint64_t sid, Session& s, const hal::Message& msg, const AuthMessage& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Flush(std::vector<Out>& out);

  hal::ControlNet* const inner_;
  const AuthConfig config_;
  hal::Entropy* const entropy_;
  const base::Mutations* const mutations_;
  const std::string identity_;

  mutable base::Mutex mu_;
  uint64_t order_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);              // by session id
  absl::btree_map<std::string, Hello, std::less<>> hellos_ ABSL_GUARDED_BY(mu_);  // by peer
  absl::btree_map<uint64_t, Challenge> challenges_ ABSL_GUARDED_BY(mu_);          // by session id
  std::deque<hal::Message> ready_ ABSL_GUARDED_BY(mu_);  // verified, not yet returned
  AuthStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry::engine::auth

#endif  // FERRY_ENGINE_AUTH_AUTH_NET_H_
