// Division of 32-bit unsigned integers by a divisor fixed when a kernel is launched: a multiply
// high, an add and a shift per division, where `/` and `%` cost about 20 instructions for 32-bit
// and about 70 (a subroutine call) for 64-bit operands. Kernels that split a flat index into
// (plane, row, column) use it on every element. Plain host code as well (no CUDA header), so the
// CPU tests check it exhaustively without a GPU.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/host_device.h"

namespace alloy::cuda {

// Granlund and Montgomery's round-up method (as PyTorch's IntDivider): with s the least shift
// such that 2^s >= d and m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s for
// every 32-bit n; the sum is taken in 64 bits, so no n overflows it.
class IntDivider {
 public:
  IntDivider() = default;
  explicit IntDivider(std::uint32_t divisor) : divisor_(divisor) {
    ALLOY_CHECK(divisor > 0, "IntDivider: division by zero");
    while (shift_ < 32 && (std::uint64_t{1} << shift_) < divisor)
      ++shift_;
    const std::uint64_t power = std::uint64_t{1} << shift_;
    multiplier_ = static_cast<std::uint32_t>(((power - divisor) << 32) / divisor + 1);
  }

  ALLOY_HOST_DEVICE std::uint32_t divisor() const { return divisor_; }

  ALLOY_HOST_DEVICE std::uint32_t divide(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(n, multiplier_);
#else
    const auto high = static_cast<std::uint32_t>((std::uint64_t{n} * multiplier_) >> 32);
#endif
    return static_cast<std::uint32_t>((std::uint64_t{high} + n) >> shift_);
  }

  // n / d and n % d.
  struct QuotientRemainder {
    std::uint32_t quotient, remainder;
  };
  ALLOY_HOST_DEVICE QuotientRemainder divmod(std::uint32_t n) const {
    const std::uint32_t quotient = divide(n);
    return {quotient, n - quotient * divisor_};
  }

 private:
  std::uint32_t divisor_ = 1;
  std::uint32_t multiplier_ = 1;
  std::uint32_t shift_ = 0;
};

}  // namespace alloy::cuda
