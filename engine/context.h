// engine/context.h: one device context: device, PD, completion channels,
// the workers' CQs and the MR table of one local RNIC (docs/design.md section 4,
// C7).
//
// Owns: every verbs handle of the device except QPs (endpoints own those).
// Bring-up (Enable) runs at engine construction, before the listener starts
// and before any worker runs: nothing can race it. Each handle is wrapped in
// an Owned<> the moment its create call returns, so rollback and teardown act
// on held handles, never on a state flag.
//
// Thread safety: Enable/Disable/Reenable run when no worker touches the
// context (construction, shutdown after workers stopped, or the owner of a
// DEVICE_FATAL recovery or of a late bring-up once every endpoint on it is
// gone). The MR table (RegisterRegion/DeregisterRegion/keys) and the
// published view of the device (Published: up or not, GID, LID) are the
// cross-thread state here, guarded by mu_; up(), epoch() and
// reenable_at_ns() are atomics any thread may read. A CQ is used only by
// the worker it belongs to (cq(worker, i)).
//
// What must stay true:
// - A failed Enable releases exactly what it created, each once, and leaves
//   the context empty, so a later Enable can succeed (C7).
// - Disable is idempotent and resumable: a handle whose destroy failed stays
//   held and the next Disable retries it; nothing is destroyed twice.
// - Reenable (after DEVICE_FATAL, or for a context whose bring-up failed
//   at engine construction: re-enabled in place) closes the device if one
//   is open (which frees every object it holds: those handles are
//   forgotten, not destroyed again), brings it up again and registers
//   every region, so its rkeys change; the engine then bumps the
//   segment-descriptor version. up() goes from false to true once, at the
//   first successful Enable, and never back.
// - A region registered while the context is down (its bring-up failed, or
//   a Reenable is under way) is recorded without an MR and registered by
//   the next successful Enable; new MRs are made only between a successful
//   Enable and the next Reenable or Disable, so no region is registered
//   twice.
#ifndef FERRY_ENGINE_CONTEXT_H_
#define FERRY_ENGINE_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutation.h"
#include "base/mutex.h"
#include "engine/gid_select.h"
#include "engine/handles.h"
#include "ferry/config.h"
#include "ferry/types.h"
#include "hal/types.h"
#include "hal/verbs.h"

namespace ferry::engine {

// Keys of one registered region on one context.
// The MR access flags of a range offered with `access`: local write (the
// engine's READs land there) plus exactly the remote operations allowed.
inline uint32_t MrAccessFor(RemoteAccess access) {
  uint32_t f = hal::kAccessLocalWrite;
  if (AllowsRead(access)) f |= hal::kAccessRemoteRead;
  if (AllowsWrite(access)) f |= hal::kAccessRemoteWrite;
  return f;
}

// The MR flags of a revocable range on a device with type 2 windows: local
// write and MW_BIND, no remote access (while the MR's own rkey works
// remotely a window revokes nothing; docs/security.md section 6).
inline constexpr uint32_t kWindowedMrAccess = hal::kAccessLocalWrite | hal::kAccessMwBind;

struct RegionKeys {
  uint32_t lkey = 0;
  uint32_t rkey = 0;      // 0 when windowed (the MR grants no remote access)
  bool windowed = false;  // reached only through memory windows here
};

class Context {
 public:
  // Bring-up stages, in order; a failure at stage k releases stages < k.
  enum class Stage : uint8_t {
    kOpenDevice,
    kQuery,
    kAllocPd,
    kCompChannels,
    kCqs,
    kArmCqs,
    kRegions,  // the regions recorded while the context was down
    kDone,
  };

