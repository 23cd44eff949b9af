#include "core/ops/dropout.h"

#include <cmath>

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/dropout.h"
#endif

namespace alloy {

namespace {

constexpr std::int64_t kCounterWord = std::int64_t{1} << 32;

Tensor apply(const char* op, const char* what, const Tensor& in, const DropoutMask& mask,
             const Tensor& step) {
  const Device device = check_elementwise(op, {{what, in}});
  common_device(op, {&in, &step});
  check_dtype(op, "step", step, DType::i32);
  check_shape(op, "step", step, {2});
  ALLOY_CHECK(in.ndim() >= 1, op, ": ", what, " needs a row dimension, got ", in.str());
  const std::int64_t rows = in.dim(0);
  const std::int64_t columns = rows == 0 ? 0 : in.numel() / rows;
  ALLOY_CHECK(mask.row_start >= 0 && mask.row_stride >= 1, op, ": row start ", mask.row_start,
              " and stride ", mask.row_stride, " must be >= 0 and >= 1");
  ALLOY_CHECK(rows == 0 || (mask.row_start + mask.row_stride * (rows - 1) < kCounterWord &&
                            (columns + 3) / 4 <= kCounterWord),
              op, ": ", in.str(), " at row start ", mask.row_start, ", stride ", mask.row_stride,
              " exceeds the counter (global rows below 2^32, columns below 2^34)");
  Tensor out = Tensor::empty(in.shape(), in.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, dropout, in.raw(), out.raw(), in.dtype(), rows, columns, mask,
                   step.data<std::int32_t>());
  return out;
}

}  // namespace

DropoutMask make_dropout_mask(const char* who, float p, std::uint64_t key, std::int64_t row_start,
                              std::int64_t row_stride) {
  if (!(p >= 0.0f && p < 1.0f)) usage_fail(who, ": dropout probability must be in [0, 1), got ", p);
  ALLOY_CHECK(row_start >= 0 && row_stride >= 1, who, ": row start ", row_start, " and stride ",
              row_stride, " must be >= 0 and >= 1");
  DropoutMask mask;
  mask.key = key;
  // p * 2^32 is exact in double; p < 1 keeps it at most 2^32 - 2^8, within the u32 range.
  mask.threshold = static_cast<std::uint32_t>(std::nearbyint(static_cast<double>(p) * 0x1.0p32));
  mask.scale = 1.0f / (1.0f - p);
  mask.row_start = row_start;
  mask.row_stride = row_stride;
  return mask;
}

Tensor dropout_forward(const Tensor& x, const DropoutMask& mask, const Tensor& step) {
  return apply("dropout_forward", "x", x, mask, step);
}

Tensor dropout_backward(const Tensor& dy, const DropoutMask& mask, const Tensor& step) {
  return apply("dropout_backward", "dy", dy, mask, step);
}

}  // namespace alloy
