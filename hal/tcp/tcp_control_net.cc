// hal/tcp/tcp_control_net.cc: TCP ControlNet (see tcp_control_net.h for the
// frame format and the invariants). Every socket here is non-blocking; waits
// happen only in ppoll(2) with a deadline.
#include "hal/tcp/tcp_control_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "hal/errno_status.h"

namespace ferry::hal {
namespace {

// Upper bounds for loops whose natural bound is a deadline.
constexpr uint32_t kMaxPollRounds = 4096;
constexpr uint32_t kMaxAcceptsPerRound = 64;
constexpr uint32_t kMaxWriteRounds = 1u << 16;
constexpr uint32_t kMaxAddressesTried = 8;
constexpr size_t kMinFrameBytes = 2 + 1;  // version, address length, 1 address byte

uint64_t MonotonicNowNs() {
  timespec ts{};
  FERRY_CHECK_EQ(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

timespec ToTimespec(uint64_t ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  return ts;
}

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string port = absl::StrCat(hp.port);
  const int rc = getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    if (rc == EAI_SYSTEM) return ErrnoToStatus(absl::StrCat("getaddrinfo ", hp.host), errno);
    return absl::UnavailableError(
        absl::StrFormat("getaddrinfo %s: cannot resolve: %s", hp.host, gai_strerror(rc)));
  }
  FERRY_CHECK(res != nullptr);
  return AddrInfoPtr(res);
}

bool IsWildcardHost(std::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0";
}

// Numeric address of a connected socket's peer, "" when unknown.
std::string PeerIp(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr) return buf;
  } else if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf)) != nullptr) return buf;
  }
  return "";
}

uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Waits until `fd` is ready for `events` or `deadline_ns` passes. Returns
// true when ready (or in error: the next call on fd reports it).
bool WaitFd(int fd, short events, uint64_t deadline_ns) {
  for (uint32_t round = 0; round < kMaxWriteRounds; ++round) {
    const uint64_t now = MonotonicNowNs();
    if (now >= deadline_ns) return false;
    pollfd pfd{fd, events, 0};
    const timespec ts = ToTimespec(deadline_ns - now);
    const int rc = ppoll(&pfd, 1, &ts, nullptr);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the caller's call report it
  }
  return false;
}

}  // namespace

// ------------------------------------------------------------------ address

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed address \"%s\": %s (want host:port)", address, why));
  };
  if (address.size() > kTcpMaxAddressBytes) return bad("too long");
  HostPort hp;
  std::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return bad("missing ']'");
    if (close + 1 >= address.size() || address[close + 1] != ':') return bad("missing :port");
    hp.host = std::string(address.substr(1, close - 1));
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return bad("missing :port");
    hp.host = std::string(address.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) return bad("IPv6 hosts must be in [brackets]");
    port = address.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("empty host");
  for (char c : hp.host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '[' || c == ']' || c == '\0') {
      return bad("bad character in host");
    }
  }
  if (port.empty() || port.size() > 5) return bad("port must be 0..65535");
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("port must be decimal digits");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) return bad("port must be 0..65535");
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

std::string FormatHostPort(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return absl::StrFormat("[%s]:%d", host, port);
  return absl::StrFormat("%s:%d", host, port);
}

// ------------------------------------------------------------------ state

struct TcpControlNet::Inbound {
  UniqueFd fd;
  std::string peer_ip;          // source address, replaces a wildcard sender host
  std::vector<uint8_t> buf;     // undecoded bytes; <= kTcpMaxFrameBytes + prefix + chunk
  uint64_t frame_start_ns = 0;  // first byte of the incomplete frame; 0 = none
  uint64_t last_active_ns = 0;
};

struct TcpControlNet::Outbound {
  UniqueFd fd;
  uint64_t last_used = 0;  // send_seq_ at last use (LRU eviction)
};

