#include "core/tensor.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"

using namespace alloy;

namespace {

std::int64_t current(MemoryCategory category) {
  return memory_stats(Device::cpu()).snapshot().current_of(category);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor)

BOOST_AUTO_TEST_CASE(shape_size_and_description) {
  const Tensor t = Tensor::zeros({2, 3, 4}, DType::f16);
  BOOST_TEST(t.defined());
  BOOST_TEST(t.ndim() == 3);
  BOOST_TEST(t.numel() == 24);
  BOOST_TEST(t.nbytes() == 48u);
  BOOST_TEST(t.dim(0) == 2);
  BOOST_TEST(t.dim(-1) == 4);
  BOOST_CHECK_THROW(t.dim(3), Error);
  BOOST_CHECK_THROW(t.dim(-4), Error);
  BOOST_TEST(t.str() == "f16[2, 3, 4] on cpu");
  BOOST_TEST(Tensor().str() == "undefined tensor");
  BOOST_TEST(!Tensor().defined());
  BOOST_CHECK_THROW(Tensor().raw(), Error);
  BOOST_TEST(shape_numel({}) == 1);
  BOOST_TEST(shape_numel({5, 0, 3}) == 0);
  BOOST_CHECK_THROW(shape_numel({2, -1}), Error);
  BOOST_TEST(dtype_size(DType::bf16) == 2u);
  BOOST_TEST(dtype_size(DType::u8) == 1u);
  BOOST_TEST(dtype_size(DType::i32) == 4u);
}

BOOST_AUTO_TEST_CASE(values_round_trip_through_every_dtype) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::i32}) {
    const std::vector<float> values = {0.0f, dtype == DType::u8 ? 0.0f : -1.5f, 3.0f, 1e-3f, 100.0f,
                                       7.0f};
    const Tensor t = Tensor::from_floats({2, 3}, values, dtype);
    const std::vector<float> back = t.to_floats();
    for (std::size_t i = 0; i < values.size(); ++i) {
      float expected = values[i];
      if (dtype == DType::f16) expected = round_to_half(expected);
      if (dtype == DType::bf16) expected = round_to_bf16(expected);
      // Integer dtypes truncate toward zero (-1.5 -> -1 in i32; 0 for u8, where -1.5 is
      // replaced by 0 below, since it does not fit).
      if (dtype == DType::i32) expected = static_cast<float>(static_cast<std::int32_t>(expected));
      if (dtype == DType::u8) expected = static_cast<float>(static_cast<std::uint8_t>(expected));
      BOOST_TEST(back[i] == expected, dtype_name(dtype) << " element " << i);
    }
  }
  // Half storage holds the conversion's bit patterns.
  const Tensor h = Tensor::from_floats({2}, {1.0f, 70000.0f}, DType::f16);
  BOOST_TEST(h.half_data()[0] == 0x3c00);
  BOOST_TEST(h.half_data()[1] == 0x7c00);
  BOOST_CHECK_THROW(Tensor::from_floats({3}, {1.0f, 2.0f}), Error);
}

