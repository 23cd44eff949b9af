// The emulated cuDNN against double-precision references computed here: the three convolution
// directions with padding, stride and dilation, alpha/beta blending, every algorithm the _v7
// heuristics offer with the workspace they declare, and the documented statuses.
#define BOOST_TEST_MODULE cuda_emulator_cudnn
#include <boost/test/unit_test.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    if (bytes > 0) BOOST_REQUIRE_EQUAL(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  ~DeviceMemory() {
    if (data_ != nullptr) static_cast<void>(cudaFree(data_));
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

std::size_t size_of(cudnnDataType_t type) {
  return type == CUDNN_DATA_FLOAT ? 4 : 2;
}

float rounded(double value, cudnnDataType_t type) {
  const auto f = static_cast<float>(value);
  if (type == CUDNN_DATA_HALF) return __half2float(__float2half_rn(f));
  if (type == CUDNN_DATA_BFLOAT16) return __bfloat162float(__float2bfloat16_rn(f));
  return f;
}

// Values in device memory as `type`, read back as doubles.
struct DeviceValues {
  DeviceValues(const std::vector<double>& values, cudnnDataType_t t)
      : type(t), count(values.size()), memory(values.size() * size_of(t)) {
    std::vector<unsigned char> bytes(values.size() * size_of(type));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float f = rounded(values[i], type);
      if (type == CUDNN_DATA_FLOAT) {
        std::memcpy(&bytes[i * 4], &f, 4);
      } else if (type == CUDNN_DATA_HALF) {
        const __half h = __float2half_rn(f);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(f);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    BOOST_REQUIRE_EQUAL(
        cudaMemcpy(memory.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<double> read() const {
    std::vector<unsigned char> bytes(count * size_of(type));
    BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    BOOST_REQUIRE_EQUAL(
        cudaMemcpy(bytes.data(), memory.get(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<double> values(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (type == CUDNN_DATA_FLOAT) {
        float f = 0;
        std::memcpy(&f, &bytes[i * 4], 4);
        values[i] = f;
      } else if (type == CUDNN_DATA_HALF) {
        __half h;
        std::memcpy(&h, &bytes[i * 2], 2);
        values[i] = __half2float(h);
      } else {
        __nv_bfloat16 h;
        std::memcpy(&h, &bytes[i * 2], 2);
        values[i] = __bfloat162float(h);
      }
    }
    return values;
  }
  void* get() const { return memory.get(); }

  cudnnDataType_t type;
  std::size_t count;
  DeviceMemory memory;
};

std::vector<double> random_values(std::size_t count, cudnnDataType_t type, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(count);
  for (double& v : values)
    v = rounded(uniform(rng), type);
  return values;
}

struct Shape {
  int n, c, h, w, k, r, s, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
  int p() const { return 1 + (h + 2 * pad_h - ((r - 1) * dilation_h + 1)) / stride_h; }
  int q() const { return 1 + (w + 2 * pad_w - ((s - 1) * dilation_w + 1)) / stride_w; }
  std::size_t x_count() const { return static_cast<std::size_t>(n) * c * h * w; }
  std::size_t w_count() const { return static_cast<std::size_t>(k) * c * r * s; }
  std::size_t y_count() const { return static_cast<std::size_t>(n) * k * p() * q(); }
};

// The double-precision cross-correlation: y[n,k,p,q] = sum x[n,c,h,w] w[k,c,r,s], and the
// sum of |terms| for each output (the scale of its rounding error). Both gradients are sums
// over the same terms, gathered by `visit`.
template <class Visit>
void for_each_term(const Shape& g, Visit visit) {
  for (int n = 0; n < g.n; ++n)
    for (int k = 0; k < g.k; ++k)
      for (int p = 0; p < g.p(); ++p)
        for (int q = 0; q < g.q(); ++q)
          for (int c = 0; c < g.c; ++c)
            for (int r = 0; r < g.r; ++r)
              for (int s = 0; s < g.s; ++s) {
                const int h = p * g.stride_h - g.pad_h + r * g.dilation_h;
                const int w = q * g.stride_w - g.pad_w + s * g.dilation_w;
                if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
                visit(((static_cast<std::size_t>(n) * g.c + c) * g.h + h) * g.w + w,
                      ((static_cast<std::size_t>(k) * g.c + c) * g.r + r) * g.s + s,
                      ((static_cast<std::size_t>(n) * g.k + k) * g.p() + p) * g.q() + q);
              }
}

double roundoff(cudnnDataType_t type) {
  return type == CUDNN_DATA_FLOAT ? 0x1p-24 : type == CUDNN_DATA_HALF ? 0x1p-11 : 0x1p-8;
}

// got == alpha * sum + beta * prior within fp32 accumulation plus one rounding into `type`.
void check_close(const std::vector<double>& got, const std::vector<double>& sum,
                 const std::vector<double>& magnitude, const std::vector<double>& prior,
                 double alpha, double beta, cudnnDataType_t type, int terms,
                 const std::string& what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double expected = alpha * sum[i] + beta * prior[i];
    const double scale = std::fabs(alpha) * magnitude[i] + std::fabs(beta * prior[i]);
    const double tolerance = (roundoff(type) + (terms + 2) * 0x1p-24) * scale + 1e-30;
    BOOST_TEST(std::fabs(got[i] - expected) <= tolerance,
               what << " element " << i << " = " << got[i] << ", expected " << expected);
  }
}

// Descriptors of one convolution, destroyed on scope exit.
struct Descriptors {
  Descriptors(const Shape& g, cudnnDataType_t type, cudnnMathType_t math) {
    BOOST_REQUIRE_EQUAL(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, g.n, g.c, g.h, g.w),
                        CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, g.n, g.k, g.p(), g.q()),
        CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, g.k, g.c, g.r, g.s),
                        CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnSetConvolution2dDescriptor(conv, g.pad_h, g.pad_w, g.stride_h,
                                                        g.stride_w, g.dilation_h, g.dilation_w,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                        CUDNN_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cudnnSetConvolutionMathType(conv, math), CUDNN_STATUS_SUCCESS);
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

struct Handle {
  Handle() { BOOST_REQUIRE_EQUAL(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(handle); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t handle = nullptr;
};

// The offered algorithms of a perf array: (algo, workspace).
template <class Perf>
std::vector<std::pair<int, std::size_t>> offered(const Perf* perf, int count) {
  std::vector<std::pair<int, std::size_t>> out;
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS)
      out.emplace_back(static_cast<int>(perf[i].algo), perf[i].memory);
  return out;
}

// All three directions of `g`, every offered algorithm, two (alpha, beta) pairs.
void check_all_directions(const Shape& g, cudnnDataType_t type, cudnnMathType_t math) {
  std::mt19937 rng(static_cast<unsigned>(g.h * 7 + g.stride_h * 3 + type));
  const auto x = random_values(g.x_count(), type, rng);
  const auto w = random_values(g.w_count(), type, rng);
  const auto dy = random_values(g.y_count(), type, rng);
  std::vector<double> y_sum(g.y_count()), y_mag(g.y_count()), dx_sum(g.x_count()),
      dx_mag(g.x_count()), dw_sum(g.w_count()), dw_mag(g.w_count());
  for_each_term(g, [&](std::size_t xi, std::size_t wi, std::size_t yi) {
    y_sum[yi] += x[xi] * w[wi];
    y_mag[yi] += std::fabs(x[xi] * w[wi]);
    dx_sum[xi] += dy[yi] * w[wi];
    dx_mag[xi] += std::fabs(dy[yi] * w[wi]);
    dw_sum[wi] += dy[yi] * x[xi];
    dw_mag[wi] += std::fabs(dy[yi] * x[xi]);
  });

  const Handle handle;
  const Descriptors d(g, type, math);
  const DeviceValues dx_in(x, type), dw_in(w, type), ddy(dy, type);
  constexpr int kMax = 8;
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  BOOST_REQUIRE_EQUAL(cudnnGetConvolutionForwardAlgorithm_v7(handle.handle, d.x, d.w, d.conv, d.y,
                                                             kMax, &found, fwd),
                      CUDNN_STATUS_SUCCESS);
  const auto forward_algos = offered(fwd, found);
  cudnnConvolutionBwdDataAlgoPerf_t data[kMax];
  BOOST_REQUIRE_EQUAL(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle.handle, d.w, d.y, d.conv,
                                                                  d.x, kMax, &found, data),
                      CUDNN_STATUS_SUCCESS);
  const auto data_algos = offered(data, found);
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMax];
  BOOST_REQUIRE_EQUAL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle.handle, d.x, d.y, d.conv,
                                                                    d.w, kMax, &found, filter),
                      CUDNN_STATUS_SUCCESS);
  const auto filter_algos = offered(filter, found);
  BOOST_TEST(forward_algos.size() >= 2u);
  BOOST_TEST(data_algos.size() >= 2u);
  BOOST_TEST(filter_algos.size() >= 2u);

  const std::string where = "shape h" + std::to_string(g.h) + " stride " +
                            std::to_string(g.stride_h) + " type " + std::to_string(type);
  for (const auto& [alpha, beta] : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, -2.0f}}) {
    for (const auto& [algo, bytes] : forward_algos) {
      const auto prior = random_values(g.y_count(), type, rng);
      const DeviceValues out(prior, type);
      const DeviceMemory workspace(bytes);
      BOOST_REQUIRE_EQUAL(
          cudnnConvolutionForward(handle.handle, &alpha, d.x, dx_in.get(), d.w, dw_in.get(), d.conv,
                                  static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace.get(),
                                  bytes, &beta, d.y, out.get()),
          CUDNN_STATUS_SUCCESS);
      check_close(out.read(), y_sum, y_mag, prior, alpha, beta, type, g.c * g.r * g.s,
                  where + " forward algo " + std::to_string(algo));
    }
    for (const auto& [algo, bytes] : data_algos) {
      const auto prior = random_values(g.x_count(), type, rng);
      const DeviceValues out(prior, type);
      const DeviceMemory workspace(bytes);
      BOOST_REQUIRE_EQUAL(
          cudnnConvolutionBackwardData(handle.handle, &alpha, d.w, dw_in.get(), d.y, ddy.get(),
                                       d.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                       workspace.get(), bytes, &beta, d.x, out.get()),
          CUDNN_STATUS_SUCCESS);
      check_close(out.read(), dx_sum, dx_mag, prior, alpha, beta, type, g.k * g.r * g.s,
                  where + " backward data algo " + std::to_string(algo));
    }
    for (const auto& [algo, bytes] : filter_algos) {
      const auto prior = random_values(g.w_count(), type, rng);
      const DeviceValues out(prior, type);
      const DeviceMemory workspace(bytes);
      BOOST_REQUIRE_EQUAL(
          cudnnConvolutionBackwardFilter(handle.handle, &alpha, d.x, dx_in.get(), d.y, ddy.get(),
                                         d.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                         workspace.get(), bytes, &beta, d.w, out.get()),
          CUDNN_STATUS_SUCCESS);
      check_close(out.read(), dw_sum, dw_mag, prior, alpha, beta, type, g.n * g.p() * g.q(),
                  where + " backward filter algo " + std::to_string(algo));
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_direction_matches_the_reference_with_padding_stride_and_dilation) {
  //                 n  c  h  w  k  r  s  pad  stride dilation
  const Shape shapes[] = {{2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1},
                          {2, 2, 9, 8, 3, 3, 2, 2, 0, 2, 3, 1, 1},
                          {1, 2, 8, 8, 2, 3, 3, 1, 2, 2, 1, 2, 2},
                          {3, 1, 12, 12, 6, 5, 5, 2, 2, 1, 1, 1, 1}};  // LeNet's first layer
  for (const Shape& g : shapes)
    check_all_directions(g, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  for (const cudnnDataType_t type : {CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16})
    check_all_directions(shapes[1], type, CUDNN_TENSOR_OP_MATH);
}

BOOST_AUTO_TEST_CASE(heuristics_report_status_workspace_determinism_and_math_type) {
  const Shape g{2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1};
  const Handle handle;
  const Descriptors d(g, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  BOOST_REQUIRE_EQUAL(
      cudnnGetConvolutionForwardAlgorithm_v7(handle.handle, d.x, d.w, d.conv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, fwd),
      CUDNN_STATUS_SUCCESS);
  BOOST_TEST(found == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  bool zero_workspace = false, some_workspace = false;
  for (int i = 0; i < found; ++i) {
    if (fwd[i].status != CUDNN_STATUS_SUCCESS) continue;
    BOOST_TEST(fwd[i].mathType == CUDNN_FMA_MATH);
    BOOST_TEST(fwd[i].determinism == CUDNN_DETERMINISTIC);
    (fwd[i].memory == 0 ? zero_workspace : some_workspace) = true;
  }
  BOOST_TEST(zero_workspace);
  BOOST_TEST(some_workspace);
  // Asking for one gives the first.
  cudnnConvolutionFwdAlgoPerf_t first{};
  BOOST_REQUIRE_EQUAL(cudnnGetConvolutionForwardAlgorithm_v7(handle.handle, d.x, d.w, d.conv, d.y,
                                                             1, &found, &first),
                      CUDNN_STATUS_SUCCESS);
  BOOST_TEST(found == 1);
  BOOST_TEST(first.algo == fwd[0].algo);

  // The backward passes offer deterministic and non-deterministic algorithms.
  cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  BOOST_REQUIRE_EQUAL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          handle.handle, d.x, d.y, d.conv, d.w,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, filter),
                      CUDNN_STATUS_SUCCESS);
  int deterministic = 0, not_deterministic = 0;
  for (int i = 0; i < found; ++i) {
    if (filter[i].status != CUDNN_STATUS_SUCCESS) continue;
    ++(filter[i].determinism == CUDNN_DETERMINISTIC ? deterministic : not_deterministic);
  }
  BOOST_TEST(deterministic >= 1);
  BOOST_TEST(not_deterministic >= 1);
}

BOOST_AUTO_TEST_CASE(workspace_algorithm_and_descriptor_errors_get_the_documented_statuses) {
  const Shape g{1, 2, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1};
  const Handle handle;
  const Descriptors d(g, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  const DeviceValues x(std::vector<double>(g.x_count(), 1.0), CUDNN_DATA_FLOAT);
  const DeviceValues w(std::vector<double>(g.w_count(), 1.0), CUDNN_DATA_FLOAT);
  const DeviceValues y(std::vector<double>(g.y_count(), 0.0), CUDNN_DATA_FLOAT);
  const float one = 1.0f, zero = 0.0f;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  BOOST_REQUIRE_EQUAL(
      cudnnGetConvolutionForwardAlgorithm_v7(handle.handle, d.x, d.w, d.conv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, fwd),
      CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < found; ++i) {
    const auto run = [&](std::size_t bytes, void* workspace) {
      return cudnnConvolutionForward(handle.handle, &one, d.x, x.get(), d.w, w.get(), d.conv,
                                     fwd[i].algo, workspace, bytes, &zero, d.y, y.get());
    };
    if (fwd[i].status != CUDNN_STATUS_SUCCESS) {
      BOOST_TEST(run(0, nullptr) == CUDNN_STATUS_NOT_SUPPORTED);
    } else if (fwd[i].memory > 0) {
      const DeviceMemory workspace(fwd[i].memory);
      BOOST_TEST(run(fwd[i].memory - 1, workspace.get()) == CUDNN_STATUS_BAD_PARAM);
      BOOST_TEST(run(fwd[i].memory, nullptr) == CUDNN_STATUS_BAD_PARAM);
      BOOST_TEST(run(fwd[i].memory, workspace.get()) == CUDNN_STATUS_SUCCESS);
    }
  }
  BOOST_TEST(cudnnConvolutionForward(handle.handle, nullptr, d.x, x.get(), d.w, w.get(), d.conv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     d.y, y.get()) == CUDNN_STATUS_BAD_PARAM);
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);

  // Descriptor setters.
  cudnnTensorDescriptor_t t = nullptr;
  BOOST_REQUIRE_EQUAL(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  BOOST_TEST(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -2, 3, 3) ==
             CUDNN_STATUS_BAD_PARAM);
  BOOST_TEST(cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                             CUDNN_DATA_FLOAT) == CUDNN_STATUS_BAD_PARAM);
  BOOST_TEST(cudnnSetConvolutionMathType(d.conv, static_cast<cudnnMathType_t>(9)) ==
             CUDNN_STATUS_BAD_PARAM);
  // x with 3 channels against 2-channel filters; y of the wrong spatial size.
  BOOST_REQUIRE_EQUAL(
      cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 6, 6),
      CUDNN_STATUS_SUCCESS);
  BOOST_TEST(cudnnGetConvolutionForwardAlgorithm_v7(handle.handle, t, d.w, d.conv, d.y, 1, &found,
                                                    fwd) == CUDNN_STATUS_BAD_PARAM);
  BOOST_REQUIRE_EQUAL(
      cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 5, 6),
      CUDNN_STATUS_SUCCESS);
  BOOST_TEST(cudnnConvolutionForward(handle.handle, &one, d.x, x.get(), d.w, w.get(), d.conv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, t,
                                     y.get()) == CUDNN_STATUS_NOT_SUPPORTED);
  // Data types of x, w and y must agree.
  BOOST_REQUIRE_EQUAL(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 2, 6, 6),
                      CUDNN_STATUS_SUCCESS);
  BOOST_TEST(cudnnConvolutionForward(handle.handle, &one, d.x, x.get(), d.w, w.get(), d.conv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, t,
                                     y.get()) == CUDNN_STATUS_BAD_PARAM);
  BOOST_REQUIRE_EQUAL(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_SUCCESS);
  BOOST_TEST(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)) == "CUDNN_STATUS_BAD_PARAM");
}

BOOST_AUTO_TEST_CASE(fp32_uses_tf32_unless_the_math_type_is_fma_and_beta_zero_ignores_y) {
  const Shape g{1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1};
  const Handle handle;
  const DeviceValues x({1.0 + 0x1p-20}, CUDNN_DATA_FLOAT), w({1.0}, CUDNN_DATA_FLOAT);
  const float one = 1.0f, zero = 0.0f;
  for (const cudnnMathType_t math : {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH}) {
    const Descriptors d(g, CUDNN_DATA_FLOAT, math);
    const DeviceValues y({std::numeric_limits<double>::quiet_NaN()}, CUDNN_DATA_FLOAT);
    BOOST_REQUIRE_EQUAL(cudnnConvolutionForward(handle.handle, &one, d.x, x.get(), d.w, w.get(),
                                                d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                nullptr, 0, &zero, d.y, y.get()),
                        CUDNN_STATUS_SUCCESS);
    BOOST_TEST(y.read()[0] == (math == CUDNN_FMA_MATH ? 1.0 + 0x1p-20 : 1.0));
  }
}