absl::StatusOr<std::unique_ptr<TcpControlNet>> TcpControlNet::Create(
    std::string_view listen_address, const TcpControlNetOptions& options) {
  if (options.max_inbound_connections == 0 || options.max_outbound_connections == 0 ||
      options.max_ready_messages == 0 || options.connect_timeout_ns == 0 ||
      options.io_timeout_ns == 0 || options.read_timeout_ns == 0) {
    return absl::InvalidArgumentError("TcpControlNet: limits and timeouts must be > 0");
  }
  FERRY_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen_address));
  FERRY_ASSIGN_OR_RETURN(AddrInfoPtr ai, Resolve(hp, /*passive=*/true));
  const std::string where = absl::StrFormat(" %s", listen_address);
  UniqueFd fd(
      socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (fd.get() < 0) return ErrnoToStatus(absl::StrCat("socket", where), errno);
  const int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return ErrnoToStatus(absl::StrCat("setsockopt SO_REUSEADDR", where), errno);
  }
  if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    return ErrnoToStatus(absl::StrCat("bind", where), errno);
  }
  if (listen(fd.get(), 128) != 0) return ErrnoToStatus(absl::StrCat("listen", where), errno);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoToStatus(absl::StrCat("getsockname", where), errno);
  }
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  } else {
    return absl::InternalError(absl::StrCat("getsockname", where, ": unexpected family"));
  }
  FERRY_CHECK_NE(port, 0);
  std::string local = FormatHostPort(hp.host, port);
  if (local.size() > kTcpMaxAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("listen address too long: ", local));
  }
  return std::unique_ptr<TcpControlNet>(new TcpControlNet(fd.Release(), std::move(local), options));
}

TcpControlNet::TcpControlNet(int listen_fd, std::string local_address,
                             const TcpControlNetOptions& options)
    : listen_fd_(listen_fd), local_address_(std::move(local_address)), options_(options) {
  FERRY_CHECK_GE(listen_fd_, 0);
}

TcpControlNet::~TcpControlNet() { ::close(listen_fd_); }

TcpControlNetStats TcpControlNet::stats() const {
  TcpControlNetStats s;
  {
    base::MutexLock lock(&stats_mu_);
    s = stats_;
  }
  {
    base::MutexLock lock(&recv_mu_);
    s.inbound_open = static_cast<uint32_t>(inbound_.size());
  }
  {
    base::MutexLock lock(&send_mu_);
    s.outbound_open = static_cast<uint32_t>(outbound_.size());
  }
  return s;
}

// ------------------------------------------------------------------ send

absl::StatusOr<TcpControlNet::Outbound*> TcpControlNet::Connect(std::string_view peer,
                                                                const HostPort& hp) {
  FERRY_ASSIGN_OR_RETURN(AddrInfoPtr ai, Resolve(hp, /*passive=*/false));
  const std::string what = absl::StrFormat("connect to %s", peer);
  const uint64_t deadline = MonotonicNowNs() + options_.connect_timeout_ns;
  absl::Status last = absl::UnavailableError(absl::StrCat(what, ": no address"));
  uint32_t tried = 0;
  for (const addrinfo* a = ai.get(); a != nullptr && tried < kMaxAddressesTried;
       a = a->ai_next, ++tried) {
    UniqueFd fd(
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      last = ErrnoToStatus(absl::StrFormat("socket for %s", peer), errno);
      continue;
    }
    const int one = 1;
    (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int err = 0;
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        if (!WaitFd(fd.get(), POLLOUT, deadline)) {
          last = absl::UnavailableError(
              absl::StrFormat("%s: timed out after %d ms (connect timeout)", what,
                              options_.connect_timeout_ns / 1'000'000));
          break;  // the budget is spent
        }
        socklen_t len = sizeof(err);
        if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err != 0) {
      last = ErrnoToStatus(what, err);
      continue;
    }
    // Evict the least recently used connection when the cache is full.
    if (outbound_.size() >= options_.max_outbound_connections) {
      auto lru = outbound_.begin();
      for (auto it = outbound_.begin(); it != outbound_.end(); ++it) {
        if (it->second->last_used < lru->second->last_used) lru = it;
      }
      outbound_.erase(lru);
    }
    auto conn = std::make_unique<Outbound>();
    conn->fd = std::move(fd);
    Outbound* raw = conn.get();
    outbound_[std::string(peer)] = std::move(conn);
    FERRY_CHECK_LE(outbound_.size(), options_.max_outbound_connections);
    return raw;
  }
  return last;
}

