// to_channels_last / to_channels_first on the CPU: every element lands where the layouts say,
// bit for bit in every dtype, and a round trip gives back the same bytes.
#include "core/ops/permute.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

using namespace alloy;

namespace {

const DType kTypes[] = {DType::u8, DType::f16, DType::bf16, DType::f32, DType::i32};
// Odd sizes, single channels and pixels, and images wider than the CUDA kernel's tiles.
const Shape kShapes[] = {{2, 3, 5, 7}, {1, 1, 1, 1}, {3, 13, 1, 9}, {1, 37, 6, 5}, {2, 1, 3, 3}};

// Bytes that differ from element to element (and in every byte of an element).
Tensor patterned(const Shape& shape, DType dtype) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(shape_numel(shape)) *
                                   dtype_size(dtype));
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>((i * 131 + i / 251) % 251);
  return Tensor::from_bytes(shape, dtype, bytes.data(), Device::cpu(), MemoryCategory::activations);
}

const unsigned char* bytes(const Tensor& t) {
  return static_cast<const unsigned char*>(t.raw());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(permute)

BOOST_AUTO_TEST_CASE(channels_last_puts_each_element_at_n_h_w_c) {
  for (const DType dtype : kTypes) {
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor x = patterned(shape, dtype);
      const Tensor y = to_channels_last(x);
      const std::int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
      BOOST_TEST((y.shape() == Shape{n, h, w, c}), what);
      BOOST_TEST((y.dtype() == dtype), what);
      const std::size_t size = dtype_size(dtype);
      int wrong = 0;
      for (std::int64_t in = 0; in < n; ++in)
        for (std::int64_t ic = 0; ic < c; ++ic)
          for (std::int64_t ih = 0; ih < h; ++ih)
            for (std::int64_t iw = 0; iw < w; ++iw) {
              const std::int64_t from = ((in * c + ic) * h + ih) * w + iw;
              const std::int64_t to = ((in * h + ih) * w + iw) * c + ic;
              wrong += std::memcmp(bytes(x) + from * size, bytes(y) + to * size, size) != 0;
            }
      BOOST_TEST(wrong == 0, what << ": " << wrong << " misplaced elements");
    }
  }
}

BOOST_AUTO_TEST_CASE(round_trips_are_exact) {
  for (const DType dtype : kTypes) {
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor x = patterned(shape, dtype);
      const Tensor back = to_channels_first(to_channels_last(x));
      BOOST_TEST((back.shape() == shape), what);
      BOOST_TEST(std::memcmp(bytes(back), bytes(x), x.nbytes()) == 0, what);
      // And from channels-last: [N, H, W, C] read as NHWC and back.
      const Tensor nhwc_back = to_channels_last(to_channels_first(x));
      BOOST_TEST(std::memcmp(bytes(nhwc_back), bytes(x), x.nbytes()) == 0, what);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_tensor_that_is_not_4d_is_refused) {
  const Tensor x = patterned({2, 3, 4}, DType::f32);
  BOOST_CHECK_THROW(to_channels_last(x), Error);
  BOOST_CHECK_THROW(to_channels_first(x), Error);
}

BOOST_AUTO_TEST_SUITE_END()
