// The memory order of a 4-D activation. Tensors hold their physical shape: an NCHW tensor is
// [N, C, H, W], its channels-last (NHWC) twin [N, H, W, C]. Convolution nets run NHWC on the
// GPU in half precision because cuDNN's tensor-core kernels read it natively: given NCHW they
// transpose every input and output (a quarter of resnet18's O2 step on a GPU). Parameters
// stay in their canonical NCHW-derived shapes ([K, C, R, S] filters), so checkpoints do not
// depend on the layout.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace alloy {

enum class Layout : std::uint8_t { nchw, nhwc };

inline const char* layout_name(Layout layout) {
  return layout == Layout::nhwc ? "nhwc" : "nchw";
}

// The NCHW sizes of a 4-D tensor of `layout`.
struct Nchw {
  std::int64_t n, c, h, w;
};

inline Nchw nchw_sizes(const Shape& shape, Layout layout, const char* op) {
  ALLOY_CHECK(shape.size() == 4, op, ": expects a 4-D ", layout_name(layout), " tensor, got ",
              shape_str(shape));
  return layout == Layout::nhwc ? Nchw{shape[0], shape[3], shape[1], shape[2]}
                                : Nchw{shape[0], shape[1], shape[2], shape[3]};
}

// The physical shape of an [n, c, h, w] tensor stored in `layout`.
inline Shape shape_in(Layout layout, std::int64_t n, std::int64_t c, std::int64_t h,
                      std::int64_t w) {
  return layout == Layout::nhwc ? Shape{n, h, w, c} : Shape{n, c, h, w};
}

}  // namespace alloy