void TcpControlNet::CloseOutbound(const std::string& peer) { outbound_.erase(peer); }

absl::Status TcpControlNet::Send(std::string_view peer, absl::Span<const uint8_t> bytes) {
  if (bytes.size() > kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("send to %s: message of %d bytes exceeds kMaxMessageBytes (%d)", peer,
                        bytes.size(), kMaxMessageBytes));
  }
  FERRY_ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(peer));
  if (hp.port == 0) return absl::InvalidArgumentError(absl::StrFormat("send to %s: port 0", peer));

  // Frame: length, version, address length, address, payload.
  const size_t body = 2 + local_address_.size() + bytes.size();
  FERRY_CHECK_LE(body, kTcpMaxFrameBytes);
  std::vector<uint8_t> frame;
  frame.reserve(kTcpLengthPrefixBytes + body);
  for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<uint8_t>(body >> shift));
  frame.push_back(kTcpFrameVersion);
  frame.push_back(static_cast<uint8_t>(local_address_.size()));
  frame.insert(frame.end(), local_address_.begin(), local_address_.end());
  frame.insert(frame.end(), bytes.begin(), bytes.end());
  FERRY_CHECK_EQ(frame.size(), kTcpLengthPrefixBytes + body);

  const std::string key(peer);
  const std::string what = absl::StrFormat("send to %s", peer);
  base::MutexLock lock(&send_mu_);
  // At most two attempts: a cached connection that the peer closed is
  // replaced once by a fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    Outbound* conn = nullptr;
    bool fresh = false;
    if (auto it = outbound_.find(key); it != outbound_.end()) {
      conn = it->second.get();
      // A peer never writes on our outbound connection: readable means EOF,
      // reset, or a protocol violation; all mean "reconnect".
      char probe;
      const ssize_t n = recv(conn->fd.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        CloseOutbound(key);
        conn = nullptr;
        base::MutexLock stats_lock(&stats_mu_);
        ++stats_.outbound_reconnects;
      }
    }
    if (conn == nullptr) {
      FERRY_ASSIGN_OR_RETURN(conn, Connect(peer, hp));
      fresh = true;
    }
    conn->last_used = ++send_seq_;

    const uint64_t deadline = MonotonicNowNs() + options_.io_timeout_ns;
    size_t off = 0;
    int err = 0;
    bool timed_out = false;
    for (uint32_t round = 0; off < frame.size() && round < kMaxWriteRounds; ++round) {
      const ssize_t n = ::send(conn->fd.get(), frame.data() + off, frame.size() - off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!WaitFd(conn->fd.get(), POLLOUT, deadline)) {
          timed_out = true;
          break;
        }
        continue;
      }
      err = n < 0 ? errno : EPIPE;
      break;
    }
    if (off == frame.size()) {
      base::MutexLock stats_lock(&stats_mu_);
      ++stats_.messages_sent;
      return absl::OkStatus();
    }
    // A partial frame is never delivered: the peer drops it on EOF.
    CloseOutbound(key);
    if (timed_out || err == 0) {
      return absl::UnavailableError(
          absl::StrFormat("%s: timed out after %d ms writing a frame (peer not reading)", what,
                          options_.io_timeout_ns / 1'000'000));
    }
    const bool closed = err == EPIPE || err == ECONNRESET;
    if (fresh || !closed) {
      return ErrnoToStatus(closed ? absl::StrCat(what, " (peer closed)") : what, err);
    }
    base::MutexLock stats_lock(&stats_mu_);
    ++stats_.outbound_reconnects;
  }
  return absl::UnavailableError(absl::StrCat(what, ": peer closed the connection twice"));
}

// ------------------------------------------------------------------ receive

void TcpControlNet::CloseInbound(uint64_t id) { inbound_.erase(id); }

