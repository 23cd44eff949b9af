#include "core/ops/embedding.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/ops/cpu/element_access.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Backward's unit of work: a band of this many channels over every position, so each table
// row's sums run in position order whichever thread takes the band.
constexpr std::int64_t kBandChannels = 16;

}  // namespace

void embedding_forward(const std::int32_t* tokens, const void* wte, const void* wpe, DType dtype,
                       const EmbeddingGeometry& g, void* y) {
  const std::int64_t rows = g.batch * g.time;
  for (std::int64_t i = 0; i < rows; ++i) {
    ALLOY_CHECK(tokens[i] >= 0 && tokens[i] < g.vocab, "embedding_forward: token ", tokens[i],
                " at position ", i, " is outside the vocabulary of ", g.vocab);
  }
  const std::int64_t c = g.channels;
  parallel_ranges(rows, c, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t token = tokens[i];
      const std::int64_t t = i % g.time;
      for (std::int64_t j = 0; j < c; ++j) {
        store_element(
            y, dtype, i * c + j,
            load_element(wte, dtype, token * c + j) + load_element(wpe, dtype, t * c + j));
      }
    }
  });
}

void embedding_backward(const void* dy, DType dy_dtype, const std::int32_t* tokens,
                        const EmbeddingGeometry& g, float* sums, void* dwte, DType dwte_dtype,
                        void* dwpe, DType dwpe_dtype) {
  const std::int64_t c = g.channels;
  const std::int64_t rows = g.batch * g.time;
  const std::int64_t bands = (c + kBandChannels - 1) / kBandChannels;
  parallel_ranges(bands, rows * kBandChannels, [&](std::int64_t first, std::int64_t last) {
    std::vector<float> position_sums(static_cast<std::size_t>(kBandChannels));
    for (std::int64_t band = first; band < last; ++band) {
      const std::int64_t begin = band * kBandChannels;
      const std::int64_t end = std::min(c, begin + kBandChannels);
      for (std::int64_t i = 0; i < rows; ++i) {
        float* row = sums + static_cast<std::int64_t>(tokens[i]) * c;
        for (std::int64_t j = begin; j < end; ++j)
          row[j] += load_element(dy, dy_dtype, i * c + j);
      }
      for (std::int64_t t = 0; t < g.time; ++t) {
        std::fill(position_sums.begin(), position_sums.end(), 0.0f);
        for (std::int64_t b = 0; b < g.batch; ++b) {
          for (std::int64_t j = begin; j < end; ++j)
            position_sums[static_cast<std::size_t>(j - begin)] +=
                load_element(dy, dy_dtype, (b * g.time + t) * c + j);
        }
        for (std::int64_t j = begin; j < end; ++j) {
          store_element(dwpe, dwpe_dtype, t * c + j,
                        load_element(dwpe, dwpe_dtype, t * c + j) +
                            position_sums[static_cast<std::size_t>(j - begin)]);
        }
      }
      for (std::int64_t v = 0; v < g.vocab; ++v) {
        for (std::int64_t j = begin; j < end; ++j) {
          store_element(dwte, dwte_dtype, v * c + j,
                        load_element(dwte, dwte_dtype, v * c + j) + sums[v * c + j]);
        }
      }
    }
  });
}

}  // namespace alloy::cpu
