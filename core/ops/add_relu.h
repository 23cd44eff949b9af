// The end of a residual block, y = max(0, a + b), and the join of its input gradient, fused:
// each is one pass where add, relu_forward, relu_backward and add took four. The arithmetic is
// add's (fp32, one rounding to a's dtype) and the ReLU relu_forward's (exact: max(0, .) before
// the rounding gives the bits it gives after it), so results are bitwise those of the unfused
// ops.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// y = max(0, a + b) in a's dtype; b may have another floating dtype. Negative sums and -0 give
// +0, NaN propagates (as relu_forward).
Tensor add_relu_forward(const Tensor& a, const Tensor& b);

// The gradient of a residual block's input through its identity shortcut joined with the main
// branch's: dx = d_main + (y > 0 ? dy : 0), in d_main's dtype, where y is add_relu_forward's
// output (any floating dtype) and dy its gradient (any floating dtype). The same bits as
// add(d_main, relu_backward(y, dy)). The main branch gets the masked dy inside
// batch_norm2d_backward (its relu_output argument).
Tensor add_relu_backward(const Tensor& y, const Tensor& dy, const Tensor& d_main);

namespace cpu {
// count elements each; every pointer is storage of the dtype beside it.
void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count);  // y in a's dtype
void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx,
                       std::int64_t count);  // dx in d_main's dtype
}  // namespace cpu

}  // namespace alloy
