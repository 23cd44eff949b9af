// Dropout against a reference written from the contract in core/ops/dropout.h: Philox4x32-10 on
// counter (column / 4, global row, step, 0) with the layer's key, drop iff the word is below
// round(p * 2^32), kept values fl(x * fl(1 / (1 - p))) rounded once to the dtype.
#include "core/ops/dropout.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor step_count(int step) {
  return Tensor::from_floats({2}, {static_cast<float>(step), 0.0f}, DType::i32);
}

// Whether the reference drops element (global row g, column c).
bool reference_drops(std::uint64_t key, float p, int step, std::uint32_t g, std::int64_t c) {
  const auto threshold =
      static_cast<std::uint64_t>(std::nearbyint(static_cast<double>(p) * 4294967296.0));
  const Philox4x32 bits = philox4x32_10(
      {{static_cast<std::uint32_t>(c / 4), g, static_cast<std::uint32_t>(step), 0}},
      static_cast<std::uint32_t>(key & 0xffffffffu), static_cast<std::uint32_t>(key >> 32));
  return bits.v[c % 4] < threshold;
}

// The reference output, rounded to x's dtype.
Tensor reference_dropout(const Tensor& x, float p, std::uint64_t key, int step,
                         std::int64_t row_start, std::int64_t row_stride) {
  const std::vector<float> values = x.to_floats();
  const std::int64_t rows = x.dim(0);
  const std::int64_t columns = x.numel() / rows;
  const float scale = 1.0f / (1.0f - p);
  std::vector<float> out(values.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto g = static_cast<std::uint32_t>(row_start + row_stride * r);
    for (std::int64_t c = 0; c < columns; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * columns + c);
      out[i] = reference_drops(key, p, step, g, c) ? values[i] * 0.0f : values[i] * scale;
    }
  }
  return Tensor::from_floats(x.shape(), out, x.dtype());
}

// Rows [first, first + count) of a host tensor, as a copy.
Tensor rows_of(const Tensor& x, std::int64_t first, std::int64_t count) {
  Shape shape = x.shape();
  shape[0] = count;
  const std::int64_t columns = x.numel() / x.dim(0);
  std::vector<float> values = x.to_floats();
  return Tensor::from_floats(shape,
                             std::vector<float>(values.begin() + first * columns,
                                                values.begin() + (first + count) * columns),
                             x.dtype());
}

// Every other row of x from `first`.
Tensor strided_rows(const Tensor& x, std::int64_t first, std::int64_t stride) {
  const std::int64_t columns = x.numel() / x.dim(0);
  const std::vector<float> values = x.to_floats();
  std::vector<float> picked;
  std::int64_t count = 0;
  for (std::int64_t r = first; r < x.dim(0); r += stride, ++count)
    picked.insert(picked.end(), values.begin() + r * columns, values.begin() + (r + 1) * columns);
  Shape shape = x.shape();
  shape[0] = count;
  return Tensor::from_floats(shape, picked, x.dtype());
}

