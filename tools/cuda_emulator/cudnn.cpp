// Emulated cuDNN (legacy API): handles, 4-d tensor, filter and 2-d convolution descriptors, the
// _v7 algorithm heuristics, cudnnFind*AlgorithmEx (with made-up times) and the three
// convolution directions with the documented semantics:
// NCHW or NHWC cross-correlation (or convolution) with padding, stride and dilation, and
// y = alpha * result + beta * y. Every algorithm computes the same im2col + fp32 sgemm; what
// tells them apart is the workspace each declares (and checks) and its determinism flag.
// cuDNN's graph API is not emulated: its entry points (at the end) refuse.
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/host_gemm.h"
#include "tools/cuda_emulator/host_math.h"
#include "tools/cuda_emulator/precisions.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
  std::int64_t stride_n = 0, stride_c = 0, stride_h = 0, stride_w = 0;
};

struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
  std::int64_t stride_k = 0, stride_c = 0, stride_h = 0, stride_w = 0;
};

struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

using alloy::emulator::InputRounding;

bool valid_data_type(cudnnDataType_t type) {
  return type == CUDNN_DATA_FLOAT || type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16;
}

cudaDataType_t storage_of(cudnnDataType_t type) {
  return type == CUDNN_DATA_HALF       ? CUDA_R_16F
         : type == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF
                                       : CUDA_R_32F;
}

// Elements a 4-d layout spans: its largest offset plus one.
std::int64_t span(int a, int b, int c, int d, std::int64_t sa, std::int64_t sb, std::int64_t sc,
                  std::int64_t sd) {
  return (a - 1) * sa + (b - 1) * sb + (c - 1) * sc + (d - 1) * sd + 1;
}

std::int64_t tensor_span(const cudnnTensorStruct& t) {
  return span(t.n, t.c, t.h, t.w, t.stride_n, t.stride_c, t.stride_h, t.stride_w);
}

std::int64_t filter_span(const cudnnFilterStruct& f) {
  return span(f.k, f.c, f.h, f.w, f.stride_k, f.stride_c, f.stride_h, f.stride_w);
}

// A layout's values as a dense NCHW (or KCRS) fp32 array, read into the compute type.
std::vector<float> dense(const void* data, cudaDataType_t type, int a, int b, int c, int d,
                         std::int64_t sa, std::int64_t sb, std::int64_t sc, std::int64_t sd,
                         InputRounding rounding) {
  std::vector<float> out(static_cast<std::size_t>(std::int64_t{a} * b * c * d));
  std::size_t i = 0;
  for (int ia = 0; ia < a; ++ia)
    for (int ib = 0; ib < b; ++ib)
      for (int ic = 0; ic < c; ++ic)
        for (int id = 0; id < d; ++id)
          out[i++] = alloy::emulator::round_input(
              alloy::emulator::load_element(
                  data, type, static_cast<std::size_t>(ia * sa + ib * sb + ic * sc + id * sd)),
              rounding);
  return out;
}

// result (dense, fp32) blended into a strided output: out = alpha * result + beta * out, out not
// read when beta is 0, rounded once into the output type.
void blend(const std::vector<float>& result, void* out, cudaDataType_t type, int a, int b, int c,
           int d, std::int64_t sa, std::int64_t sb, std::int64_t sc, std::int64_t sd, float alpha,
           float beta) {
  std::size_t i = 0;
  for (int ia = 0; ia < a; ++ia)
    for (int ib = 0; ib < b; ++ib)
      for (int ic = 0; ic < c; ++ic)
        for (int id = 0; id < d; ++id) {
          const auto at = static_cast<std::size_t>(ia * sa + ib * sb + ic * sc + id * sd);
          float value = alpha * result[i++];
          if (beta != 0.0f) value += beta * alloy::emulator::load_element(out, type, at);
          alloy::emulator::store_element(out, type, at, value);
        }
}

// The geometry of one convolution, checked against its descriptors.
struct Geometry {
  int n, c, h, w;  // input
  int k, r, s;     // filters
  int p, q;        // output height and width
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
  bool flip;  // CUDNN_CONVOLUTION: the filter is applied rotated by 180 degrees
  cudnnDataType_t type;
  InputRounding rounding;
};

int output_size(int input, int pad, int filter, int dilation, int stride) {
  return 1 + (input + 2 * pad - ((filter - 1) * dilation + 1)) / stride;
}

