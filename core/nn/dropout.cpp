#include "core/nn/dropout.h"

namespace alloy::nn {

namespace {

thread_local const DropoutStream* active_stream = nullptr;

}  // namespace

DropoutStreamScope::DropoutStreamScope(const DropoutStream& stream)
    : stream_(stream), previous_(active_stream) {
  ALLOY_CHECK(stream.step_count != nullptr && stream.step_count->defined(),
              "DropoutStreamScope: needs the optimizer's step count tensor");
  active_stream = &stream_;
}

DropoutStreamScope::~DropoutStreamScope() {
  active_stream = previous_;
}

const DropoutStream* active_dropout_stream() {
  return active_stream;
}

Dropout::Dropout(float p, Generator& generator)
    : p_(p), key_(generator.next_u64()), mask_(make_dropout_mask("Dropout", p, key_, 0, 1)) {}

std::string Dropout::options() const {
  return detail::concat("p=", p_);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!training() || p_ == 0.0f) return x;
  const DropoutStream* stream = active_dropout_stream();
  ALLOY_CHECK(stream != nullptr, "Dropout (p=", p_,
              "): a training forward needs the step's random stream; run it inside "
              "app::train_step or an nn::DropoutStreamScope");
  const DropoutMask mask =
      make_dropout_mask("Dropout", p_, key_, stream->row_start, stream->row_stride);
  Tensor y = dropout_forward(x, mask, *stream->step_count);
  if (keeps_activations()) {
    mask_ = mask;
    step_ = *stream->step_count;
  }
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (p_ == 0.0f) return dy;
  ALLOY_CHECK(step_.defined(), "Dropout (p=", p_, "): backward without a training forward");
  Tensor dx = dropout_backward(dy, mask_, step_);
  step_ = Tensor();
  return dx;
}

}  // namespace alloy::nn
