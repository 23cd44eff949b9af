#include "core/nn/residual.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/ops/elementwise.h"

namespace alloy::nn {

namespace {
std::unique_ptr<Module> non_null(std::unique_ptr<Module> body) {
  ALLOY_CHECK(body != nullptr, "Residual: the body is null");
  return body;
}
}  // namespace

Residual::Residual(std::unique_ptr<Module> body)
    : body_(register_module("body", non_null(std::move(body)))) {}

Tensor Residual::forward(const Tensor& x) {
  const Tensor branch = body_.forward(x);
  ALLOY_CHECK(branch.shape() == x.shape(), "Residual: the body (", body_.type_name(),
              ") maps an input of shape ", shape_str(x.shape()), " to ", shape_str(branch.shape()),
              "; the sum needs the same shape");
  const DType sum_dtype = compute_dtype(OpClass::promote, x.dtype(), branch.dtype());
  Tensor y = add(in_dtype(x, sum_dtype), in_dtype(branch, sum_dtype));
  input_dtype_ = x.dtype();
  body_dtype_ = branch.dtype();
  kept_ = keeps_activations();
  return y;
}

Tensor Residual::backward(const Tensor& dy) {
  ALLOY_CHECK(kept_, "Residual (body ", body_.type_name(),
              "): backward without a training forward");
  kept_ = false;
  body_.set_needs_input_grad(needs_input_grad());
  // The sum's gradient goes to each addend in that addend's dtype, as casting back would.
  const Tensor d_body = body_.backward(in_dtype(dy, body_dtype_));
  if (!needs_input_grad()) return Tensor();
  // One fp32 sum of the two paths, rounded once to the input's dtype.
  return add(in_dtype(dy, input_dtype_), d_body);
}

}  // namespace alloy::nn
