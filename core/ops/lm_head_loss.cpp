#include "core/ops/lm_head_loss.h"

#include <algorithm>

#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/softmax_cross_entropy.h"

namespace alloy {

namespace {

constexpr std::int64_t kChunkBytes = std::int64_t{64} << 20;

void check_inputs(const char* op, const Tensor& h, const Tensor& wte, const Tensor& targets) {
  check_floating(op, "h", h);
  check_rank(op, "h", h, 2);
  if (wte.dtype() != DType::f32 || !is_half(h.dtype())) check_dtype(op, "wte", wte, h.dtype());
  check_rank(op, "wte", wte, 2);
  ALLOY_CHECK(wte.dim(1) == h.dim(1), op, ": h ", h.str(), " and wte ", wte.str(),
              " need the same number of channels");
  check_dtype(op, "targets", targets, DType::i32);
  check_shape(op, "targets", targets, {h.dim(0)});
  ALLOY_CHECK(h.dim(0) > 0, op, ": no rows");
}

// Rows [first, first + count) of a 2-D or 1-D tensor, sharing its storage.
Tensor rows_of(const Tensor& tensor, std::int64_t first, std::int64_t count) {
  Shape shape = tensor.shape();
  const std::int64_t row_elements = tensor.numel() / shape[0];
  shape[0] = count;
  return tensor.view(static_cast<std::size_t>(first * row_elements) * dtype_size(tensor.dtype()),
                     shape, tensor.dtype());
}

template <class Body>
void for_each_chunk(std::int64_t rows, std::int64_t chunk_rows, const Body& body) {
  for (std::int64_t first = 0; first < rows; first += chunk_rows)
    body(first, std::min(chunk_rows, rows - first));
}

// The table in h's dtype for cuBLAS's half GEMMs: an fp32 table rounded for the op's length.
Tensor cuda_table(const Tensor& h, const Tensor& wte) {
  return wte.dtype() == h.dtype() ? wte : cast(wte, h.dtype(), MemoryCategory::workspace);
}

Tensor chunk_logits(const Tensor& part, const Tensor& wte, const Tensor& table) {
  if (part.device().is_cuda()) return linear_forward(part, table, Tensor());
  Tensor logits = Tensor::empty({part.dim(0), wte.dim(0)}, part.dtype(), part.device(),
                                MemoryCategory::activations);
  cpu::lm_head_logits(part, wte, logits);
  return logits;
}

}  // namespace

std::int64_t lm_head_chunk_rows(std::int64_t rows, std::int64_t vocab) {
  const std::int64_t row_bytes = vocab * static_cast<std::int64_t>(sizeof(float));
  return std::clamp<std::int64_t>(kChunkBytes / std::max<std::int64_t>(row_bytes, 1), 1,
                                  std::max<std::int64_t>(rows, 1));
}

Tensor lm_head_loss_step(const Tensor& h, const Tensor& wte, const Tensor& targets,
                         const Tensor& loss_scale, Tensor& tally, Tensor& dwte,
                         std::int64_t gradient_rows, std::int64_t chunk_rows,
                         float label_smoothing) {
  constexpr const char* op = "lm_head_loss_step";
  const Device device = common_device(op, {&h, &wte, &targets, &loss_scale, &tally, &dwte});
  check_inputs(op, h, wte, targets);
  const std::int64_t rows = h.dim(0);
  if (gradient_rows == 0) gradient_rows = rows;
  if (chunk_rows <= 0) chunk_rows = lm_head_chunk_rows(rows, wte.dim(0));
  check_accumulator_dtype(op, "dwte", dwte, h.dtype());
  check_shape(op, "dwte", dwte, {wte.dim(0), wte.dim(1)});
  Tensor dh = Tensor::empty(h.shape(), h.dtype(), device, MemoryCategory::activations);
  const Tensor table = device.is_cuda() ? cuda_table(h, wte) : Tensor();
  Tensor no_bias;
  for_each_chunk(rows, chunk_rows, [&](std::int64_t first, std::int64_t count) {
    const Tensor part = rows_of(h, first, count);
    const Tensor dlogits =
        softmax_cross_entropy_step(chunk_logits(part, wte, table), rows_of(targets, first, count),
                                   loss_scale, tally, gradient_rows, label_smoothing)
            .dlogits;
    Tensor target = rows_of(dh, first, count);
    if (device.is_cpu()) {
      cpu::lm_head_backward(part, wte, dlogits, dwte, target);
      return;
    }
    target.copy_from(linear_backward(part, table, dlogits, dwte, no_bias, true).dx);
  });
  return dh;
}

void lm_head_loss(const Tensor& h, const Tensor& wte, const Tensor& targets, Tensor& tally,
                  std::int64_t chunk_rows) {
  constexpr const char* op = "lm_head_loss";
  const Device device = common_device(op, {&h, &wte, &targets, &tally});
  check_inputs(op, h, wte, targets);
  const std::int64_t rows = h.dim(0);
  if (chunk_rows <= 0) chunk_rows = lm_head_chunk_rows(rows, wte.dim(0));
  // The step's kernel with a zero scale: the loss and tally of the training step, bit for bit;
  // its gradient is dropped.
  Tensor zero = Tensor::zeros({1}, DType::f32, device, MemoryCategory::workspace);
  const Tensor table = device.is_cuda() ? cuda_table(h, wte) : Tensor();
  for_each_chunk(rows, chunk_rows, [&](std::int64_t first, std::int64_t count) {
    softmax_cross_entropy_step(chunk_logits(rows_of(h, first, count), wte, table),
                               rows_of(targets, first, count), zero, tally);
  });
}

}  // namespace alloy
