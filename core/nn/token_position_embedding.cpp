#include "core/nn/token_position_embedding.h"

#include "core/nn/new_parameter.h"
#include "core/ops/embedding.h"

namespace alloy::nn {

TokenPositionEmbedding::TokenPositionEmbedding(int vocab, int positions, int channels)
    : wte_(register_parameter("wte",
                              new_parameter("TokenPositionEmbedding", {vocab, channels}, 0.0f))),
      wpe_(register_parameter(
          "wpe", new_parameter("TokenPositionEmbedding", {positions, channels}, 0.0f))) {}

Tensor TokenPositionEmbedding::forward(const Tensor& tokens) {
  Tensor y = embedding_forward(tokens, wte_.value, wpe_.value);
  tokens_ = keeps_activations() ? tokens : Tensor();
  return y;
}

Tensor TokenPositionEmbedding::backward(const Tensor& dy) {
  ALLOY_CHECK(tokens_.defined(), "TokenPositionEmbedding (", wte_.name,
              "): backward without a training forward");
  embedding_backward(dy, tokens_, grad_of(wte_), grad_of(wpe_));
  tokens_ = Tensor();
  notify_grads_ready();
  return Tensor();
}

}  // namespace alloy::nn
