#include "hal/os/os_entropy.h"

#include <sys/random.h>

#include <cerrno>

#include "base/check.h"

namespace ferry::hal {

uint64_t OsEntropy::Next64() {
  uint64_t value = 0;
  auto* out = reinterpret_cast<unsigned char*>(&value);
  size_t got = 0;
  for (int attempt = 0; attempt < 16 && got < sizeof(value); ++attempt) {
    ssize_t n = getrandom(out + got, sizeof(value) - got, 0);
    if (n > 0)
      got += static_cast<size_t>(n);
    else
      FERRY_CHECK(errno == EINTR);
  }
  FERRY_CHECK_EQ(got, sizeof(value));
  return value;
}

}  // namespace ferry::hal
