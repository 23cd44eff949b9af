// A float's bits and back, the same on the host and in CUDA kernels (ALLOY_HOST_DEVICE).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace alloy {

ALLOY_HOST_DEVICE inline std::uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

ALLOY_HOST_DEVICE inline float float_of(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

}  // namespace alloy
