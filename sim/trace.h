// sim/trace.h: the run's trace: every PRNG draw and every event, folded into
// a rolling FNV-1a hash, with an optional bounded in-memory record for
// readable replays and for finding the first diverging step.
//
// The hash: FNV-1a 64 (base/fnv1a.h) folded, per entry, over a tag byte
// ('D' or 'E'), then for a draw the stream and value (8 little-endian bytes
// each), for an event the kind's bytes, a 0 byte, and a, b, c. Virtual time
// is recorded but not hashed (it follows from the draws and events).
//
// Two record modes: the default keeps the latest record_max entries (a
// readable tail); RecordFrom(first_seq) keeps the first record_max entries
// with seq >= first_seq (the window the determinism check compares).
//
// Thread safety: none; the simulator is single-threaded.
// What must stay true: the hash depends only on the sequence of Draw/Event
// calls and their arguments (never on addresses or wall time); the record
// never grows past record_max entries (older entries are dropped, the hash
// still covers them).
#ifndef FERRY_SIM_TRACE_H_
#define FERRY_SIM_TRACE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace ferry::sim {

struct TraceEntry {
  uint64_t seq = 0;         // 0-based index of this entry in the run
  uint64_t time_ns = 0;     // virtual time when recorded
  uint64_t hash_after = 0;  // rolling hash including this entry
  std::string text;         // "draw s=3 v=..." or "event <kind> a b c"
};

class Trace {
 public:
  // record_max = 0 keeps no entries (hash only: fastest).
  explicit Trace(size_t record_max = 0);

  void SetTimeNs(uint64_t now_ns) { now_ns_ = now_ns; }
  void Draw(uint32_t stream, uint64_t value);
  void Event(std::string_view kind, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0);

  // Switches to window mode: records entries with seq in
  // [first_seq, first_seq + record_max), drops everything else. Call before
  // the first entry.
  void RecordFrom(uint64_t first_seq);

  uint64_t hash() const { return hash_; }
  uint64_t entries() const { return seq_; }
  const std::deque<TraceEntry>& record() const { return record_; }

 private:
  // Records entry `seq_` (hash_ already includes it) if the mode keeps it;
  // `make_text` is only called then.
  template <typename MakeText>
  void Record(const MakeText& make_text);
  size_t record_max_;
  bool window_mode_ = false;
  uint64_t window_first_seq_ = 0;
  uint64_t now_ns_ = 0;
  uint64_t seq_ = 0;
  uint64_t hash_;
  std::deque<TraceEntry> record_;
};

}  // namespace ferry::sim

#endif  // FERRY_SIM_TRACE_H_
