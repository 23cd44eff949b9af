#include "core/digest.h"

#include <cstdio>
#include <cstring>

namespace alloy {

namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

class Fnv1a {
 public:
  void bytes(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      state_ ^= p[i];
      state_ *= kFnvPrime;
    }
  }
  // Little-endian whatever the host's order, so digests compare across machines.
  void u64(std::uint64_t value) {
    unsigned char little[8];
    for (int i = 0; i < 8; ++i)
      little[i] = static_cast<unsigned char>(value >> (8 * i));
    bytes(little, sizeof little);
  }
  void u32(std::uint32_t value) {
    unsigned char little[4];
    for (int i = 0; i < 4; ++i)
      little[i] = static_cast<unsigned char>(value >> (8 * i));
    bytes(little, sizeof little);
  }
  std::uint64_t value() const { return state_; }

 private:
  std::uint64_t state_ = kFnvOffset;
};

void add_weights(Fnv1a& hash, const std::string& name, const Shape& shape, const float* values,
                 std::size_t count) {
  hash.bytes(name.c_str(), name.size() + 1);  // with the NUL: names stay apart
  hash.u64(shape.size());
  for (const std::int64_t extent : shape)
    hash.u64(static_cast<std::uint64_t>(extent));
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    hash.u32(bits);
  }
}

std::string hex(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace

std::uint64_t params_hash(const std::vector<nn::Parameter*>& params) {
  Fnv1a hash;
  for (const nn::Parameter* param : params) {
    const std::vector<float> values = param->value.to_floats();
    add_weights(hash, param->name, param->value.shape(), values.data(), values.size());
  }
  return hash.value();
}

std::string params_digest(const std::vector<nn::Parameter*>& params) {
  return hex(params_hash(params));
}

std::string params_digest(const std::vector<HostWeights>& weights) {
  Fnv1a hash;
  for (const HostWeights& w : weights) {
    add_weights(hash, *w.name, *w.shape, w.values, static_cast<std::size_t>(shape_numel(*w.shape)));
  }
  return hex(hash.value());
}

}  // namespace alloy
