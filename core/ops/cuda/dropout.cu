#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/dropout.h"

namespace alloy::cuda {

namespace {

// One thread per 4 columns of a row: one Philox call gives their 4 words.
template <class T>
__global__ void dropout_kernel(const T* in, T* out, std::int64_t rows, std::int64_t columns,
                               DropoutMask mask, const std::int32_t* step) {
  const std::int64_t groups = (columns + 3) / 4;
  const auto step_word = static_cast<std::uint32_t>(step[0]);
  ALLOY_GRID_STRIDE(i, rows * groups) {
    const std::int64_t row = i / groups;
    const std::int64_t group = i % groups;
    const auto g = static_cast<std::uint32_t>(mask.row_start + mask.row_stride * row);
    const Philox4x32 bits = dropout_bits(mask.key, step_word, g, static_cast<std::uint32_t>(group));
    const std::int64_t first = group * 4;
    const int count = columns - first < 4 ? static_cast<int>(columns - first) : 4;
    for (int j = 0; j < count; ++j) {
      const float factor = bits.v[j] < mask.threshold ? 0.0f : mask.scale;
      const std::int64_t index = row * columns + first + j;
      out[index] = narrow<T>(widen(in[index]) * factor);
    }
  }
}

}  // namespace

void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step, cudaStream_t stream) {
  const std::int64_t threads = rows * ((columns + 3) / 4);
  if (threads == 0) return;
  dispatch_floating(dtype, "dropout", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(dropout_kernel, grid_for(threads), kThreads, 0, stream)
    (static_cast<const T*>(in), static_cast<T*>(out), rows, columns, mask, step);
  });
  ALLOY_CUDA_CHECK_LAUNCH("dropout_kernel on ", rows, " x ", columns, " elements");
}

}  // namespace alloy::cuda