// The documented BAD_PARAM / NOT_SUPPORTED checks shared by the directions and the heuristics.
cudnnStatus_t check(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                    const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, Geometry* g) {
  if (x == nullptr || w == nullptr || conv == nullptr || y == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  if (!x->set || !w->set || !conv->set || !y->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->type != w->type || x->type != y->type) return CUDNN_STATUS_BAD_PARAM;
  if (x->c != w->c || y->c != w->k || y->n != x->n) return CUDNN_STATUS_BAD_PARAM;
  const int extent_h = (w->h - 1) * conv->dilation_h + 1,
            extent_w = (w->w - 1) * conv->dilation_w + 1;
  if (extent_h > x->h + 2 * conv->pad_h || extent_w > x->w + 2 * conv->pad_w)
    return CUDNN_STATUS_BAD_PARAM;
  const int p = output_size(x->h, conv->pad_h, w->h, conv->dilation_h, conv->stride_h);
  const int q = output_size(x->w, conv->pad_w, w->w, conv->dilation_w, conv->stride_w);
  if (y->h != p || y->w != q) return CUDNN_STATUS_NOT_SUPPORTED;
  // fp32 compute for every data type: TRUE_HALF_CONFIG and double are not emulated.
  if (conv->compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  // cuDNN 8+ runs fp32 convolutions on TF32 tensor cores unless the math type is FMA.
  const InputRounding rounding = x->type == CUDNN_DATA_FLOAT && conv->math != CUDNN_FMA_MATH
                                     ? InputRounding::tf32
                                     : InputRounding::none;
  *g = Geometry{x->n,
                x->c,
                x->h,
                x->w,
                w->k,
                w->h,
                w->w,
                p,
                q,
                conv->pad_h,
                conv->pad_w,
                conv->stride_h,
                conv->stride_w,
                conv->dilation_h,
                conv->dilation_w,
                conv->mode == CUDNN_CONVOLUTION,
                x->type,
                rounding};
  return CUDNN_STATUS_SUCCESS;
}

// One algorithm the emulator offers for a direction: its id, workspace and determinism.
struct Offer {
  int algo;
  std::size_t workspace;
  bool deterministic;
};

std::size_t im2col_bytes(const Geometry& g, std::size_t element) {
  return static_cast<std::size_t>(g.c) * g.r * g.s * g.p * g.q * element;
}

std::size_t element_bytes(const Geometry& g) {
  return alloy::emulator::element_size(storage_of(g.type));
}

// In the order a heuristic would rank them, fastest first.
std::vector<Offer> forward_offers(const Geometry& g) {
  return {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
           sizeof(int) * static_cast<std::size_t>(g.c) * g.r * g.s, true},
          {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0, true},
          {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, im2col_bytes(g, element_bytes(g)), true}};
}

std::vector<Offer> data_offers(const Geometry& g) {
  return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, im2col_bytes(g, sizeof(float)), true},
          {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0, false}};
}

std::vector<Offer> filter_offers(const Geometry& g) {
  return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
           sizeof(float) * static_cast<std::size_t>(g.k) * g.c * g.r * g.s, true},
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0, false},
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, im2col_bytes(g, element_bytes(g)), false}};
}

// Fills cuDNN's perf array: the offered algorithms with CUDNN_STATUS_SUCCESS, then the rest of
// the direction's algorithms with CUDNN_STATUS_NOT_SUPPORTED, as many as were requested.
template <class Perf, class Algo>
void fill_perf(const std::vector<Offer>& offers, int algo_count, cudnnMathType_t math,
               int requested, int* returned, Perf* results) {
  int count = 0;
  const auto add = [&](int algo, cudnnStatus_t status, std::size_t memory, bool deterministic) {
    if (count >= requested) return;
    Perf& perf = results[count++];
    perf = Perf{};
    perf.algo = static_cast<Algo>(algo);
    perf.status = status;
    perf.time = -1.0f;  // heuristics estimate no time
    perf.memory = memory;
    perf.determinism = deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    perf.mathType = math;
  };
  for (const Offer& offer : offers)
    add(offer.algo, CUDNN_STATUS_SUCCESS, offer.workspace, offer.deterministic);
  for (int algo = 0; algo < algo_count; ++algo) {
    if (std::none_of(offers.begin(), offers.end(), [&](const Offer& o) { return o.algo == algo; }))
      add(algo, CUDNN_STATUS_NOT_SUPPORTED, 0, false);
  }
  *returned = count;
}

