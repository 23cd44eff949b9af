// Token plus learned position embedding, GPT-2's input layer: for tokens [B, T] (i32),
//   y[b, t, :] = round(wte[tokens[b, t], :] + wpe[t, :])        (fp32 add, rounded once)
// wte [V, C] and wpe [P, C] (P >= T) share one floating dtype, which y [B, T, C] takes.
//
// Backward adds into dwte and dwpe (f32 or the tables' dtype):
//   dwte[v, c] += S_v,c with S_v,c = the fp32 sum of dy[i, c] over the positions i (flattened
//                 b * T + t) holding token v, summed from zero in increasing i;
//   dwpe[t, c] += the fp32 sum over b of dy[b, t, c], from zero in increasing b;
// each parameter gradient rounded once into its dtype. The order of every sum is fixed by the
// tokens alone (no atomics): the CPU and CUDA kernels give the same bits for f32 gradients,
// whatever the thread count or launch shape.
//
// Tokens outside [0, V) are an Error on the CPU; the CUDA kernel, which cannot report without
// a host wait, writes NaN rows for them, so the loss shows it (the data loaders check tokens).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

Tensor embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe);

// dy: [B, T, C] of any floating dtype. Accumulates into dwte [V, C] and dwpe [P, C].
void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe);

struct EmbeddingGeometry {
  std::int64_t batch = 0, time = 0, channels = 0, vocab = 0, positions = 0;
};

namespace cpu {
// y in `dtype` (the tables'). Throws on a token outside [0, vocab).
void embedding_forward(const std::int32_t* tokens, const void* wte, const void* wpe, DType dtype,
                       const EmbeddingGeometry& g, void* y);
// sums: f32 [vocab, channels] scratch, zero on entry. dwte, dwpe: f32 or half storage, added to.
void embedding_backward(const void* dy, DType dy_dtype, const std::int32_t* tokens,
                        const EmbeddingGeometry& g, float* sums, void* dwte, DType dwte_dtype,
                        void* dwpe, DType dwpe_dtype);
}  // namespace cpu

}  // namespace alloy
