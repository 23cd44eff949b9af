// The emulated cuBLAS and cuBLASLt against double-precision references computed here, for the
// transposes, types, scalars and epilogues the project uses, and the documented statuses of
// bad arguments.
#define BOOST_TEST_MODULE cuda_emulator_cublas
#include <boost/test/unit_test.hpp>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

// Device memory for one test, freed on scope exit.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    BOOST_REQUIRE_EQUAL(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  ~DeviceMemory() { static_cast<void>(cudaFree(data_)); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

std::size_t size_of(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : 2;
}

// Host values as `type`'s bytes, and back.
std::vector<unsigned char> encode(const std::vector<double>& values, cudaDataType_t type) {
  std::vector<unsigned char> bytes(values.size() * size_of(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto f = static_cast<float>(values[i]);
    if (type == CUDA_R_32F) {
      std::memcpy(&bytes[i * 4], &f, 4);
    } else if (type == CUDA_R_16F) {
      const __half h = __float2half_rn(f);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(f);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<unsigned char>& bytes, cudaDataType_t type) {
  std::vector<double> values(bytes.size() / size_of(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == CUDA_R_32F) {
      float f = 0;
      std::memcpy(&f, &bytes[i * 4], 4);
      values[i] = f;
    } else if (type == CUDA_R_16F) {
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

// Values exactly representable in `type` (so the reference sees what the library reads).
std::vector<double> random_values(std::size_t count, cudaDataType_t type, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(count);
  for (double& v : values)
    v = uniform(rng);
  return decode(encode(values, type), type);
}

// A device copy of host values in `type`.
struct DeviceValues {
  DeviceValues(const std::vector<double>& values, cudaDataType_t t)
      : type(t), memory(values.size() * size_of(t)) {
    const auto bytes = encode(values, type);
    BOOST_REQUIRE_EQUAL(
        cudaMemcpy(memory.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    count = values.size();
  }
  std::vector<double> read() const {
    std::vector<unsigned char> bytes(count * size_of(type));
    BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    BOOST_REQUIRE_EQUAL(
        cudaMemcpy(bytes.data(), memory.get(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return decode(bytes, type);
  }
  void* get() const { return memory.get(); }

  cudaDataType_t type;
  DeviceMemory memory;
  std::size_t count = 0;
};

// Unit roundoff of a storage type.
double roundoff(cudaDataType_t type) {
  return type == CUDA_R_32F ? 0x1p-24 : type == CUDA_R_16F ? 0x1p-11 : 0x1p-8;
}

// Column-major op(X)[r][c] of X with leading dimension ld.
double op_at(const std::vector<double>& x, bool transposed, int ld, int r, int c) {
  return transposed ? x[static_cast<std::size_t>(c + r * ld)]
                    : x[static_cast<std::size_t>(r + c * ld)];
}

// cublasGemmEx on a column-major problem with padded leading dimensions, checked element by
// element against the double reference, and C's padding rows checked untouched.
void check_gemm(cudaDataType_t ab, cudaDataType_t c_type, bool ta, bool tb, float alpha,
                float beta) {
  const int m = 5, n = 7, k = 9;
  const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 3, ldc = m + 1;
  std::mt19937 rng(static_cast<unsigned>(ab * 31 + c_type * 7 + ta * 3 + tb));
  const auto a = random_values(static_cast<std::size_t>(lda) * (ta ? m : k), ab, rng);
  const auto b = random_values(static_cast<std::size_t>(ldb) * (tb ? k : n), ab, rng);
  const auto c = random_values(static_cast<std::size_t>(ldc) * n, c_type, rng);
  const DeviceValues da(a, ab), db(b, ab), dc(c, c_type);

  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(
      cublasGemmEx(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                   &alpha, da.get(), ab, lda, db.get(), ab, ldb, &beta, dc.get(), c_type, ldc,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  const auto got = dc.read();
  BOOST_REQUIRE_EQUAL(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);

  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < ldc; ++i) {
      const auto at = static_cast<std::size_t>(i + j * ldc);
      if (i >= m) {
        BOOST_TEST(got[at] == c[at], "C padding row " << i << " written");
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; ++p) {
        const double term = op_at(a, ta, lda, i, p) * op_at(b, tb, ldb, p, j);
        sum += term;
        magnitude += std::fabs(term);
      }
      const double expected = alpha * sum + beta * c[at];
      const double scale = std::fabs(alpha) * magnitude + std::fabs(beta * c[at]);
      const double tolerance = (roundoff(c_type) + (k + 2) * 0x1p-24) * scale + 1e-30;
      BOOST_TEST(std::fabs(got[at] - expected) <= tolerance,
                 "C(" << i << ", " << j << ") = " << got[at] << ", expected " << expected
                      << " (types " << ab << "->" << c_type << ", op " << ta << tb << ")");
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(gemm_ex_matches_the_reference_for_every_transpose_type_and_scalar) {
  const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_32F, CUDA_R_32F},
                                                             {CUDA_R_16F, CUDA_R_16F},
                                                             {CUDA_R_16F, CUDA_R_32F},
                                                             {CUDA_R_16BF, CUDA_R_16BF},
                                                             {CUDA_R_16BF, CUDA_R_32F}};
  const std::pair<float, float> scalars[] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
  for (const auto& [ab, c] : types) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const auto& [alpha, beta] : scalars)
          check_gemm(ab, c, ta, tb, alpha, beta);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(beta_zero_does_not_read_c_and_alpha_zero_does_not_read_a_or_b) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const DeviceValues a({1, 2, 3, 4}, CUDA_R_32F), b({nan, nan, nan, nan}, CUDA_R_32F);
  const DeviceValues c({nan, nan, nan, nan}, CUDA_R_32F);
  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float zero = 0.0f, one = 1.0f;
  // beta = 0: C's NaNs must not leak in; alpha = 0: B's NaNs must not either.
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &zero, a.get(),
                                   CUDA_R_32F, 2, b.get(), CUDA_R_32F, 2, &zero, c.get(),
                                   CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  for (double v : c.read())
    BOOST_TEST(v == 0.0);
  // And with both live, a product lands: C = A A.
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(),
                                   CUDA_R_32F, 2, a.get(), CUDA_R_32F, 2, &zero, c.get(),
                                   CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  const std::vector<double> expected{1 * 1 + 3 * 2, 2 * 1 + 4 * 2, 1 * 3 + 3 * 4, 2 * 3 + 4 * 4};
  BOOST_TEST(c.read() == expected, boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

BOOST_AUTO_TEST_CASE(host_scalars_are_read_at_the_call_device_scalars_when_the_work_runs) {
  const DeviceValues a({3}, CUDA_R_32F), b({5}, CUDA_R_32F), c({0}, CUDA_R_32F);
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreate(&stream), cudaSuccess);
  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(cublasSetStream(handle, stream), CUBLAS_STATUS_SUCCESS);

  float alpha = 2.0f, beta = 0.0f;
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, a.get(),
                                   CUDA_R_32F, 1, b.get(), CUDA_R_32F, 1, &beta, c.get(),
                                   CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;  // too late: cuBLAS has read it
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream), cudaSuccess);
  BOOST_TEST(c.read() == std::vector<double>{30.0}, boost::test_tools::per_element());

  // Device scalars: the value in device memory when the GEMM runs, written after the call.
  const DeviceValues scalars({0, 1}, CUDA_R_32F);
  auto* device_alpha = static_cast<float*>(scalars.get());
  BOOST_REQUIRE_EQUAL(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE),
                      CUBLAS_STATUS_SUCCESS);
  const float later[2] = {-1.0f, 1.0f};
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, device_alpha, a.get(),
                                   CUDA_R_32F, 1, b.get(), CUDA_R_32F, 1, device_alpha + 1, c.get(),
                                   CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream), cudaSuccess);
  BOOST_TEST(c.read() == std::vector<double>{30.0},
             boost::test_tools::per_element());  // alpha 0, beta 1
  BOOST_REQUIRE_EQUAL(
      cudaMemcpyAsync(device_alpha, later, sizeof later, cudaMemcpyHostToDevice, stream),
      cudaSuccess);
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, device_alpha, a.get(),
                                   CUDA_R_32F, 1, b.get(), CUDA_R_32F, 1, device_alpha + 1, c.get(),
                                   CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream), cudaSuccess);
  BOOST_TEST(c.read() == std::vector<double>{15.0}, boost::test_tools::per_element());  // -15+30
  BOOST_REQUIRE_EQUAL(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(cudaStreamDestroy(stream), cudaSuccess);
}

BOOST_AUTO_TEST_CASE(math_modes_and_compute_types_change_the_arithmetic_as_documented) {
  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  // 1 + 2^-20 survives fp32 but not TF32's 10-bit mantissa.
  const DeviceValues x({1.0 + 0x1p-20}, CUDA_R_32F), y({1.0}, CUDA_R_32F), c({0}, CUDA_R_32F);
  const auto product = [&] {
    BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, x.get(),
                                     CUDA_R_32F, 1, y.get(), CUDA_R_32F, 1, &zero, c.get(),
                                     CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        CUBLAS_STATUS_SUCCESS);
    return c.read()[0];
  };
  const auto mode = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  BOOST_REQUIRE_EQUAL(cublasSetMathMode(handle, mode), CUBLAS_STATUS_SUCCESS);
  cublasMath_t read_back{};
  BOOST_REQUIRE_EQUAL(cublasGetMathMode(handle, &read_back), CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(read_back == mode);
  BOOST_TEST(product() == 1.0 + 0x1p-20);
  BOOST_REQUIRE_EQUAL(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(product() == 1.0);

  // CUBLAS_COMPUTE_16F accumulates in half: 4096 ones sum to 2048 (2048 + 1 rounds to 2048).
  const std::vector<double> ones(4096, 1.0);
  const DeviceValues h(ones, CUDA_R_16F), hc({0}, CUDA_R_16F);
  const __half half_one = __float2half(1.0f), half_zero = __float2half(0.0f);
  BOOST_REQUIRE_EQUAL(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, 4096, &half_one, h.get(), CUDA_R_16F,
                   4096, h.get(), CUDA_R_16F, 4096, &half_zero, hc.get(), CUDA_R_16F, 1,
                   CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(hc.read()[0] == 2048.0);
  // The same with fp32 accumulation is exact.
  const DeviceValues fc({0}, CUDA_R_32F);
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, 4096, &one, h.get(),
                                   CUDA_R_16F, 4096, h.get(), CUDA_R_16F, 4096, &zero, fc.get(),
                                   CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(fc.read()[0] == 4096.0);
  BOOST_REQUIRE_EQUAL(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

BOOST_AUTO_TEST_CASE(bad_arguments_get_the_documented_statuses) {
  const DeviceValues a(std::vector<double>(64, 1.0), CUDA_R_32F);
  const float one = 1.0f;
  const auto gemm = [&](cublasHandle_t handle, cublasOperation_t ta, int m, int lda,
                        cudaDataType_t ab, cudaDataType_t c, cublasComputeType_t compute,
                        const float* alpha) {
    return cublasGemmEx(handle, ta, CUBLAS_OP_N, m, 4, 4, alpha, a.get(), ab, lda, a.get(), ab, 4,
                        &one, a.get(), c, 4, compute, CUBLAS_GEMM_DEFAULT);
  };
  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const cublasComputeType_t f32 = CUBLAS_COMPUTE_32F;
  BOOST_TEST(gemm(nullptr, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUDA_R_32F, f32, &one) ==
             CUBLAS_STATUS_NOT_INITIALIZED);
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, 4, 3, CUDA_R_32F, CUDA_R_32F, f32, &one) ==
             CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  BOOST_TEST(gemm(handle, CUBLAS_OP_T, 2, 3, CUDA_R_32F, CUDA_R_32F, f32, &one) ==
             CUBLAS_STATUS_INVALID_VALUE);  // lda < k for op T, though >= m
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, -1, 4, CUDA_R_32F, CUDA_R_32F, f32, &one) ==
             CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(gemm(handle, static_cast<cublasOperation_t>(7), 4, 4, CUDA_R_32F, CUDA_R_32F, f32,
                  &one) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUDA_R_32F, f32, nullptr) ==
             CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, 4, 4, CUDA_R_16F, CUDA_R_16BF, f32, &one) ==
             CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUDA_R_16F, f32, &one) ==
             CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(gemm(handle, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_16F, &one) ==
             CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(cublasSetMathMode(handle, static_cast<cublasMath_t>(5)) ==
             CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(cublasSetPointerMode(handle, static_cast<cublasPointerMode_t>(2)) ==
             CUBLAS_STATUS_INVALID_VALUE);
  auto* misaligned = static_cast<char*>(a.get()) + 4;
  BOOST_TEST(cublasSetWorkspace(handle, misaligned, 64) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(cublasSetWorkspace(handle, a.get(), 256) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_NOT_INITIALIZED);
  BOOST_TEST(cublasDestroy(nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  BOOST_TEST(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) ==
             "CUBLAS_STATUS_INVALID_VALUE");
  BOOST_TEST(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)) ==
             "the library was not initialized");
  BOOST_REQUIRE_EQUAL(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

namespace {

// One cuBLASLt matmul descriptor, layouts and preference, destroyed on scope exit.
struct LtPlan {
  LtPlan(cudaDataType_t type, bool ta, bool tb, int m, int n, int k, cublasLtEpilogue_t epilogue,
         const void* bias, std::uint64_t max_workspace) {
    BOOST_REQUIRE_EQUAL(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                        CUBLAS_STATUS_SUCCESS);
    const std::int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
        CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
        CUBLAS_STATUS_SUCCESS);
    const auto epi = static_cast<std::uint32_t>(epilogue);
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
        CUBLAS_STATUS_SUCCESS);
    lda = (ta ? k : m) + 1;
    ldb = (tb ? n : k) + 2;
    ldc = m + 3;
    BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutCreate(&a, type, ta ? k : m, ta ? m : k, lda),
                        CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutCreate(&b, type, tb ? n : k, tb ? k : n, ldb),
                        CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutCreate(&c, type, m, n, ldc), CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &max_workspace, sizeof max_workspace),
        CUBLAS_STATUS_SUCCESS);
  }
  ~LtPlan() {
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(desc);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  int lda = 0, ldb = 0, ldc = 0;
};

struct LtHandle {
  LtHandle() { BOOST_REQUIRE_EQUAL(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS); }
  ~LtHandle() { cublasLtDestroy(handle); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t handle = nullptr;
};

// Every algorithm the heuristic offers for one epilogue, checked against the double reference:
// D = epilogue(alpha op(A) op(B) + beta C), C and D distinct with the same layout.
void check_lt(cudaDataType_t type, bool ta, bool tb, cublasLtEpilogue_t epilogue, float beta) {
  const int m = 6, n = 5, k = 7;
  const bool bgrad_a = epilogue == CUBLASLT_EPILOGUE_BGRADA;
  const bool bgrad_b = epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const bool adds_bias =
      epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu = epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  std::mt19937 rng(static_cast<unsigned>(type * 5 + ta * 3 + tb + epilogue));
  const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 3;
  const auto a = random_values(static_cast<std::size_t>(lda) * (ta ? m : k), type, rng);
  const auto b = random_values(static_cast<std::size_t>(ldb) * (tb ? k : n), type, rng);
  const auto c = random_values(static_cast<std::size_t>(ldc) * n, type, rng);
  const auto bias = random_values(bgrad_b ? n : m, type, rng);
  const DeviceValues da(a, type), db(b, type), dc(c, type), dbias(bias, type);
  const LtHandle lt;
  const LtPlan plan(type, ta, tb, m, n, k, epilogue, dbias.get(), 1 << 20);
  cublasLtMatmulHeuristicResult_t results[4];
  int found = 0;
  BOOST_REQUIRE_EQUAL(cublasLtMatmulAlgoGetHeuristic(lt.handle, plan.desc, plan.a, plan.b, plan.c,
                                                     plan.c, plan.preference, 4, results, &found),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE(found >= 1);
  const float alpha = 1.5f;
  for (int r = 0; r < found; ++r) {
    const DeviceValues dd(std::vector<double>(c.size(), -7.0), type);
    const DeviceValues grad(std::vector<double>(bias.size(), 0.0), type);
    const void* bias_pointer = bgrad_a || bgrad_b ? grad.get() : dbias.get();
    BOOST_REQUIRE_EQUAL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias_pointer, sizeof bias_pointer),
                        CUBLAS_STATUS_SUCCESS);
    const DeviceMemory workspace(std::max<std::size_t>(results[r].workspaceSize, 1));
    BOOST_REQUIRE_EQUAL(
        cublasLtMatmul(lt.handle, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                       dc.get(), plan.c, dd.get(), plan.c, &results[r].algo, workspace.get(),
                       results[r].workspaceSize, nullptr),
        CUBLAS_STATUS_SUCCESS);
    const auto got = dd.read();
    const std::string what = "epilogue " + std::to_string(epilogue) + " type " +
                             std::to_string(type) + " op " + std::to_string(ta) +
                             std::to_string(tb) + " algo " + std::to_string(r);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < ldc; ++i) {
        const auto at = static_cast<std::size_t>(i + j * ldc);
        if (i >= m) {
          BOOST_TEST(got[at] == -7.0, what << ": D padding written");
          continue;
        }
        double sum = 0.0, magnitude = 0.0;
        for (int p = 0; p < k; ++p) {
          sum += op_at(a, ta, lda, i, p) * op_at(b, tb, ldb, p, j);
          magnitude += std::fabs(op_at(a, ta, lda, i, p) * op_at(b, tb, ldb, p, j));
        }
        double expected = alpha * sum + beta * c[at] + (adds_bias ? bias[i] : 0.0);
        if (relu) expected = std::max(expected, 0.0);
        const double scale = alpha * magnitude + std::fabs(beta * c[at]) + std::fabs(bias[i]);
        BOOST_TEST(
            std::fabs(got[at] - expected) <= (roundoff(type) + (k + 3) * 0x1p-24) * scale,
            what << ": D(" << i << ", " << j << ") = " << got[at] << ", expected " << expected);
      }
    }
    if (bgrad_a || bgrad_b) {
      const auto gradient = grad.read();
      for (std::size_t i = 0; i < gradient.size(); ++i) {
        double expected = 0.0, magnitude = 0.0;
        for (int p = 0; p < k; ++p) {
          const double v = bgrad_a ? op_at(a, ta, lda, static_cast<int>(i), p)
                                   : op_at(b, tb, ldb, p, static_cast<int>(i));
          expected += v;
          magnitude += std::fabs(v);
        }
        BOOST_TEST(
            std::fabs(gradient[i] - expected) <= (roundoff(type) + k * 0x1p-24) * magnitude,
            what << ": bias gradient " << i << " = " << gradient[i] << ", expected " << expected);
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(lt_matmul_matches_the_reference_for_every_epilogue_type_and_algorithm) {
  for (const cudaDataType_t type : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
    for (const auto& [ta, tb] :
         {std::pair<bool, bool>{true, false}, {false, false}, {false, true}}) {
      for (const cublasLtEpilogue_t epilogue :
           {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS,
            CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
        check_lt(type, ta, tb, epilogue, 0.0f);
        check_lt(type, ta, tb, epilogue, 0.5f);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(lt_refuses_small_workspaces_misaligned_pointers_and_bad_shapes) {
  const LtHandle lt;
  const DeviceValues x(std::vector<double>(256, 1.0), CUDA_R_32F);
  const LtPlan plan(CUDA_R_32F, false, false, 4, 4, 4, CUBLASLT_EPILOGUE_BIAS, x.get(), 1 << 20);
  cublasLtMatmulHeuristicResult_t results[2];
  int found = 0;
  BOOST_REQUIRE_EQUAL(cublasLtMatmulAlgoGetHeuristic(lt.handle, plan.desc, plan.a, plan.b, plan.c,
                                                     plan.c, plan.preference, 2, results, &found),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(found, 2);
  BOOST_REQUIRE(results[0].workspaceSize > 0);  // split-k first, given a workspace
  BOOST_TEST(results[1].workspaceSize == 0u);
  const float one = 1.0f, zero = 0.0f;
  const DeviceMemory workspace(results[0].workspaceSize);
  auto* base = static_cast<char*>(x.get());
  const auto run = [&](const void* a, std::size_t bytes) {
    return cublasLtMatmul(lt.handle, plan.desc, &one, a, plan.a, base, plan.b, &zero, base + 512,
                          plan.c, base + 512, plan.c, &results[0].algo, workspace.get(), bytes,
                          nullptr);
  };
  BOOST_TEST(run(base, results[0].workspaceSize - 1) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_TEST(run(base + 4, results[0].workspaceSize) == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(run(base, results[0].workspaceSize) == CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);

  // An alignment below the element size leaves no algorithm.
  const std::uint32_t byte = 1;
  BOOST_REQUIRE_EQUAL(
      cublasLtMatmulPreferenceSetAttribute(
          plan.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &byte, sizeof byte),
      CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(lt.handle, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                            plan.preference, 2, results,
                                            &found) == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(found == 0);
  // Attribute sizes must match; k of A and B must agree; the bias must be D's type.
  const std::uint64_t wide = CUBLAS_OP_T;
  BOOST_TEST(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide,
                                            sizeof wide) == CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayout_t odd = nullptr;
  BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutCreate(&odd, CUDA_R_32F, 5, 4, 5), CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatmul(lt.handle, plan.desc, &one, base, plan.a, base, odd, &zero, base,
                            plan.c, base, plan.c, nullptr, nullptr, 0,
                            nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutDestroy(odd), CUBLAS_STATUS_SUCCESS);
  const std::int32_t half = CUDA_R_16F;
  BOOST_REQUIRE_EQUAL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &half, sizeof half),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(run(base, results[0].workspaceSize) == CUBLAS_STATUS_NOT_SUPPORTED);
}

// Last in the module: the fault is the context's sticky error, as an illegal address is on a GPU.
BOOST_AUTO_TEST_CASE(an_extent_past_the_allocation_faults_the_stream_work) {
  const DeviceValues a(std::vector<double>(16, 1.0), CUDA_R_32F);
  cublasHandle_t handle = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  // lda = 8 with k = 4 spans 3 * 8 + 4 = 28 floats of a 16-float allocation.
  BOOST_REQUIRE_EQUAL(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 1, 4, &one, a.get(),
                                   CUDA_R_32F, 8, a.get(), CUDA_R_32F, 4, &zero, a.get(),
                                   CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);  // the call is fine; the kernel faults
  BOOST_TEST(cudaDeviceSynchronize() != cudaSuccess);
  cublasDestroy(handle);
}