// Fills cudnnFind*AlgorithmEx's perf array: the offers whose workspace fits in
// `workspace_bytes` with CUDNN_STATUS_SUCCESS and a made-up time, fastest first, then the rest
// with CUDNN_STATUS_NOT_SUPPORTED (time -1). The times are deterministic and run against the
// heuristic order (its last offer is the fastest), so that a measured choice differs from the
// heuristic one where the offers allow.
template <class Perf, class Algo>
void fill_found(const std::vector<Offer>& offers, int algo_count, cudnnMathType_t math,
                std::size_t workspace_bytes, int requested, int* returned, Perf* results) {
  std::vector<Perf> all(static_cast<std::size_t>(algo_count));
  int count = 0;
  fill_perf<Perf, Algo>(offers, algo_count, math, algo_count, &count, all.data());
  for (int i = 0; i < count; ++i) {
    Perf& perf = all[static_cast<std::size_t>(i)];
    if (perf.status == CUDNN_STATUS_SUCCESS && perf.memory > workspace_bytes)
      perf.status = CUDNN_STATUS_NOT_SUPPORTED;
    perf.time = perf.status == CUDNN_STATUS_SUCCESS
                    ? 0.25f * static_cast<float>(static_cast<int>(offers.size()) - i)
                    : -1.0f;
  }
  std::stable_sort(all.begin(), all.begin() + count, [](const Perf& a, const Perf& b) {
    return (a.time >= 0.0f) != (b.time >= 0.0f) ? a.time >= 0.0f : a.time < b.time;
  });
  *returned = std::min(count, requested);
  std::copy(all.begin(), all.begin() + *returned, results);
}

// The offer `algo` of a direction, or null when the emulator does not run that algorithm.
const Offer* find_offer(const std::vector<Offer>& offers, int algo) {
  for (const Offer& offer : offers)
    if (offer.algo == algo) return &offer;
  return nullptr;
}

