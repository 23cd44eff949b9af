#include "core/ops/lm_head_loss.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/ops/cpu/convert.h"
#include "core/ops/cpu/float_buffer.h"
#include "core/ops/cpu/parallel.h"
#include "core/ops/gemm.h"

namespace alloy::cpu {

namespace {

// Rows of the table widened at a time for half operands: a few MiB of fp32 whatever the
// vocabulary, and wide enough for the GEMMs to run at full speed.
constexpr std::int64_t kVocabBlock = 2048;

struct HeadSizes {
  int rows, channels, vocab, block;
};

HeadSizes head_sizes(const Tensor& h, const Tensor& wte) {
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  ALLOY_CHECK(h.dim(0) <= limit && wte.dim(0) <= limit && wte.dim(1) <= limit,
              "lm_head_loss: sizes of ", h.str(), " and ", wte.str(), " exceed the BLAS int range");
  const int vocab = static_cast<int>(wte.dim(0));
  // fp32 operands are used in place, in one block: the GEMMs of a linear layer, bit for bit.
  const int block = h.dtype() == DType::f32
                        ? vocab
                        : static_cast<int>(std::min<std::int64_t>(kVocabBlock, vocab));
  return {static_cast<int>(h.dim(0)), static_cast<int>(h.dim(1)), vocab, block};
}

std::int64_t block_elements(const HeadSizes& s) {
  return static_cast<std::int64_t>(s.block) * s.channels;
}

// Table rows [first, first + count) as fp32, in h's dtype's values: in place when the table is
// fp32 and so is h; widened into `scratch` otherwise, an fp32 table first rounded to `dtype`
// (a half layer's copy of fp32 weights, made here one block at a time).
const float* table_rows(const Tensor& wte, DType dtype, int first, int count, int channels,
                        float* scratch) {
  const std::int64_t offset = static_cast<std::int64_t>(first) * channels;
  if (wte.dtype() != DType::f32) {
    to_float(static_cast<const std::uint16_t*>(wte.raw()) + offset, wte.dtype(), scratch,
             static_cast<std::int64_t>(count) * channels);
    return scratch;
  }
  if (dtype == DType::f32) return wte.data<float>() + offset;
  parallel_ranges(count, channels, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::uint16_t> rounded(static_cast<std::size_t>(channels));
    for (std::int64_t row = begin; row < end; ++row) {
      narrow_16(wte.data<float>() + offset + row * channels, rounded.data(), dtype, channels);
      widen_16(rounded.data(), dtype, scratch + row * channels, channels);
    }
  });
  return scratch;
}

// Columns [first, first + count) of the half [rows, vocab] matrix `matrix` into `out` (fp32
// [rows, count]), or back from it.
void widen_columns(const Tensor& matrix, int vocab, int first, int count, int rows, float* out) {
  const auto* in = static_cast<const std::uint16_t*>(matrix.raw());
  parallel_ranges(rows, count, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row)
      widen_16(in + row * vocab + first, matrix.dtype(), out + row * count, count);
  });
}

void narrow_columns(const float* in, int vocab, int first, int count, int rows, Tensor& matrix) {
  auto* out = static_cast<std::uint16_t*>(matrix.raw());
  parallel_ranges(rows, count, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row)
      narrow_16(in + row * count, out + row * vocab + first, matrix.dtype(), count);
  });
}

Tensor scratch_floats(std::int64_t count) {
  return Tensor::empty({count}, DType::f32, Device::cpu(), MemoryCategory::workspace);
}

}  // namespace

void lm_head_logits(const Tensor& h, const Tensor& wte, Tensor& logits) {
  const HeadSizes s = head_sizes(h, wte);
  const FloatInput h_float(h);
  const bool half = h.dtype() != DType::f32;
  Tensor table, out;
  if (half) {
    table = scratch_floats(block_elements(s));
    out = scratch_floats(static_cast<std::int64_t>(s.rows) * s.block);
  }
  // Each logit is a dot product over the channels alone, so blocks of columns give its value.
  for (int first = 0; first < s.vocab; first += s.block) {
    const int count = std::min(s.block, s.vocab - first);
    const float* rows =
        table_rows(wte, h.dtype(), first, count, s.channels, half ? table.data<float>() : nullptr);
    if (!half) {
      gemm(false, true, s.rows, count, s.channels, 1.0f, h_float.data(), s.channels, rows,
           s.channels, 0.0f, logits.data<float>() + first, s.vocab);
      continue;
    }
    gemm(false, true, s.rows, count, s.channels, 1.0f, h_float.data(), s.channels, rows, s.channels,
         0.0f, out.data<float>(), count);
    narrow_columns(out.data<float>(), s.vocab, first, count, s.rows, logits);
  }
}

void lm_head_backward(const Tensor& h, const Tensor& wte, const Tensor& dlogits, Tensor& dwte,
                      Tensor& dh) {
  const HeadSizes s = head_sizes(h, wte);
  const FloatInput h_float(h);
  FloatOutput dh_float(dh, false);
  const bool half = h.dtype() != DType::f32;
  const bool half_dwte = dwte.dtype() != DType::f32;
  Tensor table, gradient, dwte_rows;
  if (half) {
    table = scratch_floats(block_elements(s));
    gradient = scratch_floats(static_cast<std::int64_t>(s.rows) * s.block);
  }
  if (half_dwte) dwte_rows = scratch_floats(block_elements(s));
  for (int first = 0; first < s.vocab; first += s.block) {
    const int count = std::min(s.block, s.vocab - first);
    const std::int64_t offset = static_cast<std::int64_t>(first) * s.channels;
    // dlogits' columns of the block, with their row stride.
    const float* dy = gradient.defined() ? gradient.data<float>() : dlogits.data<float>() + first;
    const int ldy = half ? count : s.vocab;
    if (half) widen_columns(dlogits, s.vocab, first, count, s.rows, gradient.data<float>());
    // dwte's rows of the block are those columns' products with h: a sum over the rows, as in
    // one GEMM over the whole table.
    const std::int64_t dwte_elements = static_cast<std::int64_t>(count) * s.channels;
    float* dw = half_dwte ? dwte_rows.data<float>() : dwte.data<float>() + offset;
    if (half_dwte)
      to_float(static_cast<const std::uint16_t*>(dwte.raw()) + offset, dwte.dtype(), dw,
               dwte_elements);
    // dh sums over the vocabulary: each block adds its part in fp32, rounded once at the end.
    const float* rows =
        table_rows(wte, h.dtype(), first, count, s.channels, half ? table.data<float>() : nullptr);
    // The two products are independent, as a linear layer's are (cpu::linear_backward).
    gemm_pair({true, false, count, s.channels, s.rows, 1.0f, dy, ldy, h_float.data(), s.channels,
               1.0f, dw, s.channels},
              {false, false, s.rows, s.channels, count, 1.0f, dy, ldy, rows, s.channels,
               first == 0 ? 0.0f : 1.0f, dh_float.data(), s.channels});
    if (half_dwte)
      from_float(dw, static_cast<std::uint16_t*>(dwte.raw()) + offset, dwte.dtype(), dwte_elements);
  }
  dh_float.commit();
}

}  // namespace alloy::cpu
