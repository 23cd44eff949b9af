// --allow-tf32 (core/ops/allow_tf32.h) reaches the libraries: with it off, fp32 GEMMs (cuBLAS and
// cuBLASLt) compute in CUBLAS_COMPUTE_32F and fp32 convolutions (cuDNN) in CUDNN_FMA_MATH, so O0
// is IEEE fp32; with it on, in CUBLAS_COMPUTE_32F_FAST_TF32 and CUDNN_TENSOR_OP_MATH. On the CUDA
// emulator the libraries record the type each call asked for (tools/cuda_emulator/precisions.h);
// on a GPU, where nothing records it, the fp32 plan's cuDNN algorithms must not be tensor-op ones.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/ops/allow_tf32.h"
#include "core/ops/conv2d.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/linear.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include <cublas_api.h>
#include <cudnn.h>

#include "core/ops/cuda/conv2d.h"
#include "core/ops/cuda/linear.h"
#endif
#ifdef ALLOY_CUDA_EMULATOR
#include "tools/cuda_emulator/precisions.h"
#endif

using namespace alloy;
using namespace alloy::test;

namespace {

// The setting back off when a case ends, whatever it checked.
struct Tf32Setting {
  explicit Tf32Setting(bool allow) { set_allow_tf32(allow); }
  ~Tf32Setting() { set_allow_tf32(false); }
};

// fp32 GEMMs on every path the layers take: cuBLASLt's bias epilogue (a forward of 600 x 512
// outputs over 64 inputs, too many for Alloy's small-GEMM kernel), cublasGemmEx (its weight
// gradient over 600 rows, and a forward over 600 inputs, which splits k), then a convolution's
// three directions through cuDNN (heuristic choice: cuDNN's first offer runs).
void run_fp32_ops(Generator& generator) {
  const Tensor x = random_tensor({600, 64}, DType::f32, generator);
  const Tensor w = random_tensor({512, 64}, DType::f32, generator, -0.1f, 0.1f);
  const Tensor b = random_tensor({512}, DType::f32, generator);
  const Tensor dy = random_tensor({600, 512}, DType::f32, generator);
  const Tensor y = linear_forward(to_cuda(x), to_cuda(w), to_cuda(b));
  Tensor dw = to_cuda(Tensor::zeros(w.shape(), DType::f32));
  Tensor db = to_cuda(Tensor::zeros(b.shape(), DType::f32));
  linear_backward(to_cuda(x), to_cuda(w), to_cuda(dy), dw, db, true);
  const Tensor wide_x = random_tensor({16, 600}, DType::f32, generator);
  const Tensor wide_w = random_tensor({8, 600}, DType::f32, generator);
  const Tensor wide_y = linear_forward(to_cuda(wide_x), to_cuda(wide_w), Tensor());

  const Conv2dParams params{1, 1, 1, 1};
  const Tensor cx = random_tensor({2, 3, 12, 12}, DType::f32, generator);
  const Tensor cw = random_tensor({4, 3, 3, 3}, DType::f32, generator);
  const Tensor cb = random_tensor({4}, DType::f32, generator);
  const Tensor cy = conv2d_forward(to_cuda(cx), to_cuda(cw), to_cuda(cb), params);
  const Tensor cdy = random_tensor(cy.shape(), DType::f32, generator);
  Tensor cdw = to_cuda(Tensor::zeros(cw.shape(), DType::f32));
  Tensor cdb = to_cuda(Tensor::zeros(cb.shape(), DType::f32));
  conv2d_backward(to_cuda(cx), to_cuda(cw), to_cuda(cdy), cdw, cdb, params, true);
  to_host(cdw);  // waits for the queued work
}

// The report's line of the fp32 plan made with (tf32) or without the setting.
std::string fp32_plan_line(bool tf32) {
#ifdef ALLOY_HAVE_CUDA
  const std::string report = cuda::conv2d_algorithm_report(Device::cuda(0));
  std::string::size_type begin = 0;
  while (begin < report.size()) {
    std::string::size_type end = report.find('\n', begin);
    if (end == std::string::npos) end = report.size();
    const std::string line = report.substr(begin, end - begin);
    if (line.find("of f32 x [2, 3, 12, 12]") != std::string::npos &&
        (line.find(", TF32:") != std::string::npos) == tf32)
      return line;
    begin = end + 1;
  }
#endif
  static_cast<void>(tf32);
  return {};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(allow_tf32_gpu)

BOOST_AUTO_TEST_CASE(off_until_set) {
  BOOST_TEST(!allow_tf32());
}

BOOST_AUTO_TEST_CASE(the_setting_chooses_the_libraries_fp32_compute_and_math_types) {
  Generator generator(97);
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::heuristic);
  for (const bool allow : {false, true}) {
    const Tf32Setting setting(allow);
    BOOST_TEST_CONTEXT("allow_tf32 " << allow) {
#ifdef ALLOY_CUDA_EMULATOR
      emulator::reset_fp32_precisions();
#endif
      run_fp32_ops(generator);
      const std::string plan = fp32_plan_line(allow);
      BOOST_TEST_MESSAGE("fp32 convolution plan: " << plan);
      BOOST_TEST_REQUIRE(!plan.empty());
      // IEEE fp32 must never take a tensor-op algorithm; with TF32 allowed cuDNN may still pick
      // an FMA one on a GPU.
      if (!allow) BOOST_TEST(plan.find("tensor-op") == std::string::npos, plan);
#ifdef ALLOY_CUDA_EMULATOR
      const emulator::Fp32Precisions seen = emulator::fp32_precisions();
      const int compute = allow ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      const int math = allow ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
      BOOST_TEST(seen.gemm_compute_types.size() == 1u);
      // cuBLASLt's forward with bias, two cublasGemmEx calls.
      BOOST_TEST(seen.gemm_compute_types.count(compute) == 1u);
      if (seen.gemm_compute_types.count(compute)) {
        BOOST_TEST(seen.gemm_compute_types.at(compute) >= 3);
      }
      BOOST_TEST(seen.conv_math_types.size() == 1u);
      BOOST_TEST(seen.conv_math_types.count(math) == 1u);
      // Three directions; the filter gradient's first execution also tries its algorithm on a
      // scratch output.
      if (seen.conv_math_types.count(math)) BOOST_TEST(seen.conv_math_types.at(math) >= 3);
      BOOST_TEST(plan.find(allow ? "(tensor-op math)" : "(FMA math)") != std::string::npos, plan);
      BOOST_TEST(cuda::linear_bias_epilogue_plans(Device::cuda(0), true) >= 1);
#endif
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
