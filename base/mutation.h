// base/mutation.h: test-only mutation switches.
//
// Each contract (C1-C9) and each simulator rule has a switch that breaks it on
// purpose, so a test can prove that the assertions guarding it can fail.
// What must stay true: a switch can only be turned on in a build compiled with
// FERRY_MUTATIONS=1 (the *_mut libraries that test binaries link); libferry
// and the production tools are built without it, where Enable() does not exist
// and on() is a constant false the compiler folds away. A binary links either
// mutation-enabled libraries or plain ones, never both.
#ifndef FERRY_BASE_MUTATION_H_
#define FERRY_BASE_MUTATION_H_

#include <bitset>
#include <cstdint>
#include <string_view>

namespace ferry::base {

// One entry per switch. Append only; names are printed in test output.
enum class Mutation : uint32_t {
  kUnseededDraw = 0,             // sim: PRNG mixes in an unseeded source
  kSimPerQpOrderOff,             // sim: completions of one QP may reorder
  kSimNoFlushAfterError,         // sim: outstanding WRs are not flushed after an error
  kSimScrubUnderRxe,             // sim: rxe profile scrubs CQEs on destroy
  kSimOverrunUndetected,         // sim: a CQE into a full CQ silently overwrites
  kSimDestroyFailSilently,       // sim: an injected destroy failure reports OK
  kEngineC1EarlyPublish,         // engine: publish before evidence
  kEngineC2TimeoutSpills,        // engine: a timeout withdraws other tasks' slices
  kEngineC3NoStaleCheck,         // engine: sweep retires without checking the WR
  kEngineC4DoubleRelease,        // engine: quota released twice on teardown
  kEngineC5NonOwnerCall,         // engine: a lifecycle step runs off the owner
  kEngineC6AcceptStale,          // engine: a stale REQ retires a READY endpoint
  kEngineC7LeakOnRollback,       // engine: bring-up rollback skips one handle
  kEngineC8SkipValidation,       // engine: submit enqueues before validating all
  kEngineC9LeakAtShutdown,       // engine: shutdown forgets one object
  kSimRespToSource,              // sim: responses go to the packet's source QP, unchecked PSN
  kSimFetchAfterCompletion,      // sim: a packet of a completed WR reads local memory on arrival
  kSimDupAckEchoesPsn,           // sim: a duplicate WRITE is acknowledged with its own PSN
  kEngineC5RepAnyGeneration,     // engine: a REP is applied onto QPs paired with another generation
  kSimDupReadAnyPsn,             // sim: a duplicate READ is re-executed without a matching resource
  kEngineC4EndpointOnErroredCq,  // engine: endpoints are created on a CQ awaiting CQ_ERR recovery
  kEngineC6AcceptOlderGeneration,  // engine: a REQ older than a seen generation is accepted
  kEngineC2RepostLatched,  // engine: a flushed slice of a timed-out (or canceled) task is reposted
  kEngineC4ReleaseFailedDestroy,  // engine: a QP's quota is released at a sweep whose destroy
                                  // failed
  kEngineStaleCqeAnyGeneration,   // engine: a CQE is applied to its slot whatever its generation
  kEngineFailPublishesEarly,      // engine: a failed slice publishes FAILED while others are queued
  kEngineCqRecreateDestroysFirst,    // engine: CQ_ERR recovery destroys the CQ before its re-create
  kEngineKeepPortDownAfterReenable,  // engine: a re-enabled context keeps the rail's old port_down
  kEngineTimeoutBeforeDeadline,  // engine: the timeout sweep judges deadlines half a timeout early
  kEngineParkIgnoresNewFatal,    // engine: an owner still parked from an earlier DEVICE_FATAL
                                 // ignores the next one (the park count never completes)
  kSwarmOpenOnce,                // sim world: a segment open that timed out is not retried
  kSwarmReuseUnquietRemote,  // sim world: the random workload reuses a remote range a WRITE that
                             // was not COMPLETED may still write
  kSimDupCqeNoRoom,          // sim: a dup_cqe copy lands in a CQ with no room for it (overrun)
  kSimUnhangWithoutFlush,    // sim: a hung QP moved to ERR does not flush when it recovers
  kEngineCompleteAfterDeadline,    // engine: a slice resolved after the deadline ends COMPLETED
  kEngineRefetchAnyVersion,        // engine: a refetch answer is applied whatever its version
  kEngineC6AcceptOtherTarget,      // engine: a REQ naming an earlier incarnation of us is accepted,
                                   // and slices bound to one peer incarnation post on another's QPs
  kEnginePortStateAtReenable,      // engine: a resuming owner takes the port state queried at the
                                   // re-enable, undoing a PORT_ACTIVE it has seen since
  kEngineWaitOnPassedCooldown,     // engine: a rail whose port is down offers its passed cooldown
                                   // as a timer, so its owner spins while slices wait for it
  kEngineGiveUpNotATimer,          // engine: the destroy give-up is no timer of its own (an owner
                                   // asleep between destroy backoffs gives up late)
  kEngineEvictBusyAsIdle,          // engine: eviction's idle test ignores posted WRs, so an
                                   // endpoint with WRs on the RNIC is taken as an idle victim
  kEngineC6ForgetReplacedAtReady,  // engine: an endpoint READY with a new incarnation of its
                                   // peer does not mark the one it last paired with replaced
  kSimImpliedNakUnbounded,         // sim: every NAK-sequence error and implied NAK restarts the
                                   // send queue, uncounted, even while a retry is under way
  kEngineC7DropFailedBringUp,      // engine: a context whose bring-up failed at construction is
                                   // dropped (no rail for the process's life) instead of being
                                   // brought up in place later
  kEngineResumeDropsOtherLedgers,  // engine: an owner resuming one context drops the CQ ledgers
                                   // of every other context's CQs but their current ones (a
                                   // parked context's old CQs lose theirs)
  kEngineAuthAcceptBadProof,       // engine: a PROOF opens a session without checking its HMAC
  kEngineAuthNoReplayWindow,       // engine: an authenticated DATA is delivered whatever its seq
  kEngineAuthIgnoreAllowlist,      // engine: a message from a host outside the allowlist is read
  kEngineExposeToAllPeers,         // engine: the listener ignores a range's peer set
  kEngineC8NoRemoteAccessCheck,    // engine: Submit does not check a remote range's access
  kSimIgnoreMrAccess,              // sim: the responder ignores an MR's remote access flags
                                   // (a WRITE into a read-only MR is executed)
  kSimMwAnyQp,                     // sim: a type 2 MW's rkey is honoured on any QP of its PD,
                                   // not only on the QP it is bound to
  kSimMwIgnoreWindow,              // sim: an MW rkey reaches its whole MR: the bound range and
                                   // the bound access flags are not checked
  kSimMwInvalidateKeepsRkey,       // sim: LOCAL_INV and DeallocMw succeed but leave the MW's
                                   // binding honoured (the old rkey still works)
  kSimMwBindUnchecked,             // sim: a bind WR skips its checks (MR without MW_BIND access,
                                   // MW already bound, other PD, range outside the MR)
  kSimMwWcOpcodeSend,              // sim: bind and local-invalidate CQEs carry opcode SEND
                                   // instead of BIND_MW / LOCAL_INV
  kSimMwDestroyQpUnchecked,        // sim: destroy_qp of a QP with a bound memory window
                                   // succeeds silently (no bound_mw_at_destroy violation)
  kEngineInboxLeftNoWork,          // engine: a step that leaves inbox items does not ask for
                                   // another (a blocking owner sleeps on them)
  kEngineMwKeepAtRetire,           // engine: a retiring endpoint keeps its memory windows bound
                                   // (its peer's rkeys are not revoked)
  kEngineMwUnregisterKeepsWindows,  // engine: UnregisterMemory deregisters the MR without
                                    // deallocating the region's windows first
  kEngineMwReuseAcrossEndpoints,    // engine: an initiator keeps a peer's window rkeys when
                                    // its endpoint is replaced (they name the old QPs)
  kEngineMwPostBeforeWin,           // engine: slices of a windowed range post before the WIN
                                    // (with the descriptor's rkey 0)
  kSimRecvQueueUnbounded,           // sim: post_recv ignores max_recv_wr (a full receive queue
                                    // takes more WRs)
  kSimRnrRetryForever,              // sim: the requester ignores rnr_retry and resends after
                                    // every RNR NAK (no RNR_RETRY_EXC_ERR)
  kSimRecvNoFlush,                  // sim: posted receive WRs are not flushed when the QP
                                    // enters ERR
  kSimRecvCqeBeforeData,            // sim: a SEND's receive CQE is queued at its first packet,
                                    // before the rest of its bytes are placed
  kSimRecvTruncates,                // sim: a SEND larger than its receive WR is truncated and
                                    // completes SUCCESS (no LOC_LEN_ERR / REM_INV_REQ_ERR)
  kSimWriteImmNoRecv,               // sim: a WRITE with immediate consumes no receive WR (no
                                    // receive CQE, no RNR)
  kSimDupSendRedelivered,           // sim: a duplicate SEND packet (a resend after a lost ACK)
                                    // consumes another receive WR
  kEngineNotifyBeforeData,          // engine: a Submit's notification is sent at submit, not
                                    // after its data tasks COMPLETED (N1)
  kEngineNotifyOnFailedBatch,       // engine: a Submit's notification is sent once its data
                                    // tasks are terminal, whatever their status (N2)
  kEngineNotifyNoDedup,             // engine: the receiver delivers every notification it
                                    // receives, a resend of a delivered one again (N3)
  kEngineNotifyRecvNoQuota,         // engine: receive WRs are posted without CQ quota (N4)
  kSimInlineReadsLate,              // sim: an inline WR's bytes are read from the caller's
                                    // buffer when sent, not copied at post_send
  kSimReadDepthUnbounded,           // sim: the requester sends READs past max_rd_atomic
  kSimAckLeavesSendBehind,          // sim: a WR acknowledged while the requester is rewound
                                    // stays to be sent again (send_seq behind done_seq)
  kEngineCqOverBudget,              // engine: a new endpoint's CQ is the one whose ledger tracks
                                    // the fewest QPs, past EndpointsPerCq live endpoints
  kEngineReadyKeyIgnoresCooldown,   // engine: a key whose READY endpoint's rail is paused offers
                                    // no timer for the cooldown's end (its slices wait for an
                                    // unrelated wake or their deadline)
  kEngineWaitIgnoresDroppable,      // engine: a key whose front slice PostKey would drop
                                    // (latched, or bound to an exited peer process) asks for
                                    // no step (a timed-out task publishes at the next wake)
  kEngineRetireTimerDrainsUnconnected,  // engine: a retiring QP that never connected (receive
                                        // WRs posted in INIT) is timed at the drain deadline,
                                        // though RetireStep destroys it at once
  kEngineCancelNoWake,  // engine: a Cancel that withdrew queued slices does not wake their
                        // owner, whose queue still holds them (a full store waits on it)
  kCount,
};

std::string_view MutationName(Mutation m);

class Mutations {
 public:
#if defined(FERRY_MUTATIONS) && FERRY_MUTATIONS
  static constexpr bool kCompiledIn = true;
  void Enable(Mutation m) { bits_.set(static_cast<size_t>(m)); }
  bool on(Mutation m) const { return bits_.test(static_cast<size_t>(m)); }
#else
  static constexpr bool kCompiledIn = false;
  constexpr bool on(Mutation) const { return false; }
#endif

