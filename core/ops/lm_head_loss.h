// A language model's tied output head and its loss, taken in chunks of rows so that the
// [N, V] logits of a whole batch never exist: for each chunk of hidden states h [n, C],
//   logits = h wte^T                      (gemm, fp32 accumulation, h's dtype: core/ops/linear.h)
//   loss, dlogits = softmax cross-entropy (fp32, core/ops/softmax_cross_entropy.h), the
//                   gradient times loss_scale / gradient_rows
//   dh = dlogits wte;  dwte += dlogits^T h
// and the chunk's logits and dlogits are freed before the next. Both backends run the kernels
// of those two ops, so this op has no kernel of its own. The loss goes to a step tally
// (core/ops/step_tally.h): loss_sum += mean chunk loss x chunk rows, in double, chunk by chunk,
// and the count of rows whose largest logit is the target.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// Rows per chunk for a vocabulary of `vocab` logits of `dtype`: about 64 MiB of logits, at
// least one row, at most `rows`.
std::int64_t lm_head_chunk_rows(std::int64_t rows, std::int64_t vocab, DType dtype);

// h: [N, C]; wte: [V, C] in h's dtype (the table as the forward computed with it); targets: i32
// [N] in [0, V); loss_scale: f32 [1]; tally: a step tally; dwte: [V, C], h's dtype or f32, added
// to. gradient_rows: the rows the loss is a mean over (0: N). chunk_rows: 0 for
// lm_head_chunk_rows. Returns dh [N, C] in h's dtype.
Tensor lm_head_loss_step(const Tensor& h, const Tensor& wte, const Tensor& targets,
                         const Tensor& loss_scale, Tensor& tally, Tensor& dwte,
                         std::int64_t gradient_rows = 0, std::int64_t chunk_rows = 0);

// Evaluation: the loss of every row added to `tally`, no gradients.
void lm_head_loss(const Tensor& h, const Tensor& wte, const Tensor& targets, Tensor& tally,
                  std::int64_t chunk_rows = 0);

}  // namespace alloy