  // `verbs`, `ledger` and `mutations` (nullable) must outlive the context.
  Context(hal::Verbs* verbs, std::string device, const EngineConfig& config, uint32_t index,
          HandleLedger* ledger, const base::Mutations* mutations);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Brings the device up (open, query, PD, one completion channel and
  // cqs_per_worker CQs per worker, CQs armed, every recorded region
  // registered) and publishes it (up()). On failure every handle created so
  // far is released (each once) and the error is returned with the stage
  // named. Precondition: the context is empty (!enabled()).
  absl::Status Enable();
  // Releases every held handle in dependency order (MRs, CQs, channels, PD,
  // device). Idempotent; on a failed destroy the handle stays held and the
  // first error is returned (call again to retry). QPs must be gone first.
  absl::Status Disable();
  // DEVICE_FATAL recovery, or a late bring-up in place: close the device
  // if one is open (forgetting every object it held), Enable again (which
  // registers every region). Precondition: no endpoint holds a QP on this
  // context.
  absl::Status Reenable();

  bool enabled() const { return enabled_; }
  // Up (any thread): from the first successful Enable on (a failed
  // re-enable or a Disable leaves it set: the device stays in the
  // descriptor, as during any DEVICE_FATAL recovery). A
  // context whose bring-up failed is not up until its owners bring it up
  // in place; the engine routes no task to it and leaves it out of its
  // descriptor meanwhile. A DEVICE_FATAL recovery keeps the context up
  // (its rail is parked: tasks wait, as on any paused rail).
  bool up() const { return up_.load(std::memory_order_acquire); }
  // The bring-up failed because the configuration exceeds what the device
  // offers (wr_depth, qps_per_endpoint, cqe_limit, CQ count): a retry
  // cannot succeed, so the engine does not keep such a context.
  bool exceeds_device() const { return exceeds_device_; }
  // What a descriptor says of this device (any thread): nullopt while the
  // context is not up; after a re-enable, the new device's GID and LID.
  struct Published {
    hal::Gid gid;
    uint16_t lid = 0;
  };
  std::optional<Published> published() const ABSL_LOCKS_EXCLUDED(mu_);
  // Re-enable backoff (docs/design.md section 4): a failed Reenable is
  // retried no earlier than reenable_at_ns(); the wait starts at
  // `first_ns` and doubles per failure up to `max_ns` (the rail cooldown
  // bounds). The owner running the re-enable calls these; any thread reads
  // reenable_at_ns() (0: no wait).
  void ReenableFailed(uint64_t now_ns, uint64_t first_ns, uint64_t max_ns);
  uint64_t reenable_at_ns() const { return reenable_at_ns_.load(std::memory_order_acquire); }
  uint64_t reenable_failures() const { return reenable_failures_; }
  bool empty() const;  // no handle held at all
  uint32_t index() const { return index_; }
  const std::string& device() const { return device_; }
  hal::Verbs* verbs() const { return verbs_; }
  // Owner threads only (it changes under Reenable): see WithAsyncHandle.
  hal::ContextHandle handle() const { return ctx_.get(); }
  // The async-event reader's view, from any thread: runs fn(handle) with the
  // open device handle, or does nothing while the context is down. Disable
  // and Reenable clear the view and close the device under the same lock, so
  // the reader never calls into a handle that is being closed.
  template <typename Fn>
  void WithAsyncHandle(Fn&& fn) ABSL_LOCKS_EXCLUDED(async_mu_) {
    base::MutexLock l(&async_mu_);
    if (async_ctx_.valid()) fn(async_ctx_);
  }
  hal::PdHandle pd() const { return pd_.get(); }
  const hal::Gid& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  hal::Mtu active_mtu() const { return active_mtu_; }
  // The port's state when the context was last enabled (ibv_query_port):
  // after a re-enable the port events of the closed device are gone, so
  // an owner takes the rail's up/down state from here.
  bool port_active_at_enable() const { return port_active_at_enable_; }
  // The port's state now (ibv_query_port on the open device); the state at
  // enable when the query fails. Owner threads only, when no Reenable can
  // run (it reads the device handle, as handle() does).
  bool PortActiveNow() const;
  uint8_t port_num() const { return port_num_; }
  int gid_index() const { return gid_index_; }
  // Why gid_index() was used (configured, or which automatic rule).
  GidChoice gid_choice() const { return gid_choice_; }
  const hal::DeviceAttr& device_attr() const { return attr_; }
  uint32_t cqe_capacity() const { return cqe_capacity_; }
  Stage reached() const { return reached_; }

  // The CQs and channel of one worker (worker < config.workers).
  uint32_t cqs_per_worker() const { return cqs_per_worker_; }
  hal::CqHandle cq(uint32_t worker, uint32_t i) const;
  hal::CompChannelHandle channel(uint32_t worker) const;
  // Replaces a worker's CQ after CQ_ERR (the old one is destroyed first).
  // Owner worker only.
  absl::Status RecreateCq(uint32_t worker, uint32_t i);

  // ------------------------------------------------------------ DEVICE_FATAL
  // Re-enable protocol (docs/design.md section 4): every owner retires its
  // endpoints on this context and parks (stops touching its CQs, QPs and
  // channel); the owner whose Park() completes the count runs Reenable()
  // (closing the device is the evidence for every QP it held) and then
  // Unpark()s, which bumps epoch(); each parked owner sees the new epoch,
  // resolves its QPs on the close and adopts its new CQs.
  // Returns true for the caller that completed the count.
  bool Park() { return parked_.fetch_add(1, std::memory_order_acq_rel) + 1 == workers_; }
  void Unpark() {
    parked_.store(0, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // ------------------------------------------------------------ MR table
  // Registers [addr, addr+len) under `region` (any thread). On failure
  // nothing stays registered. While the context is down (see above) the
  // region is recorded without an MR (keys 0; KeysOf says kUnavailable)
  // and the next successful Enable registers it. `access`: the MR's
  // access flags (hal::AccessFlags), exactly what is registered.
  // `revocable`: MemoryOptions::revocable; where the device has type 2
  // windows the MR is registered with kWindowedMrAccess instead and
  // `access`'s remote flags are what each window grants.
  absl::StatusOr<RegionKeys> RegisterRegion(uint64_t region, void* addr, size_t len_bytes,
                                            uint32_t access, bool revocable = false);
  // Deregisters `region`: deallocates every window on it, then the MR;
  // kNotFound if unknown. On a failed dealloc or dereg what was not
  // released stays in the table.
  absl::Status DeregisterRegion(uint64_t region);

  // ------------------------------------------------------------ windows
  // Type 2 memory windows of windowed regions (docs/security.md section 6,
  // engine/context_windows.cc). Every window of a region is held here,
  // under mu_, so DeregisterRegion deallocates them all before dereg_mr and
  // a bind's post never races a dealloc of its window (the provider reads
  // the window while posting).
  struct WindowBound {
    hal::MwHandle mw;
    uint32_t rkey = 0;  // the rkey the bind gives the window
  };
  // Allocates a window on `region` and posts its bind (signaled, `wr_id`)
  // on `qp`, exposing the whole region with its remote access. Called by
  // the owner of `qp`, with one CQE of quota reserved. kNotFound: no such
  // region; kFailedPrecondition: not windowed here (or the context is
  // down); else the alloc or post error, and nothing stays allocated.
  absl::StatusOr<WindowBound> BindWindow(uint64_t region, hal::QpHandle qp, uint64_t wr_id);
  // Deallocates window `mw` of `region` (which invalidates its rkey at
  // once). OK when it is gone already (its region was deregistered, or
  // the device closed); on failure it stays held (the next call or
  // DeregisterRegion retries).
  absl::Status DeallocWindow(uint64_t region, hal::MwHandle mw);
  // Windows held over every region (tests, the C9 report).
  size_t window_count() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<RegionKeys> KeysOf(uint64_t region) const;
  size_t region_count() const;

 private:
  struct Region {
    void* addr = nullptr;
    size_t len_bytes = 0;
    uint32_t access = 0;         // the MR's flags as registered
    uint32_t window_access = 0;  // windowed: the remote flags each window grants
    OwnedMr mr;
    RegionKeys keys;
    std::map<uint64_t, OwnedMw> windows;  // by MwHandle id
  };
  // Deallocates every window of `r`; the first error (the rest stay held).
  absl::Status DeallocWindows(Region& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnableStages();
  absl::Status RegisterRecorded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the MR `info` just registered for `r`, and its keys.
  void Install(Region& r, const hal::MrInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After CloseDevice destroyed every object.
  void ForgetAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  hal::Verbs* const verbs_;
  const std::string device_;
  const uint32_t index_;
  const uint32_t workers_;
  const uint32_t cqs_per_worker_;
  const uint32_t cqe_limit_;
  const uint32_t wr_depth_;
  const uint32_t qps_per_endpoint_;
  const uint8_t port_num_;
  const int gid_index_config_;
  HandleLedger* const ledger_;
  const base::Mutations* const mutations_;

  bool enabled_ = false;
  Stage reached_ = Stage::kOpenDevice;
  OwnedContext ctx_;
  OwnedPd pd_;
  std::vector<OwnedCompChannel> channels_;  // one per worker
  std::vector<OwnedCq> cqs_;                // worker * cqs_per_worker + i
  hal::DeviceAttr attr_;
  hal::Gid gid_;
  int gid_index_ = 0;
  GidChoice gid_choice_ = GidChoice::kConfigured;
  uint16_t lid_ = 0;
  hal::Mtu active_mtu_ = hal::Mtu::k1024;
  bool port_active_at_enable_ = true;
  uint32_t cqe_capacity_ = 0;
  bool exceeds_device_ = false;
  uint64_t reenable_backoff_ns_ = 0;
  uint64_t reenable_failures_ = 0;
  std::atomic<bool> up_{false};
  std::atomic<uint64_t> reenable_at_ns_{0};

  std::atomic<uint32_t> parked_{0};
  std::atomic<uint64_t> epoch_{0};

  // Cross-thread: the device handle as the async reader may use it.
  base::Mutex async_mu_;
  hal::ContextHandle async_ctx_ ABSL_GUARDED_BY(async_mu_);

  mutable base::Mutex mu_;
  std::map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  // The PD new regions register on: valid exactly while the context is up.
  hal::PdHandle reg_pd_ ABSL_GUARDED_BY(mu_);
  Published published_ ABSL_GUARDED_BY(mu_);
};

std::string_view ContextStageName(Context::Stage s);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_CONTEXT_H_
