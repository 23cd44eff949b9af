#include "core/ops/pool2d.h"

#include <limits>

#include "core/ops/dispatch.h"
#include "core/ops/permute.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/pool2d.h"
#endif

namespace alloy {

namespace {

Shape output_shape(const char* op, const Shape& x, const Pool2dParams& p) {
  ALLOY_CHECK(x.size() == 4, op, ": input must be NCHW (4 dimensions), got ", shape_str(x));
  ALLOY_CHECK(p.kernel_h > 0 && p.kernel_w > 0, op, ": kernel must be positive, got ", p.kernel_h,
              "x", p.kernel_w);
  ALLOY_CHECK(p.stride_h > 0 && p.stride_w > 0, op, ": stride must be positive, got ", p.stride_h,
              "x", p.stride_w);
  ALLOY_CHECK(
      p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
      ": padding ", p.pad_h, "x", p.pad_w, " must be between 0 and half the kernel ", p.kernel_h,
      "x", p.kernel_w);
  const std::int64_t padded_h = x[2] + 2 * p.pad_h;
  const std::int64_t padded_w = x[3] + 2 * p.pad_w;
  ALLOY_CHECK(padded_h >= p.kernel_h && padded_w >= p.kernel_w, op, ": kernel ", p.kernel_h, "x",
              p.kernel_w, " is larger than the padded input ", shape_str(x));
  // argmax holds flat indices within a plane as i32.
  ALLOY_CHECK(x[2] * x[3] <= std::numeric_limits<std::int32_t>::max(), op, ": input plane of ",
              shape_str(x), " is too large");
  return {x[0], x[1], (padded_h - p.kernel_h) / p.stride_h + 1,
          (padded_w - p.kernel_w) / p.stride_w + 1};
}

cpu::Pool2dGeometry geometry(const Shape& x, const Shape& y, const Pool2dParams& params) {
  cpu::Pool2dGeometry g;
  g.planes = x[0] * x[1];
  g.height = static_cast<int>(x[2]);
  g.width = static_cast<int>(x[3]);
  g.out_height = static_cast<int>(y[2]);
  g.out_width = static_cast<int>(y[3]);
  g.params = params;
  return g;
}

// x's NCHW sizes as a shape (for the checks and the geometry), and back.
Shape nchw_shape(const char* op, const Shape& x, Layout layout) {
  const Nchw s = nchw_sizes(x, layout, op);
  return {s.n, s.c, s.h, s.w};
}
Shape physical(const Shape& nchw, Layout layout) {
  return shape_in(layout, nchw[0], nchw[1], nchw[2], nchw[3]);
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& params, Layout layout) {
  constexpr const char* op = "pool2d";
  return physical(output_shape(op, nchw_shape(op, x, layout), params), layout);
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& params, Layout layout) {
  constexpr const char* op = "avg_pool2d_forward";
  const Device device = common_device(op, {&x});
  check_floating(op, "x", x);
  const Shape x_nchw = nchw_shape(op, x.shape(), layout);
  const Shape y_shape = output_shape(op, x_nchw, params);
  if (layout == Layout::nhwc && !device.is_cuda()) {
    return to_channels_last(avg_pool2d_forward(to_channels_first(x), params));
  }
  Tensor y =
      Tensor::empty(physical(y_shape, layout), x.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      const cpu::Pool2dGeometry g = geometry(x_nchw, y_shape, params);
      if (layout == Layout::nhwc) {
        cuda::avg_pool2d_forward_channels_last(x.raw(), y.raw(), x.dtype(), g, x_nchw[1],
                                               cuda::stream_of(device));
      } else {
        cuda::avg_pool2d_forward(x.raw(), y.raw(), x.dtype(), g, cuda::stream_of(device));
      }
      return y;
    });
  cpu::avg_pool2d_forward(x.raw(), y.raw(), x.dtype(), geometry(x_nchw, y_shape, params));
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& params,
                           Layout layout) {
  constexpr const char* op = "avg_pool2d_backward";
  const Device device = common_device(op, {&dy});
  check_floating(op, "dy", dy);
  const Shape x_nchw = nchw_shape(op, x_shape, layout);
  const Shape y_shape = output_shape(op, x_nchw, params);
  check_shape(op, "dy", dy, physical(y_shape, layout));
  if (layout == Layout::nhwc && !device.is_cuda()) {
    return to_channels_last(avg_pool2d_backward(to_channels_first(dy), x_nchw, params));
  }
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      const cpu::Pool2dGeometry g = geometry(x_nchw, y_shape, params);
      if (layout == Layout::nhwc) {
        cuda::avg_pool2d_backward_channels_last(dy.raw(), dx.raw(), dy.dtype(), g, x_nchw[1],
                                                cuda::stream_of(device));
      } else {
        cuda::avg_pool2d_backward(dy.raw(), dx.raw(), dy.dtype(), g, cuda::stream_of(device));
      }
      return dx;
    });
  cpu::avg_pool2d_backward(dy.raw(), dx.raw(), dy.dtype(), geometry(x_nchw, y_shape, params));
  return dx;
}

bool pool2d_halves(const Pool2dParams& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
         p.pad_w == 0;
}

bool relu_avg_pool2d_fuses(const Pool2dParams& params, Layout layout) {
  return layout == Layout::nchw && pool2d_halves(params);
}

