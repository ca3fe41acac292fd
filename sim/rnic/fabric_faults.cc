// sim/rnic/fabric_faults.cc: faults applied to the world: link down and up,
// and scripted faults (ApplyScripted).
//
// What must stay true: a scripted fault names a live target or fails with
// NotFound and changes nothing.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "sim/rnic/fabric.h"
#include "sim/rnic/fabric_internal.h"

namespace ferry::sim {

using namespace fabric_internal;  // NOLINT(build/namespaces): the fabric's own helpers

void Fabric::LinkDown(uint32_t dev, uint64_t up_after_ns) {
  Device& d = devices_[dev];
  if (!d.port_up) return;
  d.port_up = false;
  RaiseDeviceAsync(dev, AsyncEventType::kPortErr);
  if (up_after_ns != 0) Push(EvType::kPortUp, clock_->NowNs() + up_after_ns, dev, 0, 0, 0);
}

void Fabric::LinkUp(uint32_t dev) {
  Device& d = devices_[dev];
  if (d.port_up) return;
  d.port_up = true;
  d.rtr_fail_until_ns = clock_->NowNs() + config_.rtr_fail_after_active_ns;
  RaiseDeviceAsync(dev, AsyncEventType::kPortActive);
}

absl::Status Fabric::SetLinkUp(uint32_t host, std::string_view device, bool up) {
  const uint32_t dev = host < hosts_.size() ? FindDevice(host, device) : kNone;
  if (dev == kNone) return absl::NotFoundError(absl::StrCat("no device h", host, "/", AV(device)));
  if (up) {
    LinkUp(dev);
  } else {
    LinkDown(dev, 0);
  }
  return absl::OkStatus();
}

absl::Status Fabric::ClearQpScript(uint32_t host, std::string_view device, uint32_t qpn) {
  const uint32_t dev = host < hosts_.size() ? FindDevice(host, device) : kNone;
  if (dev == kNone) return absl::NotFoundError(absl::StrCat("no device h", host, "/", AV(device)));
  const uint32_t qi = FindQpByNumber(dev, qpn);
  if (qi == kNone) return absl::NotFoundError(absl::StrCat("no qp ", qpn, " on h", host));
  Qp& q = *qps_[qi];
  q.script_destroy_fail = q.script_modify_fail = q.script_post_enomem = 0;
  q.script_late = q.script_drop = 0;
  q.script_hold_ns = q.script_dup_ns = 0;
  return absl::OkStatus();
}

absl::Status Fabric::Inject(const ScriptedFault& f) { return ApplyScripted(f); }

// A scripted fault by its target: the control network's kinds are kept for
// the world that runs the network (external_), the rest apply to a host, a
// device, a CQ or a QP of this fabric.
absl::Status Fabric::ApplyScripted(const ScriptedFault& f) {
  switch (f.kind) {
    case FaultKind::kPausedPeer:
    case FaultKind::kCtrlDelay:
    case FaultKind::kCtrlLoss:
    case FaultKind::kCtrlDup:
    case FaultKind::kCtrlReorder:
    case FaultKind::kCtrlPartition:
      external_.push_back(f);
      return absl::OkStatus();
    default:
      break;
  }
  const FaultTarget& t = f.target;
  if (t.host >= hosts_.size()) return absl::NotFoundError("no such host");
  if (t.kind == TargetKind::kHost) return ApplyHostFault(f);
  const uint32_t dev = FindDevice(t.host, t.device);
  if (dev == kNone) return absl::NotFoundError(absl::StrCat("no device ", t.ToString()));
  if (t.kind == TargetKind::kDevice) return ApplyDeviceFault(f, dev);
  if (t.kind == TargetKind::kCq && f.kind == FaultKind::kResourceFail) {
    // The device's next ibv_create_cq fails (a CQ's re-create after
    // CQ_ERR, whichever ordinal it gets).
    ++devices_[dev].script_cq_create_fail;
    return absl::OkStatus();
  }
  if (t.kind == TargetKind::kCq) {
    for (uint32_t ci = 0; ci < cqs_.size(); ++ci) {
      if (cqs_[ci].alive && cqs_[ci].dev == dev && cqs_[ci].ordinal == t.number) {
        if (f.kind != FaultKind::kCqOverrun) {
          return absl::InvalidArgumentError("only cq_overrun and resource_fail apply to a cq");
        }
        CountFault(f.kind);
        Overrun(ci);
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat("no cq ", t.ToString()));
  }
  if (t.number == kEveryQp) {  // in QP-index order (deterministic)
    uint32_t applied = 0;
    for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
      if (!qps_[qi]->alive || qps_[qi]->dev != dev) continue;
      FERRY_RETURN_IF_ERROR(ApplyQpFault(f, qi));
      ++applied;
    }
    if (applied == 0) return absl::NotFoundError(absl::StrCat("no live qp on ", t.ToString()));
    return absl::OkStatus();
  }
  const uint32_t qi = FindQpByNumber(dev, t.number);
  if (qi == kNone) return absl::NotFoundError(absl::StrCat("no qp ", t.ToString()));
  return ApplyQpFault(f, qi);
}

absl::Status Fabric::ApplyHostFault(const ScriptedFault& f) {
  if (f.kind == FaultKind::kPeerRestart) {
    RestartHost(f.target.host);
    return absl::OkStatus();
  }
  if (f.kind == FaultKind::kResourceFail) {
    ++hosts_[f.target.host].script_resource_fail;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(AV(FaultKindName(f.kind)), " needs a qp/cq/dev"));
}

absl::Status Fabric::ApplyDeviceFault(const ScriptedFault& f, uint32_t dev) {
  CountFault(f.kind);
  switch (f.kind) {
    case FaultKind::kLinkDown:
      LinkDown(dev, 0);
      return absl::OkStatus();
    case FaultKind::kLinkUp:
      LinkUp(dev);
      return absl::OkStatus();
    case FaultKind::kPortFlap:
      LinkDown(dev, config_.port_flap_ns);
      return absl::OkStatus();
    case FaultKind::kGidChange:
      RaiseDeviceAsync(dev, AsyncEventType::kGidChange);
      return absl::OkStatus();
    case FaultKind::kDeviceFatal:
      for (uint32_t ci = 0; ci < ctxs_.size(); ++ci) {
        if (!ctxs_[ci].alive || ctxs_[ci].dev != dev) continue;
        ctxs_[ci].fatal = true;
        RaiseAsync(ci, AsyncEventType::kDeviceFatal, kNone, kNone, 0);
        for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
          Qp& q = *qps_[qi];
          if (q.alive && q.ctx == ci && q.attr.qp_state != QpState::kReset) EnterErr(qi, q);
        }
      }
      return absl::OkStatus();
    case FaultKind::kResourceFail:
      ++hosts_[f.target.host].script_resource_fail;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(AV(FaultKindName(f.kind)), " does not apply to a device"));
  }
}

