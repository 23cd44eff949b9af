#include "core/nn/cast_policy.h"

#include <unordered_map>

#include "core/ops/elementwise.h"

namespace alloy::nn {

namespace {
CastPolicy& current_policy() {
  static CastPolicy policy;
  return policy;
}

struct CacheKey {
  const void* storage;
  DType dtype;
  bool operator==(const CacheKey& other) const {
    return storage == other.storage && dtype == other.dtype;
  }
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& key) const {
    return std::hash<const void*>()(key.storage) ^ static_cast<std::size_t>(key.dtype);
  }
};

std::unordered_map<CacheKey, Tensor, CacheKeyHash>& weight_cache() {
  static std::unordered_map<CacheKey, Tensor, CacheKeyHash> cache;
  return cache;
}
}  // namespace

void set_cast_policy(const CastPolicy& policy) {
  ALLOY_CHECK(is_half(policy.half_dtype), "cast policy needs a half dtype, got ",
              dtype_name(policy.half_dtype));
  current_policy() = policy;
  clear_weight_cast_cache();
}

const CastPolicy& cast_policy() {
  return current_policy();
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  return DType::f32;  // f16 with bf16 has no common half type either
}

DType compute_dtype(OpClass op, DType input, DType parameters) {
  const CastPolicy& policy = current_policy();
  switch (op) {
    case OpClass::half_compute:
      return policy.enabled ? policy.half_dtype : parameters;
    case OpClass::fp32_compute:
      return policy.enabled ? DType::f32 : parameters;
    case OpClass::fp32_statistics:
      // The same with the policy on or off: the arithmetic is fp32 whatever the storage.
      return parameters == DType::f32 ? input : parameters;
    case OpClass::follow_input:
      return input;
    case OpClass::promote:
      return promote(input, parameters);
  }
  return parameters;
}

Tensor cast_if_needed(const Tensor& x, DType dtype) {
  return x.dtype() == dtype ? x : cast(x, dtype);
}

const Tensor& cached_weight_cast(const Tensor& weight, DType dtype) {
  if (weight.dtype() == dtype) return weight;
  auto& cache = weight_cache();
  const CacheKey key{weight.raw(), dtype};
  auto found = cache.find(key);
  if (found == cache.end()) {
    found = cache.emplace(key, cast(weight, dtype, MemoryCategory::workspace)).first;
  }
  return found->second;
}

void clear_weight_cast_cache() {
  weight_cache().clear();
}

}  // namespace alloy::nn
