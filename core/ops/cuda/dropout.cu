#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/dropout.h"
#include "core/ops/cuda/int_divider.h"

namespace alloy::cuda {

namespace {

// One thread per 4 columns of a row: one Philox call gives their 4 words. The host cuts the
// tensor into pieces of whole rows under 2^31 elements, so the thread index splits into (row,
// group) with a 32-bit fast divider. With `packed` (columns a multiple of 4, both pointers
// aligned to 4 elements) a thread moves its 4 elements with one load and one store.
template <class T>
__global__ void dropout_kernel(const T* in, T* out, IntDivider groups, unsigned int columns,
                               unsigned int threads, bool packed, DropoutMask mask,
                               const std::int32_t* step) {
  const auto step_word = static_cast<std::uint32_t>(step[0]);
  ALLOY_GRID_STRIDE_32(i, threads) {
    const IntDivider::QuotientRemainder rg = groups.divmod(i);
    const unsigned int row = rg.quotient, group = rg.remainder;
    const auto g = static_cast<std::uint32_t>(mask.row_start + mask.row_stride * row);
    const Philox4x32 bits = dropout_bits(mask.key, step_word, g, group);
    const unsigned int first = row * columns + group * 4;
    if (packed) {
      Pack<T, 4> values = *reinterpret_cast<const Pack<T, 4>*>(in + first);
      for (int j = 0; j < 4; ++j) {
        const float factor = bits.v[j] < mask.threshold ? 0.0f : mask.scale;
        values.v[j] = narrow<T>(widen(values.v[j]) * factor);
      }
      *reinterpret_cast<Pack<T, 4>*>(out + first) = values;
    } else {
      const unsigned int count = min(columns - group * 4, 4u);
      for (unsigned int j = 0; j < count; ++j) {
        const float factor = bits.v[j] < mask.threshold ? 0.0f : mask.scale;
        out[first + j] = narrow<T>(widen(in[first + j]) * factor);
      }
    }
  }
}

}  // namespace

void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step, cudaStream_t stream) {
  if (rows * columns == 0) return;
  dispatch_floating(dtype, "dropout", [&](auto type) {
    using T = decltype(type);
    const auto* from = static_cast<const T*>(in);
    auto* to = static_cast<T*>(out);
    const auto aligned = [](const void* pointer) {
      return reinterpret_cast<std::uintptr_t>(pointer) % (4 * sizeof(T)) == 0;
    };
    const bool packed = columns % 4 == 0 && aligned(from) && aligned(to);
    for_each_piece(rows, columns, "dropout", [&](std::int64_t first, std::int64_t piece_rows) {
      const std::int64_t groups = (columns + 3) / 4;
      const std::int64_t threads = piece_rows * groups;
      DropoutMask piece_mask = mask;
      piece_mask.row_start += mask.row_stride * first;
      ALLOY_LAUNCH(dropout_kernel, grid_for(threads), kThreads, 0, stream)
      (from + first * columns, to + first * columns, IntDivider(static_cast<std::uint32_t>(groups)),
       static_cast<unsigned int>(columns), static_cast<unsigned int>(threads), packed, piece_mask,
       step);
      ALLOY_CUDA_CHECK_LAUNCH("dropout_kernel on ", piece_rows, " x ", columns, " elements");
    });
  });
}

}  // namespace alloy::cuda