Tensor relu_avg_pool2d_forward(const Tensor& x, const Pool2dParams& params) {
  constexpr const char* op = "relu_avg_pool2d_forward";
  const Device device = common_device(op, {&x});
  check_floating(op, "x", x);
  ALLOY_CHECK(relu_avg_pool2d_fuses(params, Layout::nchw), op,
              ": only 2x2 windows at stride 2 without padding");
  const Shape x_nchw = nchw_shape(op, x.shape(), Layout::nchw);
  const Shape y_shape = output_shape(op, x_nchw, params);
  Tensor y = Tensor::empty(y_shape, x.dtype(), device, MemoryCategory::activations);
  const cpu::Pool2dGeometry g = geometry(x_nchw, y_shape, params);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::relu_avg_pool2d_forward(x.raw(), y.raw(), x.dtype(), g, cuda::stream_of(device));
      return y;
    });
  cpu::relu_avg_pool2d_forward(x.raw(), y.raw(), x.dtype(), g);
  return y;
}

Tensor relu_avg_pool2d_backward(const Tensor& x, const Tensor& dy, const Pool2dParams& params) {
  constexpr const char* op = "relu_avg_pool2d_backward";
  const Device device = common_device(op, {&x, &dy});
  check_floating(op, "x", x);
  check_floating(op, "dy", dy);
  ALLOY_CHECK(relu_avg_pool2d_fuses(params, Layout::nchw), op,
              ": only 2x2 windows at stride 2 without padding");
  const Shape x_nchw = nchw_shape(op, x.shape(), Layout::nchw);
  const Shape y_shape = output_shape(op, x_nchw, params);
  check_shape(op, "dy", dy, y_shape);
  Tensor dx = Tensor::empty(x_nchw, dy.dtype(), device, MemoryCategory::activations);
  const cpu::Pool2dGeometry g = geometry(x_nchw, y_shape, params);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::relu_avg_pool2d_backward(x.raw(), x.dtype(), dy.raw(), dx.raw(), dy.dtype(), g,
                                     cuda::stream_of(device));
      return dx;
    });
  cpu::relu_avg_pool2d_backward(x.raw(), x.dtype(), dy.raw(), dx.raw(), dy.dtype(), g);
  return dx;
}

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& params, Layout layout) {
  constexpr const char* op = "max_pool2d_forward";
  const Device device = common_device(op, {&x});
  check_floating(op, "x", x);
  const Shape x_nchw = nchw_shape(op, x.shape(), layout);
  const Shape y_shape = output_shape(op, x_nchw, params);
  MaxPoolResult result;
  if (layout == Layout::nhwc && !device.is_cuda()) {
    const MaxPoolResult nchw = max_pool2d_forward(to_channels_first(x), params);
    result.y = to_channels_last(nchw.y);
    result.argmax = to_channels_last(nchw.argmax);
    return result;
  }
  result.y =
      Tensor::empty(physical(y_shape, layout), x.dtype(), device, MemoryCategory::activations);
  result.argmax = Tensor::empty(result.y.shape(), DType::i32, device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      const cpu::Pool2dGeometry g = geometry(x_nchw, y_shape, params);
      if (layout == Layout::nhwc) {
        cuda::max_pool2d_forward_channels_last(x.raw(), result.y.raw(),
                                               result.argmax.data<std::int32_t>(), x.dtype(), g,
                                               x_nchw[1], cuda::stream_of(device));
      } else {
        cuda::max_pool2d_forward(x.raw(), result.y.raw(), result.argmax.data<std::int32_t>(),
                                 x.dtype(), g, cuda::stream_of(device));
      }
      return result;
    });
  cpu::max_pool2d_forward(x.raw(), result.y.raw(), result.argmax.data<std::int32_t>(), x.dtype(),
                          geometry(x_nchw, y_shape, params));
  return result;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape,
                           Layout layout) {
  constexpr const char* op = "max_pool2d_backward";
  const Device device = common_device(op, {&dy, &argmax});
  check_floating(op, "dy", dy);
  check_rank(op, "dy", dy, 4);
  check_dtype(op, "argmax", argmax, DType::i32);
  check_shape(op, "argmax", argmax, dy.shape());
  const Shape y_nchw = nchw_shape(op, dy.shape(), layout);
  const Shape x_nchw = nchw_shape(op, x_shape, layout);
  ALLOY_CHECK(x_nchw[0] == y_nchw[0] && x_nchw[1] == y_nchw[1], op, ": input shape ",
              shape_str(x_shape), " does not match dy ", dy.str(), " (", layout_name(layout), ")");
  ALLOY_CHECK(x_nchw[2] * x_nchw[3] <= std::numeric_limits<std::int32_t>::max(), op,
              ": input plane of ", shape_str(x_shape), " is too large");
  if (layout == Layout::nhwc && !device.is_cuda()) {
    return to_channels_last(
        max_pool2d_backward(to_channels_first(dy), to_channels_first(argmax), x_nchw));
  }
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), device, MemoryCategory::activations);
  const cpu::Pool2dGeometry g = geometry(x_nchw, y_nchw, Pool2dParams{});
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // Half gradients accumulate in fp32 scratch and are rounded once, as on the CPU.
      Tensor scratch;
      if (dy.dtype() != DType::f32) {
        scratch = Tensor::empty(x_shape, DType::f32, device, MemoryCategory::workspace);
      }
      float* const accumulator = scratch.defined() ? scratch.data<float>() : nullptr;
      if (layout == Layout::nhwc) {
        cuda::max_pool2d_backward_channels_last(dy.raw(), argmax.data<std::int32_t>(), dx.raw(),
                                                accumulator, dy.dtype(), g, x_nchw[1],
                                                cuda::stream_of(device));
      } else {
        cuda::max_pool2d_backward(dy.raw(), argmax.data<std::int32_t>(), dx.raw(), accumulator,
                                  dy.dtype(), g, cuda::stream_of(device));
      }
      return dx;
    });
  cpu::max_pool2d_backward(dy.raw(), argmax.data<std::int32_t>(), dx.raw(), dy.dtype(), g);
  return dx;
}

}  // namespace alloy
