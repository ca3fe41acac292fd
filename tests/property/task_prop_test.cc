// tests/property/task_prop_test.cc: random single-threaded interleavings of
// the slice/task transitions (engine/slice.h, engine/task.h) against a model.
//
// Owns: a model of every slice (state, attempt) and of the task (latch,
// failed, publish), and an interpreter that applies one generated operation
// at a time: begin post, post accepted/rejected, resolve success/failed
// (a success after a latch is the "late success"), requeue (retry), withdraw
// as FAILED (could not post), cancel, timeout. Operations that do not apply
// to the chosen slice are still issued where the API allows a refusal
// (BeginPost, TryWithdrawSlice, TryLatch) and must be refused.
// What must stay true, after every operation: the task word matches the
// model; the task publishes exactly once, in the step that makes the last
// slice final, with the status of docs/design.md section 4 (first latched
// CANCELED/TIMEOUT, else FAILED, else COMPLETED); nothing changes the
// status or the latch afterwards, a late success included.
// FERRY_MUTATION=engine_c1_early_publish (publish at latch time) makes it
// fail (meson test property_task_mut_c1_early_publish expects that).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "engine/slice.h"
#include "engine/task.h"
#include "tests/property/prop_env.h"

namespace ferry {
// Printers so RapidCheck counterexamples name the states (found by ADL).
inline std::ostream& operator<<(std::ostream& os, TaskStatus s) { return os << TaskStatusName(s); }
namespace engine {
inline std::ostream& operator<<(std::ostream& os, SliceState s) { return os << SliceStateName(s); }
}  // namespace engine
}  // namespace ferry

namespace ferry::engine {
namespace {

enum class Op : uint8_t {
  kBeginPost,
  kPostAccepted,
  kPostRejected,
  kResolveSuccess,
  kResolveFailed,
  kRequeue,
  kWithdrawFailed,
  kCancel,
  kTimeout,
  kCount,
};

std::ostream& operator<<(std::ostream& os, Op op) {
  static constexpr const char* kNames[] = {"BeginPost",      "PostAccepted",  "PostRejected",
                                           "ResolveSuccess", "ResolveFailed", "Requeue",
                                           "WithdrawFailed", "Cancel",        "Timeout"};
  const auto i = static_cast<size_t>(op);
  return os << (i < std::size(kNames) ? kNames[i] : "?");
}

struct ModelSlice {
  SliceState state = SliceState::kQueued;
  uint16_t attempt = 0;
  bool final() const { return state == SliceState::kResolved || state == SliceState::kWithdrawn; }
};

struct Model {
  std::vector<ModelSlice> slices;
  TaskStatus latch = TaskStatus::kPending;
  bool failed = false;
  TaskStatus published = TaskStatus::kPending;
  int publishes = 0;  // publishes the SUT reported through a Step or out-param

