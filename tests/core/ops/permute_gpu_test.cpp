// The CUDA layout conversions against the CPU's, byte for byte, in every element size and on
// images larger than one 32x32 tile; and the transposing accumulation of the channels-last
// convolution's filter gradient, exact against the host's fp32 add and one rounding.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops/permute.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/permute.h"
#endif

using namespace alloy;
using namespace alloy::test;

namespace {

Tensor patterned(const Shape& shape, DType dtype) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(shape_numel(shape)) *
                                   dtype_size(dtype));
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>((i * 131 + i / 251) % 251);
  return Tensor::from_bytes(shape, dtype, bytes.data(), Device::cpu(), MemoryCategory::activations);
}

void check_same_bytes(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  const Tensor host = to_host(gpu);
  BOOST_TEST((host.shape() == cpu.shape()), what);
  BOOST_TEST((host.dtype() == cpu.dtype()), what);
  BOOST_TEST(std::memcmp(host.raw(), cpu.raw(), cpu.nbytes()) == 0, what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(permute_gpu)

BOOST_AUTO_TEST_CASE(layout_conversions_match_the_cpu_bit_for_bit) {
  // Tiles cut by every edge: channels over one tile (37), planes over one (45, 33) and under.
  const Shape shapes[] = {{2, 37, 5, 9}, {3, 3, 11, 13}, {1, 64, 33, 1}, {2, 1, 1, 1}};
  for (const DType dtype : {DType::u8, DType::f16, DType::f32}) {
    for (const Shape& shape : shapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor x = patterned(shape, dtype);
      const Tensor last = to_channels_last(x);
      const Tensor gpu_last = to_channels_last(to_cuda(x));
      check_same_bytes(gpu_last, last, "to_channels_last " + what);
      check_same_bytes(to_channels_first(gpu_last), x, "round trip " + what);
      check_same_bytes(to_channels_first(to_cuda(x)), to_channels_first(x),
                       "to_channels_first " + what);
    }
  }
}

#ifdef ALLOY_HAVE_CUDA
// The convolution's filter copies: a KCRS filter as K images of [C, RS] is its KRSC copy.
BOOST_AUTO_TEST_CASE(a_kcrs_filter_transposes_to_krsc) {
  const std::int64_t k = 5, c = 35, r = 3, s = 3;
  const Tensor w = patterned({k, c, r, s}, DType::f16);
  const Tensor w_gpu = to_cuda(w);
  Tensor krsc = Tensor::empty({k, r, s, c}, DType::f16, w_gpu.device());
  cuda::transpose_images(w_gpu.raw(), krsc.raw(), 2, k, c, r * s, cuda::stream_of(w_gpu.device()));
  const Tensor host = to_host(krsc);
  const auto* from = static_cast<const std::uint16_t*>(w.raw());
  const auto* to = static_cast<const std::uint16_t*>(host.raw());
  int wrong = 0;
  for (std::int64_t ik = 0; ik < k; ++ik)
    for (std::int64_t ic = 0; ic < c; ++ic)
      for (std::int64_t rs = 0; rs < r * s; ++rs)
        wrong += from[(ik * c + ic) * r * s + rs] != to[(ik * r * s + rs) * c + ic];
  BOOST_TEST(wrong == 0, wrong << " misplaced filter elements");
}

// out[i, c, r] += in[i, r, c]: one fp32 add of the two stored values, rounded once.
BOOST_AUTO_TEST_CASE(the_transposing_add_is_one_fp32_add_and_one_rounding) {
  Generator generator(41);
  const std::int64_t images = 3, rows = 9, cols = 37;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor in = random_tensor({images, rows, cols}, dtype, generator);
    const Tensor out = random_tensor({images, cols, rows}, dtype, generator);
    const std::vector<float> a = in.to_floats(), b = out.to_floats();
    std::vector<float> sum(b.size());
    for (std::int64_t i = 0; i < images; ++i)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto target = static_cast<std::size_t>((i * cols + c) * rows + r);
          sum[target] = b[target] + a[static_cast<std::size_t>((i * rows + r) * cols + c)];
        }
    const Tensor expected = Tensor::from_floats(out.shape(), sum, dtype);
    Tensor out_gpu = to_cuda(out);
    const Tensor in_gpu = to_cuda(in);
    cuda::transpose_images_add(in_gpu.raw(), out_gpu.raw(), dtype, images, rows, cols,
                               cuda::stream_of(out_gpu.device()));
    check_gpu_equal(out_gpu, expected, std::string("transpose_images_add ") + dtype_name(dtype));
  }
}
// The narrow images of the convolution's filters: [C, P] -> [P, C] and back, for tap counts
// that take the plain copy (1), the slab kernel (9, 25, its widest 32) and the tiles (49),
// with channels under one slab (37, several images to a block) and over two (600), against the
// CPU's transpose byte for byte.
constexpr std::int64_t kTaps[] = {1, 9, 25, 32, 49};
constexpr std::int64_t kChannels[] = {37, 600};