uint64_t TcpControlNet::FindIdleVictim() const {
  uint64_t victim = 0;
  uint64_t victim_active_ns = UINT64_MAX;
  for (const auto& [id, conn] : inbound_) {
    if (!conn->buf.empty()) continue;  // mid-frame or undecoded frames
    int pending = 0;
    if (ioctl(conn->fd.get(), FIONREAD, &pending) != 0 || pending != 0) continue;
    if (conn->last_active_ns < victim_active_ns) {
      victim = id;
      victim_active_ns = conn->last_active_ns;
    }
  }
  return victim;
}

void TcpControlNet::AcceptNew(uint64_t now_ns) {
  for (uint32_t i = 0; i < kMaxAcceptsPerRound; ++i) {
    // At the bound, admit a newcomer only by evicting an idle connection (no
    // bytes buffered here or in the kernel: nothing of it is lost). Without
    // one, newcomers wait in the listen backlog.
    uint64_t victim = 0;
    if (inbound_.size() >= options_.max_inbound_connections) {
      victim = FindIdleVictim();
      if (victim == 0) return;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    UniqueFd fd(
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) return;  // EAGAIN, or a transient error: retried next round
    if (victim != 0) {
      CloseInbound(victim);
      base::MutexLock stats_lock(&stats_mu_);
      ++stats_.inbound_evicted_idle;
    }
    auto conn = std::make_unique<Inbound>();
    conn->fd = std::move(fd);
    conn->peer_ip = PeerIp(ss);
    conn->last_active_ns = now_ns;
    const uint64_t id = next_inbound_id_++;
    Inbound& added = *conn;
    inbound_[id] = std::move(conn);
    FERRY_CHECK_LE(inbound_.size(), options_.max_inbound_connections);
    {
      base::MutexLock stats_lock(&stats_mu_);
      ++stats_.inbound_accepted;
    }
    // A sender usually writes right after connecting: read now rather than
    // one ppoll round later.
    if (!ReadSome(added, now_ns)) CloseInbound(id);
  }
}

bool TcpControlNet::DecodeFrames(Inbound& conn, uint64_t now_ns) {
  size_t off = 0;
  const size_t size = conn.buf.size();
  bool ok = true;
  bool oversize = false;
  // Each frame consumes >= prefix + kMinFrameBytes, so this loop is bounded
  // by size / (prefix + kMinFrameBytes) + 1 iterations.
  while (ready_.size() < options_.max_ready_messages) {
    const size_t avail = size - off;
    if (avail < kTcpLengthPrefixBytes) break;
    const uint8_t* p = conn.buf.data() + off;
    const uint32_t len = LoadBe32(p);
    if (len > kTcpMaxFrameBytes) {
      oversize = true;
      ok = false;
      break;
    }
    if (len < kMinFrameBytes) {
      ok = false;
      break;
    }
    // Check the header as soon as it is here, before waiting for the body.
    if (avail >= kTcpLengthPrefixBytes + 2) {
      const uint8_t version = p[4];
      const uint8_t addr_len = p[5];
      if (version != kTcpFrameVersion || addr_len == 0 || size_t{2} + addr_len > len ||
          len - 2 - addr_len > kMaxMessageBytes) {
        ok = false;
        break;
      }
    }
    if (avail < kTcpLengthPrefixBytes + len) break;
    const uint8_t addr_len = p[5];
    const std::string_view from(reinterpret_cast<const char*>(p + 6), addr_len);
    auto hp = ParseHostPort(from);
    if (!hp.ok() || hp->port == 0) {
      ok = false;
      break;
    }
    Message msg;
    msg.from = IsWildcardHost(hp->host) && !conn.peer_ip.empty()
                   ? FormatHostPort(conn.peer_ip, hp->port)
                   : std::string(from);
    msg.source_host = conn.peer_ip;
    msg.bytes.assign(p + 6 + addr_len, p + kTcpLengthPrefixBytes + len);
    FERRY_CHECK_LE(msg.bytes.size(), kMaxMessageBytes);
    ready_.push_back(std::move(msg));
    off += kTcpLengthPrefixBytes + len;
    base::MutexLock stats_lock(&stats_mu_);
    ++stats_.messages_received;
  }
  if (!ok) {
    base::MutexLock stats_lock(&stats_mu_);
    if (oversize) {
      ++stats_.inbound_dropped_oversize;
    } else {
      ++stats_.inbound_dropped_malformed;
    }
    return false;
  }
  if (off > 0) {
    conn.buf.erase(conn.buf.begin(), conn.buf.begin() + static_cast<ptrdiff_t>(off));
    // What remains began arriving no earlier than the last read.
    conn.frame_start_ns = conn.buf.empty() ? 0 : now_ns;
  }
  return true;
}

bool TcpControlNet::ReadSome(Inbound& conn, uint64_t now_ns) {
  // Never buffer more than one maximal frame plus one chunk.
  if (conn.buf.size() >= kTcpLengthPrefixBytes + kTcpMaxFrameBytes) return true;
  uint8_t chunk[kTcpReadChunkBytes];
  const ssize_t n = recv(conn.fd.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) {
    base::MutexLock stats_lock(&stats_mu_);
    if (conn.buf.empty()) {
      ++stats_.inbound_closed;
    } else {
      ++stats_.inbound_closed_mid_frame;
    }
    return false;
  }
  if (conn.buf.empty()) conn.frame_start_ns = now_ns;
  conn.last_active_ns = now_ns;
  conn.buf.insert(conn.buf.end(), chunk, chunk + n);
  FERRY_CHECK_LE(conn.buf.size(), kTcpLengthPrefixBytes + kTcpMaxFrameBytes + kTcpReadChunkBytes);
  return DecodeFrames(conn, now_ns);
}

absl::StatusOr<std::optional<Message>> TcpControlNet::Poll(uint64_t timeout_ns) {
  base::MutexLock lock(&recv_mu_);
  const uint64_t start = MonotonicNowNs();
  const uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (uint32_t round = 0; round < kMaxPollRounds; ++round) {
    if (!ready_.empty()) {
      Message msg = std::move(ready_.front());
      ready_.pop_front();
      return std::optional<Message>(std::move(msg));
    }
    uint64_t now = MonotonicNowNs();
    // Frames left undecoded while ready_ was full; then stalled peers.
    uint64_t next_stall_ns = UINT64_MAX;
    for (auto it = inbound_.begin(); it != inbound_.end();) {
      Inbound& conn = *it->second;
      bool keep = conn.buf.empty() || DecodeFrames(conn, now);
      if (keep && conn.frame_start_ns != 0) {
        const uint64_t stall_at = conn.frame_start_ns + options_.read_timeout_ns;
        if (now >= stall_at) {
          keep = false;
          base::MutexLock stats_lock(&stats_mu_);
          ++stats_.inbound_dropped_stalled;
        } else {
          next_stall_ns = std::min(next_stall_ns, stall_at);
        }
      }
      it = keep ? std::next(it) : inbound_.erase(it);
    }
    if (!ready_.empty()) continue;
    if (round > 0 && now >= deadline) break;

    fds.clear();
    ids.clear();
    // At the connection bound, watch the listener only if a newcomer can
    // be admitted; else the backlog would wake ppoll in a busy loop.
    const bool can_accept =
        inbound_.size() < options_.max_inbound_connections || FindIdleVictim() != 0;
    fds.push_back(pollfd{listen_fd_, static_cast<short>(can_accept ? POLLIN : 0), 0});
    for (const auto& [id, conn] : inbound_) {
      fds.push_back(pollfd{conn->fd.get(), POLLIN, 0});
      ids.push_back(id);
    }
    const uint64_t wake = std::min(deadline, next_stall_ns);
    const timespec ts = ToTimespec(wake > now ? wake - now : 0);
    const int rc = ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus("ppoll", errno);
    }
    now = MonotonicNowNs();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = inbound_.find(ids[i - 1]);
      FERRY_CHECK(it != inbound_.end());
      if (!ReadSome(*it->second, now)) CloseInbound(ids[i - 1]);
    }
    if (fds[0].revents != 0) AcceptNew(now);
  }
  return std::optional<Message>();
}

}  // namespace ferry::hal
