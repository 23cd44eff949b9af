#include "core/ops/layer_norm.h"

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/layer_norm.h"
#endif

namespace alloy {

namespace {

cpu::LayerNormGeometry check_input(const char* op, const Tensor& x) {
  check_floating(op, "x", x);
  ALLOY_CHECK(x.ndim() >= 1, op, ": x must have at least one dimension (the features), got ",
              x.str());
  const std::int64_t features = x.dim(x.ndim() - 1);
  ALLOY_CHECK(features > 0, op, ": x's last dimension (the features) must not be empty, got ",
              x.str());
  return {x.numel() / features, features};
}

// A per-feature tensor: [D], f32 or x's dtype.
void check_feature_tensor(const char* op, const char* what, const Tensor& tensor, const Tensor& x,
                          const cpu::LayerNormGeometry& g) {
  ALLOY_CHECK(tensor.defined(), op, ": ", what, " is an undefined tensor");
  ALLOY_CHECK(tensor.dtype() == DType::f32 || tensor.dtype() == x.dtype(), op, ": ", what,
              " must be f32 or x's dtype ", dtype_name(x.dtype()), ", got ", tensor.str());
  check_shape(op, what, tensor, {g.features});
}

Tensor row_statistic(std::int64_t rows, Device device) {
  return Tensor::empty({rows}, DType::f32, device, MemoryCategory::activations);
}

#ifdef ALLOY_HAVE_CUDA
cuda::FeatureData feature_data(const Tensor& tensor) {
  return {tensor.raw(), tensor.dtype()};
}
#endif

}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   float eps, bool save_statistics) {
  constexpr const char* op = "layer_norm_forward";
  const Device device = common_device(op, {&x, &weight, &bias});
  const cpu::LayerNormGeometry g = check_input(op, x);
  check_feature_tensor(op, "weight", weight, x, g);
  check_feature_tensor(op, "bias", bias, x, g);
  ALLOY_CHECK(eps >= 0.0f, op, ": eps must be non-negative, got ", eps);
  LayerNormResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  if (save_statistics) {
    result.saved.mean = row_statistic(g.rows, device);
    result.saved.rstd = row_statistic(g.rows, device);
  }
  float* mean = save_statistics ? result.saved.mean.data<float>() : nullptr;
  float* rstd = save_statistics ? result.saved.rstd.data<float>() : nullptr;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::layer_norm_forward(x.raw(), x.dtype(), g, feature_data(weight), feature_data(bias), eps,
                               result.y.raw(), mean, rstd, cuda::stream_of(device));
      return result;
    });
  const cpu::FloatInput w(weight);
  const cpu::FloatInput b(bias);
  cpu::layer_norm_forward(x.raw(), x.dtype(), g, w.data(), b.data(), eps, result.y.raw(), mean,
                          rstd);
  return result;
}

Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const LayerNormSaved& saved, Tensor& dweight, Tensor& dbias) {
  constexpr const char* op = "layer_norm_backward";
  const Device device =
      common_device(op, {&dy, &x, &weight, &saved.mean, &saved.rstd, &dweight, &dbias});
  const cpu::LayerNormGeometry g = check_input(op, x);
  check_floating(op, "dy", dy);
  check_shape(op, "dy", dy, x.shape());
  check_feature_tensor(op, "weight", weight, x, g);
  check_feature_tensor(op, "dweight", dweight, x, g);
  check_feature_tensor(op, "dbias", dbias, x, g);
  ALLOY_CHECK(saved.mean.defined() && saved.rstd.defined(), op,
              ": saved statistics are undefined (was the forward asked to save them?)");
  check_dtype(op, "saved mean", saved.mean, DType::f32);
  check_dtype(op, "saved rstd", saved.rstd, DType::f32);
  check_shape(op, "saved mean", saved.mean, {g.rows});
  check_shape(op, "saved rstd", saved.rstd, {g.rows});
  Tensor dx = Tensor::empty(x.shape(), dy.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::layer_norm_backward(dy.raw(), dy.dtype(), x.raw(), x.dtype(), g, feature_data(weight),
                                saved.mean.data<float>(), saved.rstd.data<float>(), dx.raw(),
                                feature_data(dweight), feature_data(dbias),
                                cuda::stream_of(device));
      return dx;
    });
  const cpu::FloatInput w(weight);
  cpu::FloatOutput dw(dweight, true);
  cpu::FloatOutput db(dbias, true);
  cpu::layer_norm_backward(dy.raw(), dy.dtype(), x.raw(), x.dtype(), g, w.data(),
                           saved.mean.data<float>(), saved.rstd.data<float>(), dx.raw(), dw.data(),
                           db.data());
  dw.commit();
  db.commit();
  return dx;
}

}  // namespace alloy
