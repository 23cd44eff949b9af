// Shared checks at the entry of every op: the tensors it is given share one device (the op
// runs there) and have the dtypes and shapes it needs. Messages name the op and the tensor.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace alloy {

// The device all defined tensors live on; throws naming `op` when they differ or when none
// is defined.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);

// Throws "<op>: <what> must be <dtype>-typed ..." unless tensor has `dtype`.
void check_dtype(const char* op, const char* what, const Tensor& tensor, DType dtype);
void check_floating(const char* op, const char* what, const Tensor& tensor);
// A gradient accumulator of an op computing in `compute`: that dtype, or f32 (O1 keeps fp32
// weights whose gradients accumulate in fp32 from half operands).
void check_accumulator_dtype(const char* op, const char* what, const Tensor& tensor, DType compute);
void check_rank(const char* op, const char* what, const Tensor& tensor, int rank);
void check_shape(const char* op, const char* what, const Tensor& tensor, const Shape& shape);

// A tensor argument and its name in messages.
struct NamedTensor {
  const char* name;
  const Tensor& tensor;
};
// The entry checks of an elementwise op: the tensors share one device (returned), and all have
// floating dtypes and the first one's shape; the first failure throws, checked in that order.
Device check_elementwise(const char* op, std::initializer_list<NamedTensor> tensors);

// For ops whose CUDA kernel is not in this build: a clear error instead of a wrong answer.
[[noreturn]] void no_kernel(const char* op, Device device);

}  // namespace alloy

// An op's CUDA path: `if (device.is_cuda()) ALLOY_CUDA_PATH(op, device, { ...; return y; });`
// runs the block in a build with the CUDA backend and is no_kernel() in a CPU-only build, where
// the block (which names CUDA kernels) is not compiled at all.
#ifdef ALLOY_HAVE_CUDA
#define ALLOY_CUDA_PATH(op, device, ...) \
  do                                     \
  __VA_ARGS__ while (0)
#else
#define ALLOY_CUDA_PATH(op, device, ...) ::alloy::no_kernel(op, device)
#endif

// For an op whose CPU and CUDA kernels share a name and arguments (the CUDA one takes a stream
// last): `ALLOY_RUN_KERNEL(op, device, add, a.raw(), ...);` calls cuda::add(a.raw(), ...,
// stream) on a GPU (through ALLOY_CUDA_PATH) and cpu::add(a.raw(), ...) otherwise.
#define ALLOY_RUN_KERNEL(op, device, kernel, ...)                                                 \
  do {                                                                                            \
    if ((device).is_cuda())                                                                       \
      ALLOY_CUDA_PATH(op, device,                                                                 \
                      { ::alloy::cuda::kernel(__VA_ARGS__, ::alloy::cuda::stream_of(device)); }); \
    else                                                                                          \
      ::alloy::cpu::kernel(__VA_ARGS__);                                                          \
  } while (0)

namespace alloy {}  // namespace alloy
