#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/embedding.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void forward_kernel(const std::int32_t* tokens, const T* wte, const T* wpe,
                               EmbeddingGeometry g, T* y) {
  const std::int64_t count = g.batch * g.time * g.channels;
  ALLOY_GRID_STRIDE(k, count) {
    const std::int64_t i = k / g.channels;
    const std::int64_t j = k - i * g.channels;
    const std::int64_t t = i % g.time;
    const std::int32_t token = tokens[i];
    const float value = token >= 0 && token < g.vocab
                            ? widen(wte[token * g.channels + j]) + widen(wpe[t * g.channels + j])
                            : nanf("");  // the row shows the bad token
    y[k] = narrow<T>(value);
  }
}

// One thread per channel: the only writer of column j of `sums` and of dwpe.
template <class D>
__global__ void backward_kernel(const D* dy, const std::int32_t* tokens, EmbeddingGeometry g,
                                float* sums, void* dwpe, DType dwpe_dtype) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= g.channels) return;
  const std::int64_t rows = g.batch * g.time;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int32_t token = tokens[i];
    if (token < 0 || token >= g.vocab) continue;
    float* element = sums + token * g.channels + j;
    *element += widen(dy[i * g.channels + j]);
  }
  for (std::int64_t t = 0; t < g.time; ++t) {
    float sum = 0.0f;
    for (std::int64_t b = 0; b < g.batch; ++b)
      sum += widen(dy[(b * g.time + t) * g.channels + j]);
    const std::int64_t p = t * g.channels + j;
    store_any(dwpe, dwpe_dtype, p, load_any(dwpe, dwpe_dtype, p) + sum);
  }
}

__global__ void add_sums_kernel(const float* sums, std::int64_t count, void* dwte,
                                DType dwte_dtype) {
  ALLOY_GRID_STRIDE(i, count) {
    store_any(dwte, dwte_dtype, i, load_any(dwte, dwte_dtype, i) + sums[i]);
  }
}

}  // namespace

void embedding_forward(const std::int32_t* tokens, const void* wte, const void* wpe, DType dtype,
                       const EmbeddingGeometry& g, void* y, cudaStream_t stream) {
  const std::int64_t count = g.batch * g.time * g.channels;
  if (count == 0) return;
  dispatch_floating(dtype, "embedding_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(forward_kernel, grid_for(count), kThreads, 0, stream)
    (tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe), g, static_cast<T*>(y));
    ALLOY_CUDA_CHECK_LAUNCH("embedding forward_kernel over ", g.batch, "x", g.time, "x",
                            g.channels);
  });
}

void embedding_backward(const void* dy, DType dy_dtype, const std::int32_t* tokens,
                        const EmbeddingGeometry& g, float* sums, void* dwte, DType dwte_dtype,
                        void* dwpe, DType dwpe_dtype, cudaStream_t stream) {
  if (g.channels == 0) return;
  constexpr unsigned int kChannelThreads = 64;
  const auto blocks =
      static_cast<unsigned int>((g.channels + kChannelThreads - 1) / kChannelThreads);
  dispatch_floating(dy_dtype, "embedding_backward", [&](auto type) {
    using D = decltype(type);
    ALLOY_LAUNCH(backward_kernel, blocks, kChannelThreads, 0, stream)
    (static_cast<const D*>(dy), tokens, g, sums, dwpe, dwpe_dtype);
    ALLOY_CUDA_CHECK_LAUNCH("embedding backward_kernel over ", g.batch, "x", g.time, "x",
                            g.channels);
  });
  const std::int64_t count = g.vocab * g.channels;
  ALLOY_LAUNCH(add_sums_kernel, grid_for(count), kThreads, 0, stream)
  (sums, count, dwte, dwte_dtype);
  ALLOY_CUDA_CHECK_LAUNCH("embedding add_sums_kernel over ", g.vocab, "x", g.channels);
}

}  // namespace alloy::cuda
