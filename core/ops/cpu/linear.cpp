#include "core/ops/linear.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ops/gemm.h"

namespace alloy::cpu {

void linear_forward(int batch, int in, int out, const float* x, const float* w, const float* b,
                    float* y) {
  if (b != nullptr) {
    for (std::int64_t row = 0; row < batch; ++row)
      std::copy(b, b + out, y + row * out);
  }
  gemm(false, true, batch, out, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y, out);
}

void linear_backward(int batch, int in, int out, const float* x, const float* w, const float* dy,
                     float* dw, float* db, float* dx) {
  if (db != nullptr) {
    // Summed apart from db's old value, row by row in a fixed order.
    std::vector<float> sum(static_cast<std::size_t>(out), 0.0f);
    for (std::int64_t row = 0; row < batch; ++row) {
      const float* dy_row = dy + row * out;
      for (int j = 0; j < out; ++j)
        sum[j] += dy_row[j];
    }
    for (int j = 0; j < out; ++j)
      db[j] += sum[j];
  }
  const GemmCall weight_grad{true, false, out, in, batch, 1.0f, dy, out, x, in, 1.0f, dw, in};
  const GemmCall input_grad{false, false, batch, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in};
  if (dw != nullptr && dx != nullptr) {
    gemm_pair(weight_grad, input_grad);
  } else if (dw != nullptr) {
    gemm(weight_grad);
  } else if (dx != nullptr) {
    gemm(input_grad);
  }
}

}  // namespace alloy::cpu
