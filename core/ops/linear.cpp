#include "core/ops/linear.h"

#include <limits>
#include <optional>

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/linear.h"
#endif

namespace alloy {

namespace {

struct LinearSizes {
  int batch, in, out;
};

// Checks x, w and b (b may be undefined) and returns the layer's sizes.
LinearSizes check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  check_floating(op, "x", x);
  check_rank(op, "x", x, 2);
  check_dtype(op, "w", w, x.dtype());
  check_rank(op, "w", w, 2);
  ALLOY_CHECK(w.dim(1) == x.dim(1), op, ": x has ", x.dim(1), " features but w ", w.str(),
              " expects ", w.dim(1));
  if (b.defined()) {
    check_dtype(op, "b", b, x.dtype());
    check_shape(op, "b", b, {w.dim(0)});
  }
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  ALLOY_CHECK(x.dim(0) <= limit && x.dim(1) <= limit && w.dim(0) <= limit, op, ": sizes of ",
              x.str(), " and ", w.str(), " exceed the BLAS int range");
  return {static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)), static_cast<int>(w.dim(0))};
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  constexpr const char* op = "linear_forward";
  const Device device = common_device(op, {&x, &w, &b});
  const LinearSizes sizes = check_linear(op, x, w, b);
  Tensor y =
      Tensor::empty({sizes.batch, sizes.out}, x.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::DeviceContext& ctx = cuda::context(device);
      cuda::linear_forward(ctx.cublas.get(), ctx.stream.get(), sizes.batch, sizes.in, sizes.out,
                           x.raw(), w.raw(), b.defined() ? b.raw() : nullptr, y.raw(), x.dtype());
      return y;
    });
  const cpu::FloatInput x_float(x);
  const cpu::FloatInput w_float(w);
  std::optional<cpu::FloatInput> b_float;
  if (b.defined()) b_float.emplace(b);
  cpu::FloatOutput y_float(y, false);
  cpu::linear_forward(sizes.batch, sizes.in, sizes.out, x_float.data(), w_float.data(),
                      b_float ? b_float->data() : nullptr, y_float.data());
  y_float.commit();
  return y;
}

LinearGrads linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw,
                            Tensor& db, bool need_dx) {
  constexpr const char* op = "linear_backward";
  const Device device = common_device(op, {&x, &w, &dy, &dw, &db});
  const LinearSizes sizes = check_linear(op, x, w, Tensor());
  check_dtype(op, "dy", dy, x.dtype());
  check_shape(op, "dy", dy, {sizes.batch, sizes.out});
  check_accumulator_dtype(op, "dw", dw, x.dtype());
  check_shape(op, "dw", dw, w.shape());
  if (db.defined()) {
    check_accumulator_dtype(op, "db", db, x.dtype());
    check_shape(op, "db", db, {sizes.out});
  }
  LinearGrads grads;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::DeviceContext& ctx = cuda::context(device);
      if (need_dx) {
        grads.dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
      }
      cuda::linear_backward(ctx.cublas.get(), ctx.stream.get(), sizes.batch, sizes.in, sizes.out,
                            x.raw(), w.raw(), dy.raw(), x.dtype(), dw.raw(), dw.dtype(),
                            db.defined() ? db.raw() : nullptr, db.dtype(),
                            need_dx ? grads.dx.raw() : nullptr);
      return grads;
    });
  const cpu::FloatInput dy_float(dy);
  {
    // Half x's fp32 copy is gone before dx's is made: the two never coexist.
    const cpu::FloatInput x_float(x);
    cpu::FloatOutput dw_float(dw, true);
    std::optional<cpu::FloatOutput> db_float;
    if (db.defined()) db_float.emplace(db, true);
    cpu::linear_backward(sizes.batch, sizes.in, sizes.out, x_float.data(), nullptr, dy_float.data(),
                         dw_float.data(), db_float ? db_float->data() : nullptr, nullptr);
    dw_float.commit();
    if (db_float) db_float->commit();
  }
  if (need_dx) {
    grads.dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
    const cpu::FloatInput w_float(w);
    cpu::FloatOutput dx_float(grads.dx, false);
    cpu::linear_backward(sizes.batch, sizes.in, sizes.out, nullptr, w_float.data(), dy_float.data(),
                         nullptr, nullptr, dx_float.data());
    dx_float.commit();
  }
  return grads;
}

}  // namespace alloy