// The checks of a convolution call after the descriptors': the algorithm, its workspace, the
// scalars (host pointers, read at the call as cuDNN does).
cudnnStatus_t check_call(const std::vector<Offer>& offers, int algo, const void* workspace,
                         std::size_t workspace_bytes, const void* alpha, const void* beta,
                         const Offer** chosen) {
  if (alpha == nullptr || beta == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *chosen = find_offer(offers, algo);
  if (*chosen == nullptr) return CUDNN_STATUS_NOT_SUPPORTED;
  if (workspace_bytes < (*chosen)->workspace || ((*chosen)->workspace > 0 && workspace == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t submit(cudnnHandle_t handle, const char* name, std::function<void()> run) {
  return alloy::emulator::enqueue(handle->stream, {name, std::move(run)}) == cudaSuccess
             ? CUDNN_STATUS_SUCCESS
             : CUDNN_STATUS_EXECUTION_FAILED;
}

// Find's output: cuDNN leaves in it whatever the last algorithm it timed wrote. Emulated as
// all-ones bytes (NaN in every float type), so that code relying on it shows.
cudnnStatus_t clobber(cudnnHandle_t handle, const char* name, void* out, std::size_t bytes) {
  return submit(handle, name, [=] {
    alloy::emulator::require_device_range(out, bytes, name);
    std::memset(out, 0xff, bytes);
  });
}

// Input row/column of output row/column `o` and filter tap `t`, or -1 outside the image.
inline int input_at(int o, int t, int stride, int pad, int dilation, int size) {
  const int i = o * stride - pad + t * dilation;
  return i >= 0 && i < size ? i : -1;
}

// Dense KCRS filters rotated by 180 degrees for CUDNN_CONVOLUTION, so that tap (r, s) of the
// result multiplies input tap (r, s). Rotating an R x S block reverses it; done twice it is
// undone, which turns the filter gradient back.
void flip_taps(const Geometry& g, std::vector<float>& filters) {
  if (!g.flip) return;
  const std::size_t taps = static_cast<std::size_t>(g.r) * g.s;
  for (std::size_t begin = 0; begin < filters.size(); begin += taps)
    std::reverse(filters.begin() + static_cast<std::ptrdiff_t>(begin),
                 filters.begin() + static_cast<std::ptrdiff_t>(begin + taps));
}

std::size_t taps_per_output(const Geometry& g) {
  return static_cast<std::size_t>(g.c) * g.r * g.s;
}

std::size_t outputs_per_plane(const Geometry& g) {
  return static_cast<std::size_t>(g.p) * g.q;
}

// im2col: one image's input taps as a row-major (C R S) x (P Q) matrix whose entry (c r s, p q)
// is the input that filter tap (c, r, s) meets at output (p, q), 0 in the padding. The
// convolution of the image is then the filters (K x C R S) times this matrix.
void image_to_columns(const Geometry& g, const float* image, float* columns) {
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        const float* plane = image + static_cast<std::size_t>(c) * g.h * g.w;
        float* row =
            columns + ((static_cast<std::size_t>(c) * g.r + r) * g.s + s) * outputs_per_plane(g);
        for (int p = 0; p < g.p; ++p) {
          float* out = row + static_cast<std::size_t>(p) * g.q;
          const int ih = input_at(p, r, g.stride_h, g.pad_h, g.dilation_h, g.h);
          if (ih < 0) {
            std::fill(out, out + g.q, 0.0f);
            continue;
          }
          for (int q = 0; q < g.q; ++q) {
            const int iw = input_at(q, s, g.stride_w, g.pad_w, g.dilation_w, g.w);
            out[q] = iw >= 0 ? plane[ih * g.w + iw] : 0.0f;
          }
        }
      }
}

// col2im, the adjoint of image_to_columns: adds every entry into the input it was read from.
void columns_to_image(const Geometry& g, const float* columns, float* image) {
  for (int c = 0; c < g.c; ++c)
    for (int r = 0; r < g.r; ++r)
      for (int s = 0; s < g.s; ++s) {
        float* plane = image + static_cast<std::size_t>(c) * g.h * g.w;
        const float* row =
            columns + ((static_cast<std::size_t>(c) * g.r + r) * g.s + s) * outputs_per_plane(g);
        for (int p = 0; p < g.p; ++p) {
          const int ih = input_at(p, r, g.stride_h, g.pad_h, g.dilation_h, g.h);
          if (ih < 0) continue;
          const float* in = row + static_cast<std::size_t>(p) * g.q;
          for (int q = 0; q < g.q; ++q) {
            const int iw = input_at(q, s, g.stride_w, g.pad_w, g.dilation_w, g.w);
            if (iw >= 0) plane[ih * g.w + iw] += in[q];
          }
        }
      }
}

// The three directions on dense NCHW / KCRS fp32 arrays, one sgemm per image, in host buffers
// of the emulator's own (the device workspace is only checked).
std::vector<float> forward(const Geometry& g, const std::vector<float>& x, std::vector<float> w) {
  flip_taps(g, w);
  const std::size_t crs = taps_per_output(g), pq = outputs_per_plane(g);
  const std::size_t image = static_cast<std::size_t>(g.c) * g.h * g.w;
  std::vector<float> y(static_cast<std::size_t>(g.n) * g.k * pq);
  std::vector<float> columns(crs * pq);
  for (int n = 0; n < g.n; ++n) {
    image_to_columns(g, &x[n * image], columns.data());
    alloy::emulator::sgemm_rows(false, false, g.k, pq, crs, w.data(), crs, columns.data(), pq, 0.0f,
                                &y[n * g.k * pq], pq);
  }
  return y;
}

std::vector<float> backward_data(const Geometry& g, std::vector<float> w,
                                 const std::vector<float>& dy) {
  flip_taps(g, w);
  const std::size_t crs = taps_per_output(g), pq = outputs_per_plane(g);
  const std::size_t image = static_cast<std::size_t>(g.c) * g.h * g.w;
  std::vector<float> dx(static_cast<std::size_t>(g.n) * image, 0.0f);
  std::vector<float> columns(crs * pq);
  for (int n = 0; n < g.n; ++n) {
    // The taps' gradients, filters^T (C R S x K) times dy (K x P Q), scattered back.
    alloy::emulator::sgemm_rows(true, false, crs, pq, g.k, w.data(), crs, &dy[n * g.k * pq], pq,
                                0.0f, columns.data(), pq);
    columns_to_image(g, columns.data(), &dx[n * image]);
  }
  return dx;
}

std::vector<float> backward_filter(const Geometry& g, const std::vector<float>& x,
                                   const std::vector<float>& dy) {
  const std::size_t crs = taps_per_output(g), pq = outputs_per_plane(g);
  const std::size_t image = static_cast<std::size_t>(g.c) * g.h * g.w;
  std::vector<float> dw(static_cast<std::size_t>(g.k) * crs);
  std::vector<float> columns(crs * pq);
  for (int n = 0; n < g.n; ++n) {
    // dy (K x P Q) times the taps^T (P Q x C R S), summed over the images in order.
    image_to_columns(g, &x[n * image], columns.data());
    alloy::emulator::sgemm_rows(false, true, g.k, crs, pq, &dy[n * g.k * pq], pq, columns.data(),
                                pq, n == 0 ? 0.0f : 1.0f, dw.data(), crs);
  }
  flip_taps(g, dw);
  return dw;
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  delete handle;  // queued work holds copies, never the handle
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (desc == nullptr || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_BAD_PARAM;
  if (!valid_data_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (std::int64_t{n} * c * h * w > (std::int64_t{1} << 31)) return CUDNN_STATUS_NOT_SUPPORTED;
  const bool nchw = format == CUDNN_TENSOR_NCHW;
  *desc = cudnnTensorStruct{true,
                            type,
                            n,
                            c,
                            h,
                            w,
                            std::int64_t{c} * h * w,
                            nchw ? std::int64_t{h} * w : 1,
                            nchw ? std::int64_t{w} : std::int64_t{w} * c,
                            nchw ? 1 : std::int64_t{c}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (desc == nullptr || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_BAD_PARAM;
  if (!valid_data_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  const bool nchw = format == CUDNN_TENSOR_NCHW;  // KCRS, or KRSC for NHWC
  *desc = cudnnFilterStruct{true,
                            type,
                            k,
                            c,
                            h,
                            w,
                            std::int64_t{c} * h * w,
                            nchw ? std::int64_t{h} * w : 1,
                            nchw ? std::int64_t{w} : std::int64_t{w} * c,
                            nchw ? 1 : std::int64_t{c}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (desc == nullptr || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
      dilation_w <= 0 || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!valid_data_type(compute) && compute != CUDNN_DATA_DOUBLE) return CUDNN_STATUS_NOT_SUPPORTED;
  const cudnnMathType_t math = desc->math;  // the math type is set separately and kept
  *desc =
      cudnnConvolutionStruct{true, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute, math};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
      math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  desc->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int* n, int* c,
                                                    int* h, int* wo) {
  if (conv == nullptr || x == nullptr || w == nullptr || !conv->set || !x->set || !w->set ||
      n == nullptr || c == nullptr || h == nullptr || wo == nullptr || x->c != w->c) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *n = x->n;
  *c = w->k;
  *h = output_size(x->h, conv->pad_h, w->h, conv->dilation_h, conv->stride_h);
  *wo = output_size(x->w, conv->pad_w, w->w, conv->dilation_w, conv->stride_w);
  return *h > 0 && *wo > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  if (handle == nullptr || requested < 1 || returned == nullptr || results == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(x, w, conv, y, &g); status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_perf<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      forward_offers(g), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, conv->math, requested, returned,
      results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  if (handle == nullptr || requested < 1 || returned == nullptr || results == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(dx, w, conv, dy, &g); status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_perf<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      data_offers(g), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, conv->math, requested, returned,
      results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  if (handle == nullptr || requested < 1 || returned == nullptr || results == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(x, dw, conv, dy, &g); status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_perf<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      filter_offers(g), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, conv->math, requested, returned,
      results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  if (handle == nullptr || x == nullptr || w == nullptr || y == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(xDesc, wDesc, convDesc, yDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const std::vector<Offer> offers = forward_offers(g);  // outlives `offer`
  const Offer* offer = nullptr;
  if (const cudnnStatus_t status =
          check_call(offers, algo, workspace, workspace_bytes, alpha, beta, &offer);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cudnnTensorStruct xd = *xDesc, yd = *yDesc;
  const cudnnFilterStruct wd = *wDesc;
  const std::size_t needed = offer->workspace;
  if (g.type == CUDNN_DATA_FLOAT) alloy::emulator::note_fp32_convolution(convDesc->math);
  return submit(handle, "cudnnConvolutionForward", [=] {
    const std::size_t element = element_bytes(g);
    alloy::emulator::require_device_range(x, tensor_span(xd) * element,
                                          "cudnnConvolutionForward x");
    alloy::emulator::require_device_range(w, filter_span(wd) * element,
                                          "cudnnConvolutionForward w");
    alloy::emulator::require_device_range(y, tensor_span(yd) * element,
                                          "cudnnConvolutionForward y");
    if (needed > 0)
      alloy::emulator::require_device_range(workspace, needed, "cudnnConvolutionForward workspace");
    const cudaDataType_t type = storage_of(g.type);
    const auto xs = dense(x, type, xd.n, xd.c, xd.h, xd.w, xd.stride_n, xd.stride_c, xd.stride_h,
                          xd.stride_w, g.rounding);
    auto ws = dense(w, type, wd.k, wd.c, wd.h, wd.w, wd.stride_k, wd.stride_c, wd.stride_h,
                    wd.stride_w, g.rounding);
    blend(forward(g, xs, std::move(ws)), y, type, yd.n, yd.c, yd.h, yd.w, yd.stride_n, yd.stride_c,
          yd.stride_h, yd.stride_w, alpha_value, beta_value);
  });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  if (handle == nullptr || w == nullptr || dy == nullptr || dx == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(dxDesc, wDesc, convDesc, dyDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const std::vector<Offer> offers = data_offers(g);  // outlives `offer`
  const Offer* offer = nullptr;
  if (const cudnnStatus_t status =
          check_call(offers, algo, workspace, workspace_bytes, alpha, beta, &offer);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cudnnTensorStruct dxd = *dxDesc, dyd = *dyDesc;
  const cudnnFilterStruct wd = *wDesc;
  const std::size_t needed = offer->workspace;
  if (g.type == CUDNN_DATA_FLOAT) alloy::emulator::note_fp32_convolution(convDesc->math);
  return submit(handle, "cudnnConvolutionBackwardData", [=] {
    const std::size_t element = element_bytes(g);
    alloy::emulator::require_device_range(w, filter_span(wd) * element,
                                          "cudnnConvolutionBackwardData w");
    alloy::emulator::require_device_range(dy, tensor_span(dyd) * element,
                                          "cudnnConvolutionBackwardData dy");
    alloy::emulator::require_device_range(dx, tensor_span(dxd) * element,
                                          "cudnnConvolutionBackwardData dx");
    if (needed > 0)
      alloy::emulator::require_device_range(workspace, needed,
                                            "cudnnConvolutionBackwardData workspace");
    const cudaDataType_t type = storage_of(g.type);
    auto ws = dense(w, type, wd.k, wd.c, wd.h, wd.w, wd.stride_k, wd.stride_c, wd.stride_h,
                    wd.stride_w, g.rounding);
    const auto dys = dense(dy, type, dyd.n, dyd.c, dyd.h, dyd.w, dyd.stride_n, dyd.stride_c,
                           dyd.stride_h, dyd.stride_w, g.rounding);
    blend(backward_data(g, std::move(ws), dys), dx, type, dxd.n, dxd.c, dxd.h, dxd.w, dxd.stride_n,
          dxd.stride_c, dxd.stride_h, dxd.stride_w, alpha_value, beta_value);
  });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  if (handle == nullptr || x == nullptr || dy == nullptr || dw == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(xDesc, dwDesc, convDesc, dyDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const std::vector<Offer> offers = filter_offers(g);  // outlives `offer`
  const Offer* offer = nullptr;
  if (const cudnnStatus_t status =
          check_call(offers, algo, workspace, workspace_bytes, alpha, beta, &offer);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const cudnnTensorStruct xd = *xDesc, dyd = *dyDesc;
  const cudnnFilterStruct dwd = *dwDesc;
  const std::size_t needed = offer->workspace;
  if (g.type == CUDNN_DATA_FLOAT) alloy::emulator::note_fp32_convolution(convDesc->math);
  return submit(handle, "cudnnConvolutionBackwardFilter", [=] {
    const std::size_t element = element_bytes(g);
    alloy::emulator::require_device_range(x, tensor_span(xd) * element,
                                          "cudnnConvolutionBackwardFilter x");
    alloy::emulator::require_device_range(dy, tensor_span(dyd) * element,
                                          "cudnnConvolutionBackwardFilter dy");
    alloy::emulator::require_device_range(dw, filter_span(dwd) * element,
                                          "cudnnConvolutionBackwardFilter dw");
    if (needed > 0)
      alloy::emulator::require_device_range(workspace, needed,
                                            "cudnnConvolutionBackwardFilter workspace");
    const cudaDataType_t type = storage_of(g.type);
    const auto xs = dense(x, type, xd.n, xd.c, xd.h, xd.w, xd.stride_n, xd.stride_c, xd.stride_h,
                          xd.stride_w, g.rounding);
    const auto dys = dense(dy, type, dyd.n, dyd.c, dyd.h, dyd.w, dyd.stride_n, dyd.stride_c,
                           dyd.stride_h, dyd.stride_w, g.rounding);
    blend(backward_filter(g, xs, dys), dw, type, dwd.k, dwd.c, dwd.h, dwd.w, dwd.stride_k,
          dwd.stride_c, dwd.stride_h, dwd.stride_w, alpha_value, beta_value);
  });
}

size_t cudnnGetVersion(void) {
  return CUDNN_VERSION;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void* y, const int requested, int* returned,
    cudnnConvolutionFwdAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  if (handle == nullptr || x == nullptr || w == nullptr || y == nullptr || requested < 1 ||
      returned == nullptr || results == nullptr || (workspace_bytes > 0 && workspace == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(xDesc, wDesc, convDesc, yDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_found<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      forward_offers(g), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, convDesc->math, workspace_bytes,
      requested, returned, results);
  return clobber(handle, "cudnnFindConvolutionForwardAlgorithmEx y", y,
                 static_cast<std::size_t>(tensor_span(*yDesc)) * element_bytes(g));
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const int requested, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results, void* workspace,
    size_t workspace_bytes) {
  if (handle == nullptr || w == nullptr || dy == nullptr || dx == nullptr || requested < 1 ||
      returned == nullptr || results == nullptr || (workspace_bytes > 0 && workspace == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(dxDesc, wDesc, convDesc, dyDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_found<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      data_offers(g), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, convDesc->math, workspace_bytes,
      requested, returned, results);
  return clobber(handle, "cudnnFindConvolutionBackwardDataAlgorithmEx dx", dx,
                 static_cast<std::size_t>(tensor_span(*dxDesc)) * element_bytes(g));
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void* dw,
    const int requested, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results,
    void* workspace, size_t workspace_bytes) {
  if (handle == nullptr || x == nullptr || dy == nullptr || dw == nullptr || requested < 1 ||
      returned == nullptr || results == nullptr || (workspace_bytes > 0 && workspace == nullptr))
    return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t status = check(xDesc, dwDesc, convDesc, dyDesc, &g);
      status != CUDNN_STATUS_SUCCESS)
    return status;
  fill_found<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      filter_offers(g), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, convDesc->math, workspace_bytes,
      requested, returned, results);
  return clobber(handle, "cudnnFindConvolutionBackwardFilterAlgorithmEx dw", dw,
                 static_cast<std::size_t>(filter_span(*dwDesc)) * element_bytes(g));
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    default:
      break;
  }
  // The category names what kind of failure it was.
  switch (CUDNN_STATUS_CATEGORY(status)) {
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM (a specific sub-code)";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED (a specific sub-code)";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR (a specific sub-code)";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED (a specific sub-code)";
    default:
      return "CUDNN_STATUS_UNKNOWN";
  }
}

}  // extern "C"

// cuDNN's graph API (the backend descriptors the cuDNN frontend builds its graphs from, such as
// fused attention's) is not emulated: every entry point refuses, so a graph never builds and
// its user takes another path or reports cuDNN's refusal (docs/cuda_emulator.md).
namespace {

constexpr char kNoGraphApi[] = " (the CUDA emulator does not emulate cuDNN's graph API)";

}  // namespace

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (descriptor != nullptr) *descriptor = nullptr;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t*, void*) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t,
                                  cudnnBackendDescriptor_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t, cudnnBackendDescriptor_t,
                                            cudnnBackendDescriptor_t, cudaGraph_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t, cudnnBackendDescriptor_t,
                                          cudnnBackendDescriptor_t, cudaGraph_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  std::snprintf(message, max_size, "%s", kNoGraphApi);
}
