// A language model's tied output head and its loss, taken in chunks of rows so that the
// [N, V] logits of a whole batch never exist: for each chunk of hidden states h [n, C],
//   logits = h wte^T                      (gemm, fp32 accumulation, h's dtype: core/ops/linear.h)
//   loss, dlogits = softmax cross-entropy (fp32, core/ops/softmax_cross_entropy.h), the
//                   gradient times loss_scale / gradient_rows
//   dh = dlogits wte;  dwte += dlogits^T h
// and the chunk's logits and dlogits are freed before the next. CUDA runs the kernels of those
// two ops (half GEMMs natively). The CPU computes in fp32 and so widens half operands: its two
// GEMMs below take the table one block of vocabulary rows at a time, never a whole fp32 copy;
// the fp32 path is the linear layer's GEMMs unchanged. At half dtypes the CPU's dh sums the
// blocks' fp32 products in turn, not in one GEMM, so its bits differ from the unblocked sum's
// (within the half result's rounding). The loss goes to a step tally
// (core/ops/step_tally.h): loss_sum += mean chunk loss x chunk rows, in double, chunk by chunk,
// and the count of rows whose largest logit is the target.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// Rows per chunk for a vocabulary of `vocab`: about 64 MiB of fp32 logits whatever h's dtype
// (the softmax and the CPU's GEMMs are fp32; half logits take half of it), at least one row, at
// most `rows`.
std::int64_t lm_head_chunk_rows(std::int64_t rows, std::int64_t vocab);

// h: [N, C]; wte: [V, C] in h's dtype, or fp32 with half h, for O1's fp32 table: the op rounds it
// to h's dtype as a cast would (the CPU block by block, CUDA whole for the op); targets: i32
// [N] in [0, V); loss_scale: f32 [1]; tally: a step tally; dwte: [V, C], h's dtype or f32, added
// to. gradient_rows: the rows the loss is a mean over (0: N). chunk_rows: 0 for
// lm_head_chunk_rows. label_smoothing: as PyTorch's CrossEntropyLoss(label_smoothing), in the
// loss, its tally and its gradient (core/ops/softmax_cross_entropy.h; 0: none, bit for bit).
// Returns dh [N, C] in h's dtype.
Tensor lm_head_loss_step(const Tensor& h, const Tensor& wte, const Tensor& targets,
                         const Tensor& loss_scale, Tensor& tally, Tensor& dwte,
                         std::int64_t gradient_rows = 0, std::int64_t chunk_rows = 0,
                         float label_smoothing = 0.0f);

// Evaluation: the loss of every row added to `tally`, no gradients.
void lm_head_loss(const Tensor& h, const Tensor& wte, const Tensor& targets, Tensor& tally,
                  std::int64_t chunk_rows = 0);

namespace cpu {
// The CPU's GEMMs of one chunk. logits: [n, V] in h's dtype, written. dwte: [V, C] in h's dtype
// or f32, added to; dh: [n, C] in h's dtype, written.
void lm_head_logits(const Tensor& h, const Tensor& wte, Tensor& logits);
void lm_head_backward(const Tensor& h, const Tensor& wte, const Tensor& dlogits, Tensor& dwte,
                      Tensor& dh);
}  // namespace cpu

}  // namespace alloy
