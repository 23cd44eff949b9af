// params_digest: a fingerprint of a model's weights for the JSON log and `alloy ckpt info`.
//
// 64-bit FNV-1a over, for each parameter in canonical (registration) order: its qualified
// name, a NUL, its rank and extents as little-endian 64-bit integers, and its values as
// little-endian fp32 bytes (half parameters are widened to fp32 first, which is exact).
// Equal weights always give equal digests; different weights give different digests except
// with probability about 2^-64 per comparison. It is a fingerprint, not a cryptographic hash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/nn/module.h"

namespace alloy {

std::uint64_t params_hash(const std::vector<nn::Parameter*>& params);

// params_hash as 16 lowercase hexadecimal digits.
std::string params_digest(const std::vector<nn::Parameter*>& params);

// The same digest of weights already on the host as fp32 (a checkpoint's, say): no tensor is
// read, so nothing counts as a download.
struct HostWeights {
  const std::string* name;
  const Shape* shape;
  const float* values;  // shape_numel(*shape) of them
};
std::string params_digest(const std::vector<HostWeights>& weights);

}  // namespace alloy