BOOST_AUTO_TEST_CASE(narrow_images_transpose_as_on_the_cpu) {
  for (const DType dtype : {DType::u8, DType::f16, DType::f32}) {
    for (const std::int64_t taps : kTaps) {
      for (const std::int64_t channels : kChannels) {
        const std::int64_t images = channels < 100 ? 3 : 2;
        // Both ways round: [C, P] (the filter copy) and [P, C] (its gradient's way back).
        for (const bool narrow_cols : {true, false}) {
          const std::int64_t rows = narrow_cols ? channels : taps;
          const std::int64_t cols = narrow_cols ? taps : channels;
          const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(images) +
                                   " images of " + std::to_string(rows) + "x" +
                                   std::to_string(cols);
          const Tensor in = patterned({images, rows, cols}, dtype);
          Tensor expected = Tensor::empty({images, cols, rows}, dtype, Device::cpu());
          cpu::transpose_images(in.raw(), expected.raw(), dtype_size(dtype), images, rows, cols);
          const Tensor in_gpu = to_cuda(in);
          Tensor out_gpu = Tensor::empty({images, cols, rows}, dtype, in_gpu.device());
          cuda::transpose_images(in_gpu.raw(), out_gpu.raw(), dtype_size(dtype), images, rows, cols,
                                 cuda::stream_of(in_gpu.device()));
          check_same_bytes(out_gpu, expected, what);
        }
      }
    }
  }
}

// The same shapes through the transposing add, each output element the fp32 sum of its two
// stored values rounded once, computed here on the host.
BOOST_AUTO_TEST_CASE(narrow_images_add_with_one_rounding) {
  Generator generator(43);
  for (const DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const std::int64_t taps : kTaps) {
      for (const std::int64_t channels : kChannels) {
        const std::int64_t images = channels < 100 ? 3 : 2;
        for (const bool narrow_rows : {true, false}) {
          const std::int64_t rows = narrow_rows ? taps : channels;
          const std::int64_t cols = narrow_rows ? channels : taps;
          const Tensor in = random_tensor({images, rows, cols}, dtype, generator);
          const Tensor out = random_tensor({images, cols, rows}, dtype, generator);
          const std::vector<float> a = in.to_floats(), b = out.to_floats();
          std::vector<float> sum(b.size());
          for (std::int64_t i = 0; i < images; ++i)
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t c = 0; c < cols; ++c) {
                const auto target = static_cast<std::size_t>((i * cols + c) * rows + r);
                sum[target] = b[target] + a[static_cast<std::size_t>((i * rows + r) * cols + c)];
              }
          const Tensor expected = Tensor::from_floats(out.shape(), sum, dtype);
          Tensor out_gpu = to_cuda(out);
          const Tensor in_gpu = to_cuda(in);
          cuda::transpose_images_add(in_gpu.raw(), out_gpu.raw(), dtype, images, rows, cols,
                                     cuda::stream_of(out_gpu.device()));
          check_gpu_equal(out_gpu, expected,
                          std::string("transpose_images_add ") + dtype_name(dtype) + " " +
                              std::to_string(images) + " images of " + std::to_string(rows) + "x" +
                              std::to_string(cols));
        }
      }
    }
  }
}
#endif

BOOST_AUTO_TEST_SUITE_END()
