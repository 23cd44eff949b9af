#include "core/ops/embedding.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/embedding.h"
#endif

namespace alloy {

namespace {

EmbeddingGeometry check_tables(const char* op, const Tensor& tokens, const Tensor& wte,
                               const Tensor& wpe) {
  check_dtype(op, "tokens", tokens, DType::i32);
  check_rank(op, "tokens", tokens, 2);
  check_rank(op, "wte", wte, 2);
  check_rank(op, "wpe", wpe, 2);
  EmbeddingGeometry g;
  g.batch = tokens.dim(0);
  g.time = tokens.dim(1);
  g.vocab = wte.dim(0);
  g.channels = wte.dim(1);
  g.positions = wpe.dim(0);
  ALLOY_CHECK(wpe.dim(1) == g.channels, op, ": wte ", wte.str(), " and wpe ", wpe.str(),
              " need the same number of channels");
  ALLOY_CHECK(g.time <= g.positions, op, ": ", g.time, " positions per sequence, but wpe ",
              wpe.str(), " has ", g.positions);
  return g;
}

}  // namespace

Tensor embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  constexpr const char* op = "embedding_forward";
  const Device device = common_device(op, {&tokens, &wte, &wpe});
  check_floating(op, "wte", wte);
  check_dtype(op, "wpe", wpe, wte.dtype());
  const EmbeddingGeometry g = check_tables(op, tokens, wte, wpe);
  Tensor y = Tensor::empty({g.batch, g.time, g.channels}, wte.dtype(), device,
                           MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, embedding_forward, tokens.data<std::int32_t>(), wte.raw(), wpe.raw(),
                   wte.dtype(), g, y.raw());
  return y;
}

void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe) {
  constexpr const char* op = "embedding_backward";
  const Device device = common_device(op, {&dy, &tokens, &dwte, &dwpe});
  check_floating(op, "dy", dy);
  check_floating(op, "dwte", dwte);
  check_floating(op, "dwpe", dwpe);
  const EmbeddingGeometry g = check_tables(op, tokens, dwte, dwpe);
  check_shape(op, "dy", dy, {g.batch, g.time, g.channels});
  // The per-row sums of the token table, formed from zero before they meet dwte: one rounding
  // into a half gradient, and the same order on every backend.
  Tensor sums = Tensor::zeros({g.vocab, g.channels}, DType::f32, device, MemoryCategory::workspace);
  ALLOY_RUN_KERNEL(op, device, embedding_backward, dy.raw(), dy.dtype(),
                   tokens.data<std::int32_t>(), g, sums.data<float>(), dwte.raw(), dwte.dtype(),
                   dwpe.raw(), dwpe.dtype());
}

}  // namespace alloy
