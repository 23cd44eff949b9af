#include "core/ops/permute.h"

#include "core/layout.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/permute.h"
#endif

namespace alloy {

namespace {

// Each image of `x` (in layout `from`) as the other layout: one [rows, cols] transpose per image.
Tensor convert(const char* op, const Tensor& x, Layout from) {
  const Device device = common_device(op, {&x});
  const Nchw s = nchw_sizes(x.shape(), from, op);
  const Layout to = from == Layout::nchw ? Layout::nhwc : Layout::nchw;
  Tensor y = Tensor::empty(shape_in(to, s.n, s.c, s.h, s.w), x.dtype(), device,
                           MemoryCategory::activations);
  const std::int64_t plane = s.h * s.w;
  const std::int64_t rows = from == Layout::nchw ? s.c : plane;
  const std::int64_t cols = from == Layout::nchw ? plane : s.c;
  ALLOY_RUN_KERNEL(op, device, transpose_images, x.raw(), y.raw(), dtype_size(x.dtype()), s.n, rows,
                   cols);
  return y;
}

}  // namespace

Tensor to_channels_last(const Tensor& x) {
  return convert("to_channels_last", x, Layout::nchw);
}

Tensor to_channels_first(const Tensor& x) {
  return convert("to_channels_first", x, Layout::nhwc);
}

}  // namespace alloy
