// hal/os/os_entropy.h: the production Entropy (getrandom(2)). Safe from any
// thread; aborts if the kernel cannot supply entropy (no silent fallback).
#ifndef FERRY_HAL_OS_OS_ENTROPY_H_
#define FERRY_HAL_OS_OS_ENTROPY_H_

#include "hal/entropy.h"

namespace ferry::hal {

class OsEntropy final : public Entropy {
 public:
  uint64_t Next64() override;
};

}  // namespace ferry::hal

#endif  // FERRY_HAL_OS_OS_ENTROPY_H_