BOOST_AUTO_TEST_CASE(values_an_integer_dtype_cannot_hold_are_errors) {
  // Truncation toward zero keeps (-1, 256) in u8; beyond it the conversion would be undefined.
  BOOST_TEST(Tensor::from_floats({2}, {-0.5f, 255.9f}, DType::u8).to_floats()[1] == 255.0f);
  BOOST_CHECK_THROW(Tensor::from_floats({1}, {-1.5f}, DType::u8), Error);
  BOOST_CHECK_THROW(Tensor::from_floats({1}, {256.0f}, DType::u8), Error);
  BOOST_CHECK_THROW(Tensor::from_floats({1}, {3e9f}, DType::i32), Error);
  BOOST_CHECK_THROW(Tensor::from_floats({1}, {std::nanf("")}, DType::i32), Error);
  BOOST_CHECK_EXCEPTION(
      Tensor::from_floats({2}, {1.0f, -7.0f}, DType::u8), Error, [](const Error& error) {
        return std::string(error.what()).find("-7 (element 1)") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(typed_access_checks_the_dtype) {
  const Tensor f = Tensor::zeros({4}, DType::f32);
  BOOST_CHECK_NO_THROW(f.data<float>());
  BOOST_CHECK_THROW(f.data<std::int32_t>(), Error);
  BOOST_CHECK_THROW(f.half_data(), Error);
  const Tensor i = Tensor::zeros({4}, DType::i32);
  BOOST_CHECK_THROW(i.data<float>(), Error);
  BOOST_CHECK_NO_THROW(i.data<std::int32_t>());
  const Tensor b = Tensor::zeros({4}, DType::bf16);
  BOOST_CHECK_NO_THROW(b.half_data());
  BOOST_CHECK_THROW(b.data<float>(), Error);
  const Tensor u = Tensor::zeros({4}, DType::u8);
  BOOST_CHECK_NO_THROW(u.data<std::uint8_t>());
  BOOST_CHECK_THROW(u.data<float>(), Error);
}

BOOST_AUTO_TEST_CASE(copies_share_storage_and_clone_does_not) {
  Tensor a = Tensor::from_floats({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  const Tensor shared = a;
  const Tensor view = a.reshape({4});
  const Tensor deep = a.clone();
  a.data<float>()[0] = 9.0f;
  BOOST_TEST(shared.to_floats()[0] == 9.0f);
  BOOST_TEST(view.to_floats()[0] == 9.0f);
  BOOST_TEST((view.shape() == Shape{4}));
  BOOST_TEST(deep.to_floats()[0] == 1.0f);
  BOOST_TEST((deep.shape() == a.shape()));
  BOOST_CHECK_THROW(a.reshape({3}), Error);
  BOOST_TEST(a.reshape({1, 4, 1}).numel() == 4);
}

BOOST_AUTO_TEST_CASE(views_see_part_of_the_storage_in_another_dtype) {
  Tensor words = Tensor::zeros({4}, DType::i32);
  Tensor scale = words.view(0, {1}, DType::f32);
  Tensor tail = words.view(8, {2}, DType::i32);
  scale.fill(2.5f);
  tail.fill(-1.0f);
  std::int32_t bits[4] = {};
  words.download_to(bits);
  float first = 0;
  std::memcpy(&first, &bits[0], sizeof first);
  BOOST_TEST(first == 2.5f);
  BOOST_TEST(bits[1] == 0);
  BOOST_TEST(bits[2] == -1);
  BOOST_TEST(bits[3] == -1);
  // A view of a view starts where its parent does; a copy into a view writes only its part.
  tail.view(4, {1}, DType::i32).copy_from(Tensor::from_floats({1}, {7.0f}, DType::i32));
  BOOST_TEST(words.to_floats() == (std::vector<float>{words.to_floats()[0], 0.0f, -1.0f, 7.0f}));
  BOOST_TEST((tail.view(4, {1}, DType::i32).category() == words.category()));
  // Misaligned or out-of-bounds views are errors.
  BOOST_CHECK_THROW(words.view(2, {1}, DType::i32), Error);
  BOOST_CHECK_THROW(words.view(12, {2}, DType::i32), Error);
  BOOST_CHECK_THROW(words.view(20, {0}, DType::i32), Error);
  BOOST_CHECK_THROW(Tensor().view(0, {1}, DType::i32), Error);
}

BOOST_AUTO_TEST_CASE(fill_and_copy_from) {
  Tensor t = Tensor::empty({3}, DType::bf16);
  t.fill(0.1f);
  for (const float value : t.to_floats())
    BOOST_TEST(value == round_to_bf16(0.1f));
  Tensor target = Tensor::zeros({3}, DType::bf16);
  target.copy_from(t);
  BOOST_TEST(target.to_floats() == t.to_floats());
  Tensor other_dtype = Tensor::zeros({3}, DType::f32);
  BOOST_CHECK_THROW(other_dtype.copy_from(t), Error);
  Tensor other_shape = Tensor::zeros({4}, DType::bf16);
  BOOST_CHECK_THROW(other_shape.copy_from(t), Error);
  // A failed copy leaves the target alone.
  BOOST_TEST(other_shape.to_floats() == std::vector<float>(4, 0.0f));
}

BOOST_AUTO_TEST_CASE(storage_is_accounted_in_its_category) {
  const std::int64_t gradients = current(MemoryCategory::gradients);
  const std::int64_t workspace = current(MemoryCategory::workspace);
  {
    const Tensor g = Tensor::zeros({10, 10}, DType::f16, Device::cpu(), MemoryCategory::gradients);
    BOOST_TEST((g.category() == MemoryCategory::gradients));
    BOOST_TEST(current(MemoryCategory::gradients) - gradients == 200);
    const Tensor w = g.clone(MemoryCategory::workspace);
    BOOST_TEST((w.category() == MemoryCategory::workspace));
    BOOST_TEST(current(MemoryCategory::workspace) - workspace == 200);
    const Tensor again = g.clone();
    BOOST_TEST((again.category() == MemoryCategory::gradients));
    BOOST_TEST(current(MemoryCategory::gradients) - gradients == 400);
  }
  BOOST_TEST(current(MemoryCategory::gradients) == gradients);
  BOOST_TEST(current(MemoryCategory::workspace) == workspace);
}

BOOST_AUTO_TEST_CASE(dtype_names_parse) {
  BOOST_TEST((parse_dtype("fp16") == DType::f16));
  BOOST_TEST((parse_dtype("float32") == DType::f32));
  BOOST_TEST((parse_dtype("bfloat16") == DType::bf16));
  BOOST_CHECK_THROW(parse_dtype("fp8"), UsageError);
  BOOST_TEST(std::string(dtype_name(DType::bf16)) == "bf16");
  BOOST_TEST(is_half(DType::bf16));
  BOOST_TEST(!is_floating(DType::i32));
}

BOOST_AUTO_TEST_SUITE_END()
