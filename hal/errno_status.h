// hal/errno_status.h: the one errno -> absl::StatusCode table.
//
// Every backend maps a failed call's errno through ErrnoToStatus, so callers
// branch on status codes, never on errno values. The table, and how callers
// should treat each code (following absl/status/status.h's guidance):
//
//   errno                        code                 caller should
//   EINVAL, EFAULT, E2BIG        kInvalidArgument     fix the call; not retryable
//   ENOMEM, ENOSPC, ENOBUFS,     kResourceExhausted   back off / reduce depth;
//     EMFILE, ENFILE, EDQUOT                            retry later
//   EAGAIN/EWOULDBLOCK, EINTR,   kUnavailable         retry the same call later
//     EBUSY, ECONNREFUSED,
//     ECONNRESET, EPIPE,
//     EHOSTUNREACH, ENETUNREACH,
//     ENETDOWN, ECONNABORTED,
//     ENOTCONN
//   ETIMEDOUT                    kDeadlineExceeded    retry or give up by policy
//   ENOENT, ENODEV, ENXIO, ESRCH kNotFound            the object/device is gone
//   EEXIST, EADDRINUSE           kAlreadyExists       pick another name/port
//   EPERM, EACCES                kPermissionDenied    fix privileges/limits
//   EOPNOTSUPP, ENOSYS,          kUnimplemented       feature absent here
//     EPROTONOSUPPORT
//   ERANGE, EOVERFLOW            kOutOfRange          fix the value
//   EIO, anything else           kInternal            device/driver failure
//
// EBUSY is kUnavailable because the verbs call that returns it (destroy_qp,
// destroy_cq, dealloc_pd) succeeds once the object is no longer referenced:
// retry with backoff (docs/design.md section 4, retire ladder).
#ifndef FERRY_HAL_ERRNO_STATUS_H_
#define FERRY_HAL_ERRNO_STATUS_H_

#include <string_view>

#include "absl/status/status.h"

namespace ferry::hal {

absl::StatusCode ErrnoToCode(int err);

// A status for `call` (e.g. "ibv_destroy_qp") failing with `err`; the message
// reads "<call>: <ERRNO_NAME> (<n>): <strerror>". err == 0 is reported as
// kInternal ("failed without errno"), never as OK.
absl::Status ErrnoToStatus(std::string_view call, int err);

// Symbolic name ("EBUSY") of an errno value, "E?" when unknown.
std::string_view ErrnoName(int err);

}  // namespace ferry::hal

#endif  // FERRY_HAL_ERRNO_STATUS_H_