absl::Status Fabric::ApplyQpFault(const ScriptedFault& f, uint32_t qi) {
  Qp& q = *qps_[qi];
  switch (f.kind) {
    case FaultKind::kWrFlush:
      CountFault(f.kind);
      if (q.attr.qp_state != QpState::kReset) {
        RaiseAsync(q.ctx, AsyncEventType::kQpFatal, qi, kNone, 0);
        EnterErr(qi, q);
      }
      return absl::OkStatus();
    case FaultKind::kHungQp:
      CountFault(f.kind);
      q.hung = true;
      return absl::OkStatus();
    case FaultKind::kDestroyQpFail:
      ++q.script_destroy_fail;
      return absl::OkStatus();
    case FaultKind::kModifyQpFail:
      ++q.script_modify_fail;
      return absl::OkStatus();
    case FaultKind::kPostSendEnomem:
      ++q.script_post_enomem;
      return absl::OkStatus();
    case FaultKind::kLateCqe:
      ++q.script_late;
      return absl::OkStatus();
    case FaultKind::kPacketLoss:
      ++q.script_drop;
      return absl::OkStatus();
    case FaultKind::kHungQpRecover:
      if (q.hung) return absl::FailedPreconditionError("hung_qp_recover: the qp is hung already");
      StartHang(qi, q, f.duration_ns);
      return absl::OkStatus();
    case FaultKind::kQpErrHold:
      q.script_hold_ns = f.duration_ns;
      return absl::OkStatus();
    case FaultKind::kDupCqe:
      q.script_dup_ns = f.duration_ns;
      return absl::OkStatus();
    case FaultKind::kRecvDrop:
      ++q.script_recv_drop;
      return absl::OkStatus();
    case FaultKind::kRnrStorm:
      CountFault(f.kind);
      q.rnr_storm_until_ns = clock_->NowNs() + f.duration_ns;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(AV(FaultKindName(f.kind)), " does not apply to a qp"));
  }
}

}  // namespace ferry::sim
