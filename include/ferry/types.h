// include/ferry/types.h: the value types of the public API.
//
// Owns: TaskStatus, OpKind, Request, the opaque ids (SegmentHandle, BatchId,
// TaskId, OpenToken), the local segment descriptor, status and pending
// reports. What must stay true: every type here is a plain value (copyable,
// no pointers into the engine), so a caller can keep one after the engine
// object it came from is gone; an id of 0 is never handed out ("no id").
//
// Thread safety: values; no shared state.
#ifndef FERRY_INCLUDE_FERRY_TYPES_H_
#define FERRY_INCLUDE_FERRY_TYPES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/export.h"

namespace ferry {

// Status of one task (one request of a batch). PENDING is the only
// non-terminal value; a task publishes exactly one terminal value, once, and
// never changes it afterwards (docs/design.md section 4).
//   COMPLETED: every byte moved, each slice's own success CQE consumed.
//   FAILED:    a slice failed non-retryably or ran out of retries. A
//              REM_ACCESS_ERR (the peer re-registered its memory) is
//              non-retryable: the task stays FAILED, and the engine
//              refetches the segment's descriptor so that a resubmit on the
//              same SegmentHandle uses the new rkeys (SegmentInfo).
//   TIMEOUT:   not terminal within slice_timeout_ns of submit (latched first).
//   CANCELED:  Cancel() latched before any other terminal cause.
//   INVALID:   the request was rejected at submit (nothing was enqueued) or
//              the id names no submitted task.
// Once a task is terminal the local RNIC no longer touches its local buffer.
enum class TaskStatus : uint8_t {
  kPending = 0,
  kCompleted = 1,
  kFailed = 2,
  kTimeout = 3,
  kCanceled = 4,
  kInvalid = 5,
};
FERRY_EXPORT std::string_view TaskStatusName(TaskStatus s);
constexpr bool IsTerminal(TaskStatus s) { return s != TaskStatus::kPending; }

// One-sided operation of a request: READ pulls remote -> local, WRITE pushes
// local -> remote.
enum class OpKind : uint8_t { kRead = 0, kWrite = 1 };
FERRY_EXPORT std::string_view OpKindName(OpKind k);

// A peer segment opened with Engine::OpenSegment*. 0 = none.
struct SegmentHandle {
  uint64_t id = 0;
  constexpr bool valid() const { return id != 0; }
  friend constexpr bool operator==(SegmentHandle, SegmentHandle) = default;
  friend constexpr auto operator<=>(SegmentHandle, SegmentHandle) = default;
};

// A batch allocated with Engine::AllocateBatch. 0 = none.
struct BatchId {
  uint64_t id = 0;
  constexpr bool valid() const { return id != 0; }
  friend constexpr bool operator==(BatchId, BatchId) = default;
  friend constexpr auto operator<=>(BatchId, BatchId) = default;
};

// Task `index` of a batch: the index-th request accepted into it, counting
// over every Submit on that batch.
struct TaskId {
  BatchId batch;
  uint32_t index = 0;
  friend constexpr bool operator==(TaskId, TaskId) = default;
  friend constexpr auto operator<=>(TaskId, TaskId) = default;
};

// A pending OpenSegmentAsync. 0 = none.
struct OpenToken {
  uint64_t id = 0;
  constexpr bool valid() const { return id != 0; }
  friend constexpr bool operator==(OpenToken, OpenToken) = default;
};

// One READ or WRITE of `length_bytes` between local memory at `local_addr`
// (inside a range passed to RegisterMemory) and the peer memory at
// `remote_addr` (inside a buffer listed in the peer's segment descriptor,
// addressed in the peer's address space).
struct Request {
  OpKind opcode = OpKind::kRead;
  uint64_t local_addr = 0;
  uint64_t length_bytes = 0;
  SegmentHandle segment;
  uint64_t remote_addr = 0;
};

// ------------------------------------------------------------ notifications
// Most bytes a notification's message may carry.
inline constexpr size_t kNotifyMessageBytesMax = 4096;

// Engine::Submit with a notification: once every request of this Submit
// has COMPLETED, the engine sends `message` (<= kNotifyMessageBytesMax
// bytes) to the segment the requests address (docs/design.md section 4,
// "Notifications"; N1-N5 in docs/contract.md).
struct NotifyOptions {
  std::string message;
};

// A notification delivered to this engine (Engine::PollNotifies): who sent
// it (the sender's control address "host:port" and process incarnation),
// its sequence number in the sender's space for this receiver (a
// notification is delivered at most once per (incarnation, seq)), the
// sender's batch id (0: SendNotify), and the message.
struct Notification {
  std::string from;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  uint64_t batch = 0;
  std::string message;
};

// ------------------------------------------------------------ descriptors
// What a peer needs to address our memory: per device its GID/LID, per
// registered buffer its range and one rkey per device (same order as
// `devices`). `version` increases whenever an rkey changes (re-registration
// after a device re-enable, C7) and on every (un)registration, so a peer
// holding an older version refetches: an engine whose request completes
// REM_ACCESS_ERR fetches the segment's descriptor again in the background
// and keeps it only when its version is higher (Engine::GetSegmentInfo).
struct DeviceDescriptor {
  std::string name;
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
};
// What a peer may do to a registered range over RDMA (the remote access
// flags its MR is registered with; docs/security.md).
enum class RemoteAccess : uint8_t { kRead = 1, kWrite = 2, kReadWrite = 3 };
FERRY_EXPORT std::string_view RemoteAccessName(RemoteAccess a);
constexpr bool AllowsRead(RemoteAccess a) { return (static_cast<uint8_t>(a) & 1) != 0; }
constexpr bool AllowsWrite(RemoteAccess a) { return (static_cast<uint8_t>(a) & 2) != 0; }

// How Engine::RegisterMemory offers a range to peers (docs/security.md).
struct MemoryOptions {
  // The MR's remote access: exactly these flags are registered (plus local
  // write), so the RNIC itself refuses the other operation.
  RemoteAccess access = RemoteAccess::kReadWrite;
  // Peer identities the range is offered to (its rkeys appear only in the
  // descriptor sent to them); empty = every peer that may reach the
  // listener (every authenticated peer when EngineConfig::auth is on). An
  // identity is what EngineConfig::auth authenticated (AuthConfig::identity
  // of the peer); with authentication off it is the peer's control address
  // "host:port", which the peer claims and nothing verifies.
  std::vector<std::string> peers;
  // Revocable remote access (docs/security.md section 6): each peer reaches
  // the range only through type 2 memory windows bound to the QPs of its
  // own endpoint, so retiring that endpoint (or UnregisterMemory) refuses
  // its rkeys at once, on every QP. The MR itself is registered without
  // remote access. On a device without type 2 windows the range falls
  // back to MR rkeys there (BufferRange::windows says which).
  bool revocable = false;
};

struct BufferDescriptor {
  uint64_t addr = 0;
  uint64_t length_bytes = 0;
  std::vector<uint32_t> rkeys;  // index = device index (0 where windowed)
  RemoteAccess access = RemoteAccess::kReadWrite;
  // Revocable ranges: the owner's id of the range (never reused), which a
  // peer names to ask for its windows, and the devices (bit = device
  // index) on which it is reached only through windows. 0 and 0 otherwise.
  uint64_t window = 0;
  uint64_t window_devices = 0;
};
struct SegmentDescriptor {
  std::string address;       // "host:port" of the owning engine
  uint64_t incarnation = 0;  // the owning engine process's random id
  uint64_t version = 0;      // > 0; bumped on every rkey change
  std::vector<DeviceDescriptor> devices;
  std::vector<BufferDescriptor> buffers;  // sorted by addr, non-overlapping
};

// What an engine holds for one opened peer segment (Engine::GetSegmentInfo).
// `stale`: a request resolved from this descriptor version completed
// REM_ACCESS_ERR (the peer no longer honours one of its rkeys); it clears
// when a higher version arrives. `refetch_in_flight`: a background fetch of
// the descriptor is outstanding (at most one per segment). Counters count
// refetches started, answers that replaced the descriptor, answers with a
// same-or-lower version (or from another incarnation of the peer) that
// changed nothing, and refetches given up after handshake_retries resends.
// `buffers`: the peer's registered ranges in that version (addresses in
// the peer's address space: what Request::remote_addr may point into).
struct BufferRange {
  uint64_t addr = 0;
  uint64_t length_bytes = 0;
  RemoteAccess access = RemoteAccess::kReadWrite;
  // Reached through memory windows on at least one of the peer's devices
  // (MemoryOptions::revocable, where that device has type 2 windows).
  bool windows = false;
};
struct SegmentInfo {
  std::string address;
  std::vector<BufferRange> buffers;
  uint64_t incarnation = 0;
  uint64_t version = 0;
  bool stale = false;
  bool refetch_in_flight = false;
  uint64_t refetches_started = 0;
  uint64_t refetches_applied = 0;
  uint64_t refetches_unchanged = 0;
  uint64_t refetches_given_up = 0;
};

// ------------------------------------------------------------ security
// What the control listener refused, by reason (Engine::AuthStats;
// docs/security.md). Every refused message changed nothing: no endpoint,
// no QP, no descriptor was made or sent for it.
struct AuthStats {
  uint64_t sessions_established = 0;      // as client and as server
  uint64_t delivered = 0;                 // authenticated messages read by the engine
  uint64_t dropped_allowlist = 0;         // from a source host outside the allowlist
  uint64_t dropped_unauthenticated = 0;   // a plain control message while auth is on
  uint64_t dropped_malformed = 0;         // an auth message that does not decode
  uint64_t dropped_unknown_identity = 0;  // names an identity we hold no key for
  uint64_t dropped_bad_proof = 0;         // a proof under another key (wrong secret)
  uint64_t dropped_stale = 0;             // a CHALLENGE or PROOF answering nothing we
                                          // have outstanding (replayed, reordered)
  uint64_t dropped_bad_tag = 0;           // a DATA whose HMAC fails (tampered, wrong key)
  uint64_t dropped_replayed = 0;          // a DATA sequence number already seen
  uint64_t dropped_unknown_session = 0;   // a DATA for no session we hold
  uint64_t dropped_wrong_sender = 0;      // a DATA or PROOF from another peer than its session's
  uint64_t dropped_queue_full = 0;        // outbound payloads dropped waiting for a session
  uint64_t descriptor_refusals = 0;       // descriptor requests of a peer offered nothing
};

// ------------------------------------------------------------ reports
// Counts of a batch's tasks per status, and the batch's overall status:
// PENDING while any task is, else the "worst" terminal status present in the
// order INVALID < COMPLETED < CANCELED < TIMEOUT < FAILED (COMPLETED only if
// every task completed).
struct BatchStatus {
  uint32_t tasks = 0;
  std::array<uint32_t, 6> count_by_status{};  // index = TaskStatus value
  TaskStatus overall = TaskStatus::kPending;
};

// One thing the engine is still waiting for, and why (C9: "a runtime query
// lists what is pending and why").
struct PendingItem {
  // kSegment: an opened segment whose descriptor is being refetched (id =
  // SegmentHandle id; the reason names its version and the attempt).
  enum class Kind : uint8_t { kTask, kEndpoint, kQp, kCq, kMr, kContext, kOpen, kSegment };
  Kind kind = Kind::kTask;
  uint64_t id = 0;     // the object's id within its kind
  std::string reason;  // e.g. "QP 7: destroy failed (EBUSY), retry in 8 ms"
};
struct PendingReport {
  std::vector<PendingItem> items;  // sorted by (kind, id)
};

}  // namespace ferry

#endif  // FERRY_INCLUDE_FERRY_TYPES_H_
