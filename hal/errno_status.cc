// hal/errno_status.cc: the errno table of hal/errno_status.h.
#include "hal/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace ferry::hal {

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case EINVAL:
    case EFAULT:
    case E2BIG:
      return absl::StatusCode::kInvalidArgument;
    case ENOMEM:
    case ENOSPC:
    case ENOBUFS:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ECONNABORTED:
    case ENOTCONN:
      return absl::StatusCode::kUnavailable;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case ENOENT:
    case ENODEV:
    case ENXIO:
    case ESRCH:
      return absl::StatusCode::kNotFound;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case EOPNOTSUPP:
    case ENOSYS:
    case EPROTONOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    case ERANGE:
    case EOVERFLOW:
      return absl::StatusCode::kOutOfRange;
    default:
      return absl::StatusCode::kInternal;
  }
}

std::string_view ErrnoName(int err) {
  switch (err) {
    case EINVAL:
      return "EINVAL";
    case EFAULT:
      return "EFAULT";
    case E2BIG:
      return "E2BIG";
    case ENOMEM:
      return "ENOMEM";
    case ENOSPC:
      return "ENOSPC";
    case ENOBUFS:
      return "ENOBUFS";
    case EMFILE:
      return "EMFILE";
    case ENFILE:
      return "ENFILE";
    case EDQUOT:
      return "EDQUOT";
    case EAGAIN:
      return "EAGAIN";
    case EINTR:
      return "EINTR";
    case EBUSY:
      return "EBUSY";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ECONNRESET:
      return "ECONNRESET";
    case EPIPE:
      return "EPIPE";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ENETDOWN:
      return "ENETDOWN";
    case ECONNABORTED:
      return "ECONNABORTED";
    case ENOTCONN:
      return "ENOTCONN";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case ENOENT:
      return "ENOENT";
    case ENODEV:
      return "ENODEV";
    case ENXIO:
      return "ENXIO";
    case ESRCH:
      return "ESRCH";
    case EEXIST:
      return "EEXIST";
    case EADDRINUSE:
      return "EADDRINUSE";
    case EPERM:
      return "EPERM";
    case EACCES:
      return "EACCES";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case ENOSYS:
      return "ENOSYS";
    case EPROTONOSUPPORT:
      return "EPROTONOSUPPORT";
    case ERANGE:
      return "ERANGE";
    case EOVERFLOW:
      return "EOVERFLOW";
    case EIO:
      return "EIO";
    default:
      return "E?";
  }
}

absl::Status ErrnoToStatus(std::string_view call, int err) {
  if (err == 0) {
    return absl::InternalError(absl::StrFormat("%s: failed without errno", call));
  }
  char buf[128];
  // GNU strerror_r returns a char* that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return absl::Status(ErrnoToCode(err),
                      absl::StrFormat("%s: %s (%d): %s", call, ErrnoName(err), err, text));
}

}  // namespace ferry::hal