std::int64_t zeros_in(const Tensor& t) {
  std::int64_t zeros = 0;
  for (const float v : t.to_floats())
    zeros += v == 0.0f;
  return zeros;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

// Columns that are no multiple of 4 or of a CPU block (128 columns) or of its vectors (16 and 32
// columns); rows of 1 to 3 columns; the second shape runs on the pool.
const Shape kShapes[] = {{5, 3, 7}, {48, 2, 150}, {1, 1}, {6, 2}, {4, 3}, {3, 2, 131}, {2, 517}};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(dropout, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_the_reference_bit_for_bit_in_every_dtype) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (const float p : {0.1f, 0.5f, 0.77f}) {
        const Tensor x = random_tensor(shape, dtype, generator, -4.0f, 4.0f);
        const std::uint64_t key = generator.next_u64();
        const DropoutMask mask = make_dropout_mask("test", p, key, 3, 2);
        const Tensor y = dropout_forward(x, mask, step_count(17));
        BOOST_TEST((y.dtype() == dtype && y.shape() == shape));
        BOOST_TEST(same_bits(y, reference_dropout(x, p, key, 17, 3, 2)),
                   dtype_name(dtype) << " " << x.str() << " p " << p);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(threshold_and_scale_follow_p) {
  const DropoutMask tenth = make_dropout_mask("test", 0.1f, 0, 0, 1);
  BOOST_TEST(tenth.threshold == 429496736u);  // 0.1f is 0.100000001490116..., exactly this

  BOOST_TEST(tenth.scale == 1.0f / 0.9f);
  BOOST_TEST(make_dropout_mask("test", 0.5f, 0, 0, 1).threshold == 0x80000000u);
  BOOST_TEST(make_dropout_mask("test", 0.0f, 0, 0, 1).threshold == 0u);
  // p * 2^32 = 2.5 and 3.25: to nearest, ties to even.
  BOOST_TEST(make_dropout_mask("test", std::ldexp(5.0f, -33), 0, 0, 1).threshold == 2u);
  BOOST_TEST(make_dropout_mask("test", std::ldexp(13.0f, -34), 0, 0, 1).threshold == 3u);
  const float largest = std::nextafter(1.0f, 0.0f);
  BOOST_TEST(make_dropout_mask("test", largest, 0, 0, 1).threshold == 0xffffff00u);
}

BOOST_AUTO_TEST_CASE(the_drop_rate_is_p_within_five_sigma) {
  const Tensor x = Tensor::from_floats({1000, 1000}, std::vector<float>(1000000, 1.0f));
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const Tensor y = dropout_forward(x, make_dropout_mask("test", p, 1234, 0, 1), step_count(3));
    const double n = 1e6;
    const double sigma = std::sqrt(n * p * (1.0 - p));
    const double dropped = static_cast<double>(zeros_in(y));
    BOOST_TEST(std::abs(dropped - n * p) < 5.0 * sigma, "p " << p << ": " << dropped << " dropped");
  }
}

// Backward regenerates the forward's mask: dx is nonzero exactly where y is (x has no zeros),
// and its values are fl(dy * scale) there.
BOOST_AUTO_TEST_CASE(backward_uses_the_forwards_mask) {
  Generator generator(2);
  for (const DType dtype : kFloatTypes) {
    const Tensor x = random_tensor({32, 300}, dtype, generator, 0.5f, 1.0f);
    const Tensor dy = random_tensor({32, 300}, dtype, generator, 0.5f, 1.0f);
    const DropoutMask mask = make_dropout_mask("test", 0.3f, 99, 5, 3);
    const std::vector<float> y = dropout_forward(x, mask, step_count(8)).to_floats();
    const Tensor dx = dropout_backward(dy, mask, step_count(8));
    const std::vector<float> dxs = dx.to_floats();
    std::int64_t mismatches = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      mismatches += (y[i] != 0.0f) != (dxs[i] != 0.0f);
    BOOST_TEST(mismatches == 0, dtype_name(dtype));
    BOOST_TEST(same_bits(dx, reference_dropout(dy, 0.3f, 99, 8, 5, 3)), dtype_name(dtype));
  }
}

// Two data-parallel halves (rank r of 2 holds rows r, r + 2, ...), each split again into two
// micro-batches, give the whole batch's masks bit for bit.
BOOST_AUTO_TEST_CASE(splitting_the_rows_reproduces_the_whole_batch) {
  Generator generator(3);
  for (const DType dtype : kFloatTypes) {
    const Tensor x = random_tensor({12, 5, 9}, dtype, generator, 0.5f, 1.0f);
    const std::uint64_t key = generator.next_u64();
    const Tensor whole =
        dropout_forward(x, make_dropout_mask("test", 0.4f, key, 0, 1), step_count(4));
    for (int rank = 0; rank < 2; ++rank) {
      const Tensor shard = strided_rows(x, rank, 2);
      const Tensor expected = strided_rows(whole, rank, 2);
      const Tensor one_pass =
          dropout_forward(shard, make_dropout_mask("test", 0.4f, key, rank, 2), step_count(4));
      BOOST_TEST(same_bits(one_pass, expected), dtype_name(dtype) << " rank " << rank);
      // Micro-batches of 4 and 2 local rows: the second starts at local row 4.
      const Tensor first = dropout_forward(
          rows_of(shard, 0, 4), make_dropout_mask("test", 0.4f, key, rank, 2), step_count(4));
      const Tensor second =
          dropout_forward(rows_of(shard, 4, 2),
                          make_dropout_mask("test", 0.4f, key, rank + 2 * 4, 2), step_count(4));
      BOOST_TEST(same_bits(first, rows_of(expected, 0, 4)), dtype_name(dtype) << " rank " << rank);
      BOOST_TEST(same_bits(second, rows_of(expected, 4, 2)), dtype_name(dtype) << " rank " << rank);
    }
  }
}

BOOST_AUTO_TEST_CASE(another_step_or_key_draws_another_mask) {
  const Tensor x = Tensor::from_floats({16, 64}, std::vector<float>(1024, 1.0f));
  const DropoutMask mask = make_dropout_mask("test", 0.5f, 7, 0, 1);
  const Tensor base = dropout_forward(x, mask, step_count(1));
  BOOST_TEST(same_bits(dropout_forward(x, mask, step_count(1)), base));
  const auto differing = [&](const Tensor& other) {
    const std::vector<float> a = base.to_floats(), b = other.to_floats();
    std::int64_t count = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      count += a[i] != b[i];
    return count;
  };
  // Independent masks at p = 0.5 differ in about half of the elements.
  const std::int64_t by_step = differing(dropout_forward(x, mask, step_count(2)));
  const std::int64_t by_key =
      differing(dropout_forward(x, make_dropout_mask("test", 0.5f, 8, 0, 1), step_count(1)));
  const std::int64_t by_high_key = differing(dropout_forward(
      x, make_dropout_mask("test", 0.5f, 7 + (std::uint64_t{1} << 32), 0, 1), step_count(1)));
  for (const std::int64_t count : {by_step, by_key, by_high_key})
    BOOST_TEST((count > 400 && count < 624), count << " of 1024 differ");
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  Generator generator(4);
  for (const DType dtype : kFloatTypes) {
    const Tensor x = random_tensor({40, 3, 100}, dtype, generator);
    const DropoutMask mask = make_dropout_mask("test", 0.25f, 5, 0, 1);
    Tensor y[3];
    int run = 0;
    for (const int threads : {1, 2, 3}) {
      set_cpu_threads(threads);
      y[run++] = dropout_forward(x, mask, step_count(6));
    }
    set_cpu_threads(2);
    BOOST_TEST(same_bits(y[0], y[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(y[0], y[2]), dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(p_zero_is_the_identity) {
  Generator generator(5);
  for (const DType dtype : kFloatTypes) {
    const Tensor x = random_tensor({9, 70}, dtype, generator, -1e3f, 1e3f);
    const DropoutMask mask = make_dropout_mask("test", 0.0f, 11, 0, 1);
    BOOST_TEST(same_bits(dropout_forward(x, mask, step_count(2)), x), dtype_name(dtype));
    BOOST_TEST(same_bits(dropout_backward(x, mask, step_count(2)), x), dtype_name(dtype));
  }
}

// Dropped elements are x * 0, as in PyTorch's x * mask * scale: -0 for negative x, NaN for
// non-finite x; kept non-finite values stay.
BOOST_AUTO_TEST_CASE(dropped_elements_are_x_times_zero) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values(256);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = i % 3 == 0 ? -2.0f : (i % 3 == 1 ? inf : std::numeric_limits<float>::quiet_NaN());
  const Tensor x = Tensor::from_floats({4, 64}, values);
  const std::vector<float> y =
      dropout_forward(x, make_dropout_mask("test", 0.5f, 3, 0, 1), step_count(0)).to_floats();
  int negative_zeros = 0, nans = 0, kept_inf = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const bool dropped = reference_drops(3, 0.5f, 0, static_cast<std::uint32_t>(i / 64), i % 64);
    if (i % 3 == 0) {
      BOOST_TEST(y[i] == (dropped ? 0.0f : -4.0f));
      negative_zeros += dropped && std::signbit(y[i]);
    } else if (i % 3 == 1) {
      nans += dropped && std::isnan(y[i]);
      kept_inf += !dropped && y[i] == inf;
    }
  }
  BOOST_TEST(negative_zeros > 20);
  BOOST_TEST(nans > 20);
  BOOST_TEST(kept_inf > 20);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors) {
  const auto says = [](const std::string& part) {
    return [part](const Error& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  for (const float p : {-0.1f, 1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()})
    BOOST_CHECK_EXCEPTION(make_dropout_mask("Dropout", p, 0, 0, 1), UsageError,
                          says("Dropout: dropout probability must be in [0, 1)"));
  BOOST_CHECK_EXCEPTION(make_dropout_mask("test", 0.1f, 0, 0, 0), Error, says("stride 0"));
  const Tensor x = Tensor::from_floats({3, 2}, std::vector<float>(6, 1.0f));
  const DropoutMask far = make_dropout_mask("test", 0.1f, 0, (std::int64_t{1} << 32) - 2, 1);
  BOOST_CHECK_EXCEPTION(dropout_forward(x, far, step_count(0)), Error, says("exceeds the counter"));
  BOOST_CHECK_EXCEPTION(dropout_forward(x, make_dropout_mask("test", 0.1f, 0, 0, 1),
                                        Tensor::from_floats({1}, {0.0f}, DType::i32)),
                        Error, says("step"));
}

BOOST_AUTO_TEST_SUITE_END()