  uint32_t unresolved() const {
    uint32_t n = 0;
    for (const ModelSlice& s : slices) n += s.final() ? 0 : 1;
    return n;
  }
  // docs/design.md section 4, in its own words.
  TaskStatus Rule() const {
    if (latch == TaskStatus::kCanceled || latch == TaskStatus::kTimeout) return latch;
    if (failed) return TaskStatus::kFailed;
    return TaskStatus::kCompleted;
  }
  SliceOutcome LatchReason() const {
    return latch == TaskStatus::kCanceled ? SliceOutcome::kCanceled : SliceOutcome::kTimeout;
  }
  // Slice i became final in the model; returns the status the SUT must
  // publish in this same step, if any.
  std::optional<TaskStatus> Final(uint32_t i, SliceState st, bool slice_failed) {
    slices[i].state = st;
    failed = failed || slice_failed;
    if (unresolved() != 0) return std::nullopt;
    published = Rule();
    return published;
  }
};

// The status a step reported must be exactly the one the model expects.
void ExpectStep(Model& m, std::optional<TaskStatus> want, std::optional<TaskStatus> got) {
  RC_ASSERT(want.has_value() == got.has_value());
  if (got.has_value()) {
    RC_ASSERT(*got == *want);
    ++m.publishes;
  }
}

void ExpectSame(const Task& t, const Model& m) {
  const TaskWord w = t.LoadWord();
  RC_ASSERT(w.unresolved == m.unresolved());
  RC_ASSERT(w.failed == m.failed);
  RC_ASSERT(w.latch == m.latch);
  RC_ASSERT(w.published == m.published);
  RC_ASSERT(t.status() == m.published);
  RC_ASSERT(m.publishes <= 1);
  RC_ASSERT((m.publishes == 1) == (m.published != TaskStatus::kPending));
  for (uint32_t i = 0; i < m.slices.size(); ++i) {
    const SliceWord sw = t.slice(i).Load();
    RC_ASSERT(sw.state == m.slices[i].state);
    RC_ASSERT(sw.attempt == m.slices[i].attempt);
  }
}

// Index of the `pick`-th slice (mod count) in state `st`, if any.
std::optional<uint32_t> SliceIn(const Model& m, SliceState st, uint32_t pick) {
  std::vector<uint32_t> c;
  for (uint32_t i = 0; i < m.slices.size(); ++i)
    if (m.slices[i].state == st) c.push_back(i);
  if (c.empty()) return std::nullopt;
  return c[pick % c.size()];
}

void Latch(Task& t, Model& m, TaskStatus why) {
  const bool want = m.latch == TaskStatus::kPending && m.published == TaskStatus::kPending;
  RC_ASSERT(t.TryLatch(why) == want);
  if (want) m.latch = why;
  if (m.latch == TaskStatus::kPending) return;  // published before: nothing to withdraw
  uint32_t queued = 0;
  std::optional<TaskStatus> want_pub;
  for (uint32_t i = 0; i < m.slices.size(); ++i) {
    if (m.slices[i].state != SliceState::kQueued) continue;
    ++queued;
    if (auto p = m.Final(i, SliceState::kWithdrawn, false)) want_pub = p;
  }
  std::optional<TaskStatus> got_pub;
  RC_ASSERT(t.WithdrawQueued(&got_pub) == queued);
  ExpectStep(m, want_pub, got_pub);
}

void Apply(Task& t, Model& m, Op op, uint32_t pick) {
  const uint32_t any = pick % static_cast<uint32_t>(m.slices.size());
  switch (op) {
    case Op::kBeginPost: {
      const bool want =
          m.slices[any].state == SliceState::kQueued && m.latch == TaskStatus::kPending;
      RC_ASSERT(t.BeginPost(any) == want);
      if (want) m.slices[any].state = SliceState::kPosting;
      return;
    }
    case Op::kPostAccepted:
      if (auto i = SliceIn(m, SliceState::kPosting, pick)) {
        t.PostAccepted(*i);
        m.slices[*i].state = SliceState::kPosted;
      }
      return;
    case Op::kPostRejected:
    case Op::kRequeue: {
      const SliceState from = op == Op::kPostRejected ? SliceState::kPosting : SliceState::kPosted;
      auto i = SliceIn(m, from, pick);
      if (!i) return;
      const Task::Step step = op == Op::kPostRejected ? t.PostRejected(*i) : t.Requeue(*i);
      m.slices[*i].state = SliceState::kQueued;
      if (op == Op::kRequeue) ++m.slices[*i].attempt;
      // C2: a slice back in QUEUED of a latched task is withdrawn at once.
      std::optional<TaskStatus> want_pub;
      const bool withdraw = m.latch != TaskStatus::kPending;
      if (withdraw) want_pub = m.Final(*i, SliceState::kWithdrawn, false);
      RC_ASSERT(step.moved == withdraw);
      ExpectStep(m, want_pub, step.published);
      return;
    }
    case Op::kResolveSuccess:
    case Op::kResolveFailed: {
      auto i = SliceIn(m, SliceState::kPosted, pick);
      if (!i) return;
      const bool failed = op == Op::kResolveFailed;
      const TaskStatus latch_before = m.latch;
      const Task::Step step =
          t.Resolve(*i, failed ? SliceOutcome::kFailed : SliceOutcome::kSuccess);
      RC_ASSERT(step.moved);
      ExpectStep(m, m.Final(*i, SliceState::kResolved, failed), step.published);
      // A late success (or failure) never changes a latch.
      RC_ASSERT(t.LoadWord().latch == latch_before);
      return;
    }
    case Op::kWithdrawFailed: {
      const bool want = m.slices[any].state == SliceState::kQueued;
      const Task::Step step = t.TryWithdrawSlice(any, SliceOutcome::kFailed);
      RC_ASSERT(step.moved == want);
      std::optional<TaskStatus> want_pub;
      if (want) want_pub = m.Final(any, SliceState::kWithdrawn, true);
      ExpectStep(m, want_pub, step.published);
      return;
    }
    case Op::kCancel:
      Latch(t, m, TaskStatus::kCanceled);
      return;
    case Op::kTimeout:
      Latch(t, m, TaskStatus::kTimeout);
      return;
    case Op::kCount:
      break;
  }
  RC_FAIL("unknown op");
}

// Brings every slice to a final state the normal way; the task must then
// have published exactly once.
void Drain(Task& t, Model& m) {
  for (uint32_t i = 0; i < m.slices.size(); ++i) {
    if (m.slices[i].state == SliceState::kPosting) Apply(t, m, Op::kPostAccepted, 0);
  }
  for (uint32_t round = 0; round < m.slices.size() + 1; ++round) {
    Apply(t, m, Op::kResolveSuccess, 0);
    ExpectSame(t, m);
  }
  for (uint32_t i = 0; i < m.slices.size(); ++i) {
    if (m.slices[i].state == SliceState::kQueued) Apply(t, m, Op::kWithdrawFailed, i);
    ExpectSame(t, m);
  }
}

RC_GTEST_PROP(TaskProp, PublishesOnceWithTheDesignStatus, ()) {
  base::Mutations mutations;
  property::ApplyEnvMutation(mutations);
  const uint32_t slices = *rc::gen::inRange<uint32_t>(1, 7);
  const uint64_t slice_size = *rc::gen::inRange<uint64_t>(1, 4097);
  // Any length that cuts into exactly `slices` slices.
  const uint64_t length =
      (slices - 1) * slice_size + *rc::gen::inRange<uint64_t>(1, slice_size + 1);
  const auto ops = *rc::gen::container<std::vector<std::tuple<Op, uint8_t>>>(
      rc::gen::tuple(rc::gen::cast<Op>(rc::gen::inRange<uint8_t>(0, uint8_t(Op::kCount))),
                     rc::gen::arbitrary<uint8_t>()));

  Task t(TaskGeometry{length, slice_size, 0, 1000}, &mutations);
  RC_ASSERT(t.slice_count() == slices);
  Model m;
  m.slices.resize(slices);
  ExpectSame(t, m);
  std::optional<TaskStatus> first_published;
  for (const auto& [op, pick] : ops) {
    Apply(t, m, op, pick);
    ExpectSame(t, m);
    if (m.published != TaskStatus::kPending && !first_published) first_published = m.published;
    // Nothing changes a published status.
    if (first_published) RC_ASSERT(t.status() == *first_published);
  }
  Drain(t, m);
  RC_ASSERT(m.publishes == 1);
  RC_ASSERT(t.status() == m.Rule());
  if (first_published) RC_ASSERT(t.status() == *first_published);
  RC_TAG(TaskStatusName(t.status()));
}

// The late-success scenario, forced: a posted slice, a latch, then success.
RC_GTEST_PROP(TaskProp, LateSuccessKeepsTheLatch, (bool cancel, bool other_failed)) {
  base::Mutations mutations;
  property::ApplyEnvMutation(mutations);
  Task t(TaskGeometry{2, 1, 0, 1000}, &mutations);
  RC_ASSERT(t.BeginPost(0));
  t.PostAccepted(0);
  RC_ASSERT(t.BeginPost(1));
  t.PostAccepted(1);
  const TaskStatus why = cancel ? TaskStatus::kCanceled : TaskStatus::kTimeout;
  RC_ASSERT(t.TryLatch(why));
  RC_ASSERT(!t.TryLatch(cancel ? TaskStatus::kTimeout : TaskStatus::kCanceled));
  const Task::Step s1 = t.Resolve(1, other_failed ? SliceOutcome::kFailed : SliceOutcome::kSuccess);
  RC_ASSERT(!s1.published.has_value());
  RC_ASSERT(t.status() == TaskStatus::kPending);
  const Task::Step s0 = t.Resolve(0, SliceOutcome::kSuccess);
  RC_ASSERT(s0.published.has_value());
  RC_ASSERT(*s0.published == why);
  RC_ASSERT(t.status() == why);
}

}  // namespace
}  // namespace ferry::engine
