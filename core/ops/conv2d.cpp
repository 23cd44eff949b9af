#include "core/ops/conv2d.h"

#include <limits>
#include <optional>

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"
#include "core/ops/permute.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d.h"
#endif

namespace alloy {

namespace {

Shape output_shape(const char* op, const Shape& x, const Shape& w, const Conv2dParams& params) {
  ALLOY_CHECK(x.size() == 4, op, ": x must be [N, C, H, W], got shape ", shape_str(x));
  ALLOY_CHECK(w.size() == 4, op, ": w must be [K, C, R, S], got shape ", shape_str(w));
  for (const Shape* shape : {&x, &w}) {
    for (const std::int64_t size : *shape) {
      ALLOY_CHECK(size >= 1, op, ": sizes must be positive, got x ", shape_str(x), " and w ",
                  shape_str(w));
    }
  }
  ALLOY_CHECK(params.stride_h >= 1 && params.stride_w >= 1, op, ": strides must be positive, got ",
              params.stride_h, "x", params.stride_w);
  ALLOY_CHECK(params.pad_h >= 0 && params.pad_w >= 0, op, ": padding must not be negative, got ",
              params.pad_h, "x", params.pad_w);
  ALLOY_CHECK(x[1] == w[1], op, ": x ", shape_str(x), " has ", x[1], " channels but w ",
              shape_str(w), " expects ", w[1]);
  const std::int64_t span_h = x[2] + 2 * static_cast<std::int64_t>(params.pad_h) - w[2];
  const std::int64_t span_w = x[3] + 2 * static_cast<std::int64_t>(params.pad_w) - w[3];
  ALLOY_CHECK(span_h >= 0 && span_w >= 0, op, ": kernel ", w[2], "x", w[3],
              " is larger than the padded input of x ", shape_str(x));
  return {x[0], w[0], span_h / params.stride_h + 1, span_w / params.stride_w + 1};
}

// x's NCHW sizes as a shape, for the checks and the geometry.
Shape nchw_shape(const char* op, const Shape& x, Layout layout) {
  const Nchw s = nchw_sizes(x, layout, op);
  return {s.n, s.c, s.h, s.w};
}

// Both shapes NCHW-ordered; the geometry carries `layout` to the CUDA kernels.
cpu::Conv2dGeometry geometry(const char* op, const Shape& x, const Shape& w, const Shape& y,
                             const Conv2dParams& params, Layout layout) {
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  // The kernels hand these products to BLAS as ints.
  ALLOY_CHECK(x[1] * w[2] * w[3] <= limit && x[0] * y[2] * y[3] <= limit, op, ": x ", shape_str(x),
              " with w ", shape_str(w), " exceeds the BLAS int range");
  return {static_cast<int>(x[0]),
          static_cast<int>(x[1]),
          static_cast<int>(x[2]),
          static_cast<int>(x[3]),
          static_cast<int>(w[0]),
          static_cast<int>(w[2]),
          static_cast<int>(w[3]),
          static_cast<int>(y[2]),
          static_cast<int>(y[3]),
          params,
          layout};
}

// The physical shape of an NCHW-ordered shape in `layout`.
Shape physical(const Shape& nchw, Layout layout) {
  return shape_in(layout, nchw[0], nchw[1], nchw[2], nchw[3]);
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& params,
                          Layout layout) {
  constexpr const char* op = "conv2d";
  return physical(output_shape(op, nchw_shape(op, x, layout), w, params), layout);
}

cpu::Conv2dGeometry conv2d_geometry(const Shape& x, const Shape& w, const Conv2dParams& params,
                                    Layout layout) {
  constexpr const char* op = "conv2d";
  return geometry(op, x, w, output_shape(op, x, w, params), params, layout);
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& params,
                      Layout layout) {
  constexpr const char* op = "conv2d_forward";
  const Device device = common_device(op, {&x, &w, &b});
  check_floating(op, "x", x);
  check_dtype(op, "w", w, x.dtype());
  const Shape x_nchw = nchw_shape(op, x.shape(), layout);
  const Shape y_nchw = output_shape(op, x_nchw, w.shape(), params);
  if (b.defined()) {
    check_dtype(op, "b", b, x.dtype());
    check_shape(op, "b", b, {w.dim(0)});
  }
  const cpu::Conv2dGeometry g = geometry(op, x_nchw, w.shape(), y_nchw, params, layout);
  if (layout == Layout::nhwc && !device.is_cuda()) {
    return to_channels_last(conv2d_forward(to_channels_first(x), w, b, params));
  }
  Tensor y =
      Tensor::empty(physical(y_nchw, layout), x.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::conv2d_forward(device, g, x.dtype(), x.raw(), w.raw(), b.defined() ? b.raw() : nullptr,
                           y.raw());
      return y;
    });
  const cpu::FloatInput w_float(w);
  std::optional<cpu::FloatInput> b_float;
  if (b.defined()) b_float.emplace(b);
  cpu::conv2d_forward(g, x.raw(), w_float.data(), b_float ? b_float->data() : nullptr, y.raw(),
                      x.dtype());
  return y;
}

Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw,
                            Tensor& db, const Conv2dParams& params, bool need_dx, Layout layout) {
  constexpr const char* op = "conv2d_backward";
  const Device device = common_device(op, {&x, &w, &dy, &dw, &db});
  check_floating(op, "x", x);
  check_dtype(op, "w", w, x.dtype());
  const Shape x_nchw = nchw_shape(op, x.shape(), layout);
  const Shape y_nchw = output_shape(op, x_nchw, w.shape(), params);
  check_dtype(op, "dy", dy, x.dtype());
  check_shape(op, "dy", dy, physical(y_nchw, layout));
  check_accumulator_dtype(op, "dw", dw, x.dtype());
  check_shape(op, "dw", dw, w.shape());
  if (db.defined()) {
    check_accumulator_dtype(op, "db", db, x.dtype());
    check_shape(op, "db", db, {w.dim(0)});
  }
  const cpu::Conv2dGeometry g = geometry(op, x_nchw, w.shape(), y_nchw, params, layout);
  if (layout == Layout::nhwc && !device.is_cuda()) {
    Conv2dGrads grads =
        conv2d_backward(to_channels_first(x), w, to_channels_first(dy), dw, db, params, need_dx);
    if (need_dx) grads.dx = to_channels_last(grads.dx);
    return grads;
  }
  Conv2dGrads grads;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      if (need_dx) {
        grads.dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
      }
      cuda::conv2d_backward(device, g, x.dtype(), x.raw(), w.raw(), dy.raw(), dw.raw(), dw.dtype(),
                            db.defined() ? db.raw() : nullptr, db.dtype(),
                            need_dx ? grads.dx.raw() : nullptr);
      return grads;
    });
  cpu::FloatOutput dw_float(dw, true);
  std::optional<cpu::FloatOutput> db_float;
  if (db.defined()) db_float.emplace(db, true);
  std::optional<cpu::FloatInput> w_float;
  if (need_dx) {
    grads.dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
    w_float.emplace(w);
  }
  cpu::conv2d_backward(g, x.raw(), w_float ? w_float->data() : nullptr, dy.raw(), dw_float.data(),
                       db_float ? db_float->data() : nullptr, need_dx ? grads.dx.raw() : nullptr,
                       x.dtype());
  dw_float.commit();
  if (db_float) db_float->commit();
  return grads;
}

}  // namespace alloy
