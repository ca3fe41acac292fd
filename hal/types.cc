// hal/types.cc: names of the HAL enums, for logs and traces.
#include "hal/types.h"

namespace ferry::hal {

std::string_view QpStateName(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kErr:
      return "ERR";
  }
  return "?";
}

std::string_view PortStateName(PortState s) {
  switch (s) {
    case PortState::kNop:
      return "NOP";
    case PortState::kDown:
      return "DOWN";
    case PortState::kInit:
      return "INIT";
    case PortState::kArmed:
      return "ARMED";
    case PortState::kActive:
      return "ACTIVE";
    case PortState::kActiveDefer:
      return "ACTIVE_DEFER";
  }
  return "?";
}

std::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kRdmaWrite:
      return "RDMA_WRITE";
    case Opcode::kRdmaRead:
      return "RDMA_READ";
    case Opcode::kSend:
      return "SEND";
    case Opcode::kRdmaWriteWithImm:
      return "RDMA_WRITE_WITH_IMM";
    case Opcode::kBindMw:
      return "BIND_MW";
    case Opcode::kLocalInv:
      return "LOCAL_INV";
    case Opcode::kRecv:
      return "RECV";
    case Opcode::kRecvRdmaWithImm:
      return "RECV_RDMA_WITH_IMM";
  }
  return "?";
}

std::string_view WcStatusName(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "SUCCESS";
    case WcStatus::kLocLenErr:
      return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr:
      return "LOC_QP_OP_ERR";
    case WcStatus::kLocEecOpErr:
      return "LOC_EEC_OP_ERR";
    case WcStatus::kLocProtErr:
      return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr:
      return "WR_FLUSH_ERR";
    case WcStatus::kMwBindErr:
      return "MW_BIND_ERR";
    case WcStatus::kBadRespErr:
      return "BAD_RESP_ERR";
    case WcStatus::kLocAccessErr:
      return "LOC_ACCESS_ERR";
    case WcStatus::kRemInvReqErr:
      return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr:
      return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr:
      return "REM_OP_ERR";
    case WcStatus::kRetryExcErr:
      return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr:
      return "RNR_RETRY_EXC_ERR";
    case WcStatus::kLocRddViolErr:
      return "LOC_RDD_VIOL_ERR";
    case WcStatus::kRemInvRdReqErr:
      return "REM_INV_RD_REQ_ERR";
    case WcStatus::kRemAbortErr:
      return "REM_ABORT_ERR";
    case WcStatus::kInvEecnErr:
      return "INV_EECN_ERR";
    case WcStatus::kInvEecStateErr:
      return "INV_EEC_STATE_ERR";
    case WcStatus::kFatalErr:
      return "FATAL_ERR";
    case WcStatus::kRespTimeoutErr:
      return "RESP_TIMEOUT_ERR";
    case WcStatus::kGeneralErr:
      return "GENERAL_ERR";
  }
  return "?";
}

std::string_view AsyncEventTypeName(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kQpFatal:
      return "QP_FATAL";
    case AsyncEventType::kQpReqErr:
      return "QP_REQ_ERR";
    case AsyncEventType::kQpAccessErr:
      return "QP_ACCESS_ERR";
    case AsyncEventType::kCommEst:
      return "COMM_EST";
    case AsyncEventType::kSqDrained:
      return "SQ_DRAINED";
    case AsyncEventType::kCqErr:
      return "CQ_ERR";
    case AsyncEventType::kPortErr:
      return "PORT_ERR";
    case AsyncEventType::kPortActive:
      return "PORT_ACTIVE";
    case AsyncEventType::kGidChange:
      return "GID_CHANGE";
    case AsyncEventType::kDeviceFatal:
      return "DEVICE_FATAL";
    case AsyncEventType::kOther:
      return "OTHER";
  }
  return "?";
}

}  // namespace ferry::hal
