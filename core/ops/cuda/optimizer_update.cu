#include <algorithm>
#include <cmath>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/optimizer_update.h"
#include "core/ops/cuda/tensor_list.cuh"
#include "core/stochastic_rounding.h"

namespace alloy::cuda {

namespace {

// Per tensor: the parameter, its gradient, up to two f32 state buffers and the model copy;
// index is its UpdateBuffers::index, for stochastic rounding's words.
using List = TensorList<5>;
constexpr int kParam = 0, kGrad = 1, kState0 = 2, kState1 = 3, kCopy = 4;

// Tensors larger than this many blocks are strided over (list_blocks_for, multi_tensor.h).
constexpr std::int64_t kMaxBlocksPerTensor = 1024;

__device__ __forceinline__ bool skip(const float* found_inf) {
  return found_inf != nullptr && !(*found_inf == 0.0f);
}

// The gradients' factors, read on the device; 1 for a missing one (a multiply by 1 changes no
// value).
struct Factors {
  float unscale, factor;
};
__device__ __forceinline__ Factors factors_of(const GradFactors& f) {
  return {f.unscale == nullptr ? 1.0f : *f.unscale, f.factor == nullptr ? 1.0f : *f.factor};
}

// g * unscale, then * factor, each product rounded on its own (an operand of a multiply), as on
// the CPU.
__device__ __forceinline__ float scaled_grad(float g, const Factors& f) {
  return __fmul_rn(__fmul_rn(g, f.unscale), f.factor);
}

// How a block stores its tensor's updated parameters: to nearest, or stochastically with the
// words of (key, step, index, element) (core/stochastic_rounding.h).
struct ParamRounding {
  bool stochastic;
  std::uint64_t key;
  std::uint32_t step;   // the step count including this update
  std::uint32_t index;  // the tensor's UpdateBuffers::index
};

template <class P>
__device__ __forceinline__ P round_param(float value, const ParamRounding&, std::int64_t) {
  return narrow<P>(value);
}
template <>
__device__ __forceinline__ __half round_param<__half>(float value, const ParamRounding& r,
                                                      std::int64_t i) {
  if (!r.stochastic) return __float2half_rn(value);
  __half_raw raw;
  raw.x = float_to_half_bits_stochastic(
      value, stochastic_rounding_word(r.key, r.step, r.index, static_cast<std::uint64_t>(i)));
  return __half(raw);
}
template <>
__device__ __forceinline__ __nv_bfloat16 round_param<__nv_bfloat16>(float value,
                                                                    const ParamRounding& r,
                                                                    std::int64_t i) {
  if (!r.stochastic) return __float2bfloat16_rn(value);
  __nv_bfloat16_raw raw;
  raw.x = float_to_bf16_bits_stochastic(
      value, stochastic_rounding_word(r.key, r.step, r.index, static_cast<std::uint64_t>(i)));
  return __nv_bfloat16(raw);
}

// The block's rounding. The step count is read by thread 0 into shared memory before any
// thread of the block can take its ticket in finish_block, so the count the last block writes
// is never the one read; `rounding.enabled` is uniform, and so is the barrier.
__device__ __forceinline__ ParamRounding block_rounding(const StochasticRounding& rounding,
                                                        const std::int32_t* step,
                                                        std::uint32_t index) {
  __shared__ std::uint32_t step_now;
  if (rounding.enabled) {
    if (threadIdx.x == 0) step_now = static_cast<std::uint32_t>(step[0]) + 1u;
    __syncthreads();
  }
  return {rounding.enabled, rounding.key, rounding.enabled ? step_now : 0u, index};
}

// Calls Update::run<P, G>(args...) with P and G the storage types of the block's parameter and
// gradient dtypes (uniform over a block, so the switch costs no divergence).
template <class Update, class P, class... Args>
__device__ __forceinline__ void with_grad_type(DType grad_dtype, const Args&... args) {
  switch (grad_dtype) {
    case DType::f16:
      return Update::template run<P, __half>(args...);
    case DType::bf16:
      return Update::template run<P, __nv_bfloat16>(args...);
    default:
      return Update::template run<P, float>(args...);
  }
}

template <class Update, class... Args>
__device__ __forceinline__ void with_storage_types(DType param_dtype, DType grad_dtype,
                                                   const Args&... args) {
  switch (param_dtype) {
    case DType::f16:
      return with_grad_type<Update, __half>(grad_dtype, args...);
    case DType::bf16:
      return with_grad_type<Update, __nv_bfloat16>(grad_dtype, args...);
    default:
      return with_grad_type<Update, float>(grad_dtype, args...);
  }
}

// Advances the step count once per step without a second launch: every block reads step[0]
// before it takes a ticket in step[1]; the block that takes the last ticket writes the new
// count, and atomicInc wraps step[1] back to zero for the next launch. The fences order each
// block's read before the last block's write (the CUDA programming guide's last-block pattern).
__device__ __forceinline__ void finish_block(std::int32_t* step, bool advance) {
  if (!advance || threadIdx.x != 0) return;
  const std::int32_t next = step[0] + 1;
  __threadfence();
  const unsigned int ticket = atomicInc(reinterpret_cast<unsigned int*>(step + 1), gridDim.x - 1);
  if (ticket == gridDim.x - 1) {
    __threadfence();
    step[0] = next;
  }
}

// The same float arithmetic in the same order as cpu::sgd_update.
struct SgdElements {
  template <class P, class G>
  __device__ static void run(void* param_data, const void* grad_data, float* buf, void* copy,
                             DType copy_dtype, const ListSlice& s, const SgdHyper& h, float lr,
                             const Factors& factors, const ParamRounding& rounding) {
    P* param = static_cast<P*>(param_data);
    const G* grad = static_cast<const G*>(grad_data);
    for (std::int64_t i = s.first; i < s.count; i += s.stride) {
      float p = widen(param[i]);
      const float d = scaled_grad(widen(grad[i]), factors) * h.grad_scale + h.weight_decay * p;
      if (buf == nullptr) {
        p -= lr * d;
      } else {
        const float b = h.momentum * buf[i] + d;
        buf[i] = b;
        p -= lr * (h.nesterov ? d + h.momentum * b : b);
      }
      param[i] = round_param<P>(p, rounding, i);
      // master_copy_kernel's rounding (store_any), so the model copy's bits do not change.
      if (copy != nullptr) store_any(copy, copy_dtype, i, p);
    }
  }
};

// lr, the step count, found_inf and the factors are read here, on the device, at every replay.
__global__ void sgd_kernel(List list, SgdHyper h, const float* lr, std::int32_t* step,
                           const float* found_inf, GradFactors factors, bool advance) {
  if (skip(found_inf)) return;
  const ListSlice s = slice_of_block(list);
  const ParamRounding rounding = block_rounding(h.rounding, step, list.index[s.tensor]);
  with_storage_types<SgdElements>(list.dtype[kParam][s.tensor], list.dtype[kGrad][s.tensor],
                                  list.data[kParam][s.tensor], list.data[kGrad][s.tensor],
                                  static_cast<float*>(list.data[kState0][s.tensor]),
                                  list.data[kCopy][s.tensor], list.dtype[kCopy][s.tensor], s, h,
                                  *lr, factors_of(factors), rounding);
  finish_block(step, advance);
}

struct AdamScalars {
  float step_size, correction2_sqrt, decay, one_minus_beta1, one_minus_beta2;
};

// The per-step scalars of cpu::adamw_update, from the step count including this update; the
// bias corrections in double, as the CPU (and PyTorch, on the host) computes them.
__device__ AdamScalars adam_scalars(const AdamWHyper& h, float lr, std::int32_t step) {
  const double correction1 = 1.0 - pow(static_cast<double>(h.beta1), static_cast<double>(step));
  const double correction2 = 1.0 - pow(static_cast<double>(h.beta2), static_cast<double>(step));
  return {static_cast<float>(lr / correction1), static_cast<float>(sqrt(correction2)),
          1.0f - lr * h.weight_decay, 1.0f - h.beta1, 1.0f - h.beta2};
}

// The same float arithmetic in the same order as cpu::adamw_update.
struct AdamWElements {
  template <class P, class G>
  __device__ static void run(void* param_data, const void* grad_data, float* m, float* v,
                             void* copy, DType copy_dtype, const ListSlice& s, const AdamWHyper& h,
                             const AdamScalars& c, const Factors& factors,
                             const ParamRounding& rounding) {
    P* param = static_cast<P*>(param_data);
    const G* grad = static_cast<const G*>(grad_data);
    for (std::int64_t i = s.first; i < s.count; i += s.stride) {
      const float g = scaled_grad(widen(grad[i]), factors) * h.grad_scale;
      const float mi = m[i] + c.one_minus_beta1 * (g - m[i]);
      const float vi = h.beta2 * v[i] + c.one_minus_beta2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = sqrtf(vi) / c.correction2_sqrt + h.eps;
      const float p = widen(param[i]) * c.decay - c.step_size * (mi / denom);
      param[i] = round_param<P>(p, rounding, i);
      if (copy != nullptr) store_any(copy, copy_dtype, i, p);
    }
  }
};

__global__ void adamw_kernel(List list, AdamWHyper h, const float* lr, std::int32_t* step,
                             const float* found_inf, GradFactors factors, bool advance) {
  if (skip(found_inf)) return;
  __shared__ AdamScalars scalars;
  if (threadIdx.x == 0) scalars = adam_scalars(h, *lr, step[0] + 1);
  __syncthreads();
  const ListSlice s = slice_of_block(list);
  const ParamRounding rounding = block_rounding(h.rounding, step, list.index[s.tensor]);
  with_storage_types<AdamWElements>(
      list.dtype[kParam][s.tensor], list.dtype[kGrad][s.tensor], list.data[kParam][s.tensor],
      list.data[kGrad][s.tensor], static_cast<float*>(list.data[kState0][s.tensor]),
      static_cast<float*>(list.data[kState1][s.tensor]), list.data[kCopy][s.tensor],
      list.dtype[kCopy][s.tensor], s, h, scalars, factors_of(factors), rounding);
  finish_block(step, advance);
}

// The call's launches; the last one advances the step count, after every earlier one has read
// it.
std::vector<ListLaunch<List>> update_lists(const std::vector<UpdateBuffers>& tensors) {
  const auto fill = [&](List& list, int k, std::size_t i) {
    const UpdateBuffers& t = tensors[i];
    list.data[kParam][k] = t.param;
    // The kernels only read the gradient; the list's slots are untyped.
    list.data[kGrad][k] = const_cast<void*>(t.grad);
    list.data[kState0][k] = t.state[0];
    list.data[kState1][k] = t.state[1];
    list.data[kCopy][k] = t.copy;
    list.dtype[kParam][k] = t.param_dtype;
    list.dtype[kGrad][k] = t.grad_dtype;
    list.dtype[kState0][k] = list.dtype[kState1][k] = DType::f32;
    list.dtype[kCopy][k] = t.copy_dtype;
    list.index[k] = t.index;
    return t.count;
  };
  return split_tensor_lists<List>(tensors.size(), kMaxBlocksPerTensor, false, fill);
}

}  // namespace

void sgd_update(const std::vector<UpdateBuffers>& tensors, const SgdHyper& hyper, const float* lr,
                std::int32_t* step, const float* found_inf, GradFactors factors,
                cudaStream_t stream) {
  for (const ListLaunch<List>& launch : update_lists(tensors)) {
    ALLOY_LAUNCH(sgd_kernel, launch.blocks, kThreads, 0, stream)
    (launch.list, hyper, lr, step, found_inf, factors, launch.last);
    ALLOY_CUDA_CHECK_LAUNCH("sgd_kernel on ", launch.list.size, " tensors (", launch.blocks,
                            " blocks)");
  }
}

void adamw_update(const std::vector<UpdateBuffers>& tensors, const AdamWHyper& hyper,
                  const float* lr, std::int32_t* step, const float* found_inf, GradFactors factors,
                  cudaStream_t stream) {
  for (const ListLaunch<List>& launch : update_lists(tensors)) {
    ALLOY_LAUNCH(adamw_kernel, launch.blocks, kThreads, 0, stream)
    (launch.list, hyper, lr, step, found_inf, factors, launch.last);
    ALLOY_CUDA_CHECK_LAUNCH("adamw_kernel on ", launch.list.size, " tensors (", launch.blocks,
                            " blocks)");
  }
}

}  // namespace alloy::cuda
