// 2-D convolution on the GPU through cuDNN 9's convolution API (cudnn_cnn: still shipped and
// supported in cuDNN 9, though NVIDIA steers new code to the graph API; these three fixed
// operations are exactly what it covers). Descriptors and cuDNN's ranked algorithms are made
// once per (device, dtype, shape) and cached; the first execution of each direction tries the
// algorithms in that order and keeps the first that runs (conv2d_algorithms.h), so it must not
// be inside a CUDA-graph capture (a warm-up step runs it eagerly). With the process-wide
// setting measured (conv2d_algorithm_db.h; `alloy train`'s default), the fastest by
// cudnnFind*AlgorithmEx is tried first, and kept in the algorithm db for later runs; small NCHW
// convolutions also have Alloy's direct kernels as a candidate (conv2d_direct.h), which then
// add the bias themselves. Workspaces
// come from the caching allocator, so steady state calls neither cudaMalloc nor cuDNN's heuristics.
// Accumulation is fp32: half data with CUDNN_DATA_FLOAT compute (tensor cores allowed), fp32
// data with FMA math only (no TF32) unless --allow-tf32 (core/ops/allow_tf32.h) allows
// tensor-op math for it too. The bias is the project's own kernel after the convolution, so a
// half output of a cuDNN algorithm is rounded twice (the convolution's, then the sum's) where
// the CPU and Alloy's kernels round once: within an ulp of theirs (docs/PERFORMANCE.md, "O3 on
// the GPU").
// Channels-last (g.layout == nhwc): NHWC tensor descriptors and KRSC filters, cuDNN's native
// tensor-core format. w and dw stay KCRS: the forward and the input gradient read a KRSC copy of
// w made in a workspace, and cuDNN's KRSC filter gradient is added into dw by a transposing add.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/ops/conv2d.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/cuda/conv2d_algorithms.h"

namespace alloy::cuda {

using cpu::Conv2dGeometry;

// y = conv(x, w) + b (b may be null); x, w, b, y all `dtype`.
void conv2d_forward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                    const void* w, const void* b, void* y);
// dw += dL/dw (dw f32 or `dtype`; f32 with half data is computed from fp32 copies of x and dy,
// since cuDNN wants dw in the data's type), db += dL/db (null, f32 or `dtype`), dx = dL/dx
// unless dx is null.
void conv2d_backward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                     const void* w, const void* dy, void* dw, DType dw_dtype, void* db,
                     DType db_dtype, void* dx);

// Number of distinct convolution plans built so far on `device` (tests: shapes are planned once).
int conv2d_plan_count(Device device);

// One line per plan on `device`: its dtype and shape (", TF32" for f32 data planned with
// --allow-tf32), and per direction the cuDNN algorithm its first execution chose, with its math
// type (for a GPU session's log: which algorithms ran).
std::string conv2d_algorithm_report(Device device);

// What a plan of (dtype, g) on `device` would try in `direction` (forward, data or filter): the
// algorithm db's key of that direction and its candidates in order, Alloy's kernels last. With
// conv2d_forget_plans and, under the measured setting, a choice loaded by load_conv_algorithms,
// a test runs a convolution with each of them.
struct ConvCandidates {
  ConvAlgorithmKey key;
  std::vector<AlgorithmOffer> offers;
};
ConvCandidates conv2d_candidates(Device device, DType dtype, const Conv2dGeometry& g,
                                 const std::string& direction);

// Forgets `device`'s plans: each shape's next convolution plans and chooses its algorithms again.
void conv2d_forget_plans(Device device);

}  // namespace alloy::cuda