 private:
  std::bitset<static_cast<size_t>(Mutation::kCount)> bits_;
};

inline std::string_view MutationName(Mutation m) {
  switch (m) {
    case Mutation::kUnseededDraw:
      return "unseeded_draw";
    case Mutation::kSimPerQpOrderOff:
      return "sim_per_qp_order_off";
    case Mutation::kSimNoFlushAfterError:
      return "sim_no_flush_after_error";
    case Mutation::kSimScrubUnderRxe:
      return "sim_scrub_under_rxe";
    case Mutation::kSimOverrunUndetected:
      return "sim_overrun_undetected";
    case Mutation::kSimDestroyFailSilently:
      return "sim_destroy_fail_silently";
    case Mutation::kEngineC1EarlyPublish:
      return "engine_c1_early_publish";
    case Mutation::kEngineC2TimeoutSpills:
      return "engine_c2_timeout_spills";
    case Mutation::kEngineC3NoStaleCheck:
      return "engine_c3_no_stale_check";
    case Mutation::kEngineC4DoubleRelease:
      return "engine_c4_double_release";
    case Mutation::kEngineC5NonOwnerCall:
      return "engine_c5_non_owner_call";
    case Mutation::kEngineC6AcceptStale:
      return "engine_c6_accept_stale";
    case Mutation::kEngineC7LeakOnRollback:
      return "engine_c7_leak_on_rollback";
    case Mutation::kEngineC8SkipValidation:
      return "engine_c8_skip_validation";
    case Mutation::kEngineC9LeakAtShutdown:
      return "engine_c9_leak_at_shutdown";
    case Mutation::kSimRespToSource:
      return "sim_resp_to_source";
    case Mutation::kSimFetchAfterCompletion:
      return "sim_fetch_after_completion";
    case Mutation::kSimDupAckEchoesPsn:
      return "sim_dup_ack_echoes_psn";
    case Mutation::kEngineC5RepAnyGeneration:
      return "engine_c5_rep_any_generation";
    case Mutation::kSimDupReadAnyPsn:
      return "sim_dup_read_any_psn";
    case Mutation::kEngineC4EndpointOnErroredCq:
      return "engine_c4_endpoint_on_errored_cq";
    case Mutation::kEngineC6AcceptOlderGeneration:
      return "engine_c6_accept_older_generation";
    case Mutation::kEngineC2RepostLatched:
      return "engine_c2_repost_latched";
    case Mutation::kEngineC4ReleaseFailedDestroy:
      return "engine_c4_release_failed_destroy";
    case Mutation::kEngineStaleCqeAnyGeneration:
      return "engine_stale_cqe_any_generation";
    case Mutation::kEngineFailPublishesEarly:
      return "engine_fail_publishes_early";
    case Mutation::kEngineCqRecreateDestroysFirst:
      return "engine_cq_recreate_destroys_first";
    case Mutation::kEngineKeepPortDownAfterReenable:
      return "engine_keep_port_down_after_reenable";
    case Mutation::kEngineTimeoutBeforeDeadline:
      return "engine_timeout_before_deadline";
    case Mutation::kEngineParkIgnoresNewFatal:
      return "engine_park_ignores_new_fatal";
    case Mutation::kSwarmOpenOnce:
      return "swarm_open_once";
    case Mutation::kSwarmReuseUnquietRemote:
      return "swarm_reuse_unquiet_remote";
    case Mutation::kSimDupCqeNoRoom:
      return "sim_dup_cqe_no_room";
    case Mutation::kSimUnhangWithoutFlush:
      return "sim_unhang_without_flush";
    case Mutation::kEngineCompleteAfterDeadline:
      return "engine_complete_after_deadline";
    case Mutation::kEngineRefetchAnyVersion:
      return "engine_refetch_any_version";
    case Mutation::kEngineC6AcceptOtherTarget:
      return "engine_c6_accept_other_target";
    case Mutation::kEnginePortStateAtReenable:
      return "engine_port_state_at_reenable";
    case Mutation::kEngineWaitOnPassedCooldown:
      return "engine_wait_on_passed_cooldown";
    case Mutation::kEngineGiveUpNotATimer:
      return "engine_give_up_not_a_timer";
    case Mutation::kEngineEvictBusyAsIdle:
      return "engine_evict_busy_as_idle";
    case Mutation::kEngineC6ForgetReplacedAtReady:
      return "engine_c6_forget_replaced_at_ready";
    case Mutation::kSimImpliedNakUnbounded:
      return "sim_implied_nak_unbounded";
    case Mutation::kEngineC7DropFailedBringUp:
      return "engine_c7_drop_failed_bring_up";
    case Mutation::kEngineResumeDropsOtherLedgers:
      return "engine_resume_drops_other_ledgers";
    case Mutation::kEngineAuthAcceptBadProof:
      return "engine_auth_accept_bad_proof";
    case Mutation::kEngineAuthNoReplayWindow:
      return "engine_auth_no_replay_window";
    case Mutation::kEngineAuthIgnoreAllowlist:
      return "engine_auth_ignore_allowlist";
    case Mutation::kEngineExposeToAllPeers:
      return "engine_expose_to_all_peers";
    case Mutation::kEngineC8NoRemoteAccessCheck:
      return "engine_c8_no_remote_access_check";
    case Mutation::kSimIgnoreMrAccess:
      return "sim_ignore_mr_access";
    case Mutation::kSimMwAnyQp:
      return "sim_mw_any_qp";
    case Mutation::kSimMwIgnoreWindow:
      return "sim_mw_ignore_window";
    case Mutation::kSimMwInvalidateKeepsRkey:
      return "sim_mw_invalidate_keeps_rkey";
    case Mutation::kSimMwBindUnchecked:
      return "sim_mw_bind_unchecked";
    case Mutation::kSimMwWcOpcodeSend:
      return "sim_mw_wc_opcode_send";
    case Mutation::kSimMwDestroyQpUnchecked:
      return "sim_mw_destroy_qp_unchecked";
    case Mutation::kEngineInboxLeftNoWork:
      return "engine_inbox_left_no_work";
    case Mutation::kEngineMwKeepAtRetire:
      return "engine_mw_keep_at_retire";
    case Mutation::kEngineMwUnregisterKeepsWindows:
      return "engine_mw_unregister_keeps_windows";
    case Mutation::kEngineMwReuseAcrossEndpoints:
      return "engine_mw_reuse_across_endpoints";
    case Mutation::kEngineMwPostBeforeWin:
      return "engine_mw_post_before_win";
    case Mutation::kSimRecvQueueUnbounded:
      return "sim_recv_queue_unbounded";
    case Mutation::kSimRnrRetryForever:
      return "sim_rnr_retry_forever";
    case Mutation::kSimRecvNoFlush:
      return "sim_recv_no_flush";
    case Mutation::kSimRecvCqeBeforeData:
      return "sim_recv_cqe_before_data";
    case Mutation::kSimRecvTruncates:
      return "sim_recv_truncates";
    case Mutation::kSimWriteImmNoRecv:
      return "sim_write_imm_no_recv";
    case Mutation::kSimDupSendRedelivered:
      return "sim_dup_send_redelivered";
    case Mutation::kEngineNotifyBeforeData:
      return "engine_notify_before_data";
    case Mutation::kEngineNotifyOnFailedBatch:
      return "engine_notify_on_failed_batch";
    case Mutation::kEngineNotifyNoDedup:
      return "engine_notify_no_dedup";
    case Mutation::kEngineNotifyRecvNoQuota:
      return "engine_notify_recv_no_quota";
    case Mutation::kSimInlineReadsLate:
      return "sim_inline_reads_late";
    case Mutation::kSimReadDepthUnbounded:
      return "sim_read_depth_unbounded";
    case Mutation::kSimAckLeavesSendBehind:
      return "sim_ack_leaves_send_behind";
    case Mutation::kEngineCqOverBudget:
      return "engine_cq_over_budget";
    case Mutation::kEngineReadyKeyIgnoresCooldown:
      return "engine_ready_key_ignores_cooldown";
    case Mutation::kEngineWaitIgnoresDroppable:
      return "engine_wait_ignores_droppable";
    case Mutation::kEngineRetireTimerDrainsUnconnected:
      return "engine_retire_timer_drains_unconnected";
    case Mutation::kEngineCancelNoWake:
      return "engine_cancel_no_wake";
    case Mutation::kCount:
      break;
  }
  return "?";
}

}  // namespace ferry::base

#endif  // FERRY_BASE_MUTATION_H_
