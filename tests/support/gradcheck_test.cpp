// The test helpers that compare tensors bit for bit: same_bits_but_nan_payloads lets NaN
// payloads differ and nothing else.
#include "tests/support/gradcheck.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>

using namespace alloy;
using namespace alloy::test;

namespace {

// An f32 tensor holding these bit patterns.
Tensor f32_bits(std::initializer_list<std::uint32_t> patterns) {
  Tensor tensor = Tensor::zeros({static_cast<std::int64_t>(patterns.size())}, DType::f32);
  std::memcpy(tensor.raw(), patterns.begin(), patterns.size() * sizeof(std::uint32_t));
  return tensor;
}

// An f16 tensor holding these bit patterns.
Tensor f16_bits(std::initializer_list<std::uint16_t> patterns) {
  Tensor tensor = Tensor::zeros({static_cast<std::int64_t>(patterns.size())}, DType::f16);
  std::memcpy(tensor.raw(), patterns.begin(), patterns.size() * sizeof(std::uint16_t));
  return tensor;
}

constexpr std::uint32_t kOne = 0x3f800000u, kZero = 0u, kMinusZero = 0x80000000u;
constexpr std::uint32_t kX86Nan = 0x7fc00000u, kGpuNan = 0x7fffffffu, kNegativeNan = 0xffc00000u;

}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck)

BOOST_AUTO_TEST_CASE(nan_payloads_may_differ_and_nothing_else) {
  const Tensor x86 = f32_bits({kOne, kMinusZero, kX86Nan});
  BOOST_TEST(same_bits_but_nan_payloads(x86, f32_bits({kOne, kMinusZero, kGpuNan})));
  BOOST_TEST(same_bits_but_nan_payloads(x86, f32_bits({kOne, kMinusZero, kNegativeNan})));
  BOOST_TEST(!same_bits(x86, f32_bits({kOne, kMinusZero, kGpuNan})));
  // The sign of a zero, a NaN against a number, a last-bit difference: all count.
  BOOST_TEST(!same_bits_but_nan_payloads(x86, f32_bits({kOne, kZero, kX86Nan})));
  BOOST_TEST(!same_bits_but_nan_payloads(x86, f32_bits({kOne, kMinusZero, kOne})));
  BOOST_TEST(!same_bits_but_nan_payloads(x86, f32_bits({kOne + 1, kMinusZero, kX86Nan})));
  // Half precision: its NaNs widen to NaNs; -0 still differs from +0.
  BOOST_TEST(same_bits_but_nan_payloads(f16_bits({0x3c00, 0x7e00}), f16_bits({0x3c00, 0x7fff})));
  BOOST_TEST(!same_bits_but_nan_payloads(f16_bits({0x8000, 0x7e00}), f16_bits({0x0000, 0x7e00})));
  // Shapes and dtypes must match.
  BOOST_TEST(!same_bits_but_nan_payloads(x86, f32_bits({kOne, kMinusZero})));
  BOOST_TEST(!same_bits_but_nan_payloads(f16_bits({0x3c00}), f32_bits({kOne})));
}

BOOST_AUTO_TEST_SUITE_END()
