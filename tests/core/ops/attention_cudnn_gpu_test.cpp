// cuDNN's fused attention (core/ops/cuda/attention_cudnn.h) behind --attention-kernel
// (core/ops/attention_kernel.h). On a GPU, where cuDNN must run it: forward (y, lse) and
// backward against the CPU kernels at T = 1, 63, 64 and 257, head sizes 64 and 128, f16 and
// bf16, with attention_gpu_test's tolerances; auto picks cuDNN there, and the backward repeats
// bit for bit. On the emulator, which has no cuDNN graph API: auto runs Alloy's kernel, with
// explicit alloy's bits, and explicit cudnn fails naming cuDNN's refusal. Either way: explicit
// cudnn with fp32 or attention dropout is a usage error, where auto runs Alloy's kernel. The
// log says which mode ran.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/ops/attention.h"
#include "core/ops/cuda/attention_cudnn.h"
#include "core/setting_error.h"
#include "tests/support/attention_checks.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// The setting for one scope; the one before it after it.
class KernelSetting {
 public:
  explicit KernelSetting(AttentionKernel kernel) : before_(attention_kernel()) {
    set_attention_kernel(kernel);
  }
  ~KernelSetting() { set_attention_kernel(before_); }
  KernelSetting(const KernelSetting&) = delete;
  KernelSetting& operator=(const KernelSetting&) = delete;

 private:
  AttentionKernel before_;
};

std::string name(DType dtype, const AttentionGeometry& g) {
  return std::string(dtype_name(dtype)) + " B" + std::to_string(g.batch) + " T" +
         std::to_string(g.time) + " H" + std::to_string(g.heads) + " D" +
         std::to_string(g.head_dim);
}

struct Inputs {
  Tensor qkv, dy;  // on the host
};

Inputs random_inputs(const AttentionGeometry& g, DType dtype, Generator& generator) {
  return {random_tensor({g.batch, g.time, 3 * g.heads * g.head_dim}, dtype, generator, -1.5f, 1.5f),
          random_tensor({g.batch, g.time, g.heads * g.head_dim}, dtype, generator)};
}

bool has_text(const std::exception& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

const Device kGpu = Device::cuda(0);

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_cudnn_gpu)

BOOST_AUTO_TEST_CASE(cudnn_matches_the_cpu_or_auto_falls_back_to_alloys_kernel) {
  Generator generator(23);
  const AttentionGeometry probe{1, 64, 1, 64};
  const std::string refusal = cuda::cudnn_attention_unsupported(kGpu, DType::f16, probe);
#ifdef ALLOY_CUDA_EMULATOR
  BOOST_TEST_MESSAGE("mode: emulator (no cuDNN graph API): " << refusal);
  BOOST_TEST_REQUIRE(!refusal.empty());
  const AttentionGeometry g{2, 63, 2, 64};
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const std::string what = name(dtype, g);
    BOOST_TEST((attention_kernel_used(kGpu, dtype, g, false) == AttentionKernel::alloy), what);
    const Inputs in = random_inputs(g, dtype, generator);
    const Tensor qkv = to_cuda(in.qkv), dy = to_cuda(in.dy);
    AttentionResult forward[2];
    Tensor dqkv[2];
    for (const AttentionKernel kernel : {AttentionKernel::automatic, AttentionKernel::alloy}) {
      const KernelSetting setting(kernel);
      const int i = kernel == AttentionKernel::alloy;
      forward[i] = attention_forward(qkv, g.heads);
      dqkv[i] = attention_backward(dy, qkv, forward[i].y, forward[i].lse, g.heads);
    }
    check_gpu_equal(forward[0].y, to_host(forward[1].y), "auto's y " + what);
    check_gpu_equal(forward[0].lse, to_host(forward[1].lse), "auto's lse " + what);
    check_gpu_equal(dqkv[0], to_host(dqkv[1]), "auto's dqkv " + what);
    const KernelSetting cudnn(AttentionKernel::cudnn);
    BOOST_CHECK_EXCEPTION(attention_forward(qkv, g.heads), SettingFailure,
                          [&](const SettingFailure& error) {
                            return has_text(error, "attention_kernel cudnn: cuDNN attention");
                          });
  }
#else
  BOOST_TEST_MESSAGE("mode: GPU, cuDNN " << (refusal.empty() ? "runs attention" : refusal));
  BOOST_TEST_REQUIRE(refusal.empty(), "cuDNN cannot run attention here: " << refusal);
  const KernelSetting cudnn(AttentionKernel::cudnn);
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const std::int64_t time : {1, 63, 64, 257}) {
      for (const std::int64_t head_dim : {64, 128}) {
        const AttentionGeometry g{2, time, 2, head_dim};
        const std::string what = name(dtype, g);
        {
          const KernelSetting automatic(AttentionKernel::automatic);
          BOOST_TEST((attention_kernel_used(kGpu, dtype, g, false) == AttentionKernel::cudnn),
                     what);
        }
        const Inputs in = random_inputs(g, dtype, generator);
        const AttentionResult cpu = attention_forward(in.qkv, g.heads);
        const Tensor cpu_dqkv = attention_backward(in.dy, in.qkv, cpu.y, cpu.lse, g.heads);
        const Tensor qkv = to_cuda(in.qkv), dy = to_cuda(in.dy);
        const AttentionResult gpu = attention_forward(qkv, g.heads);
        check_gpu_close(gpu.lse, cpu.lse, "lse " + what, 1e-5, 1e-5);
        // Against the CPU's y and lse, so that both backwards start from the same values.
        const Tensor cpu_y = to_cuda(cpu.y), cpu_lse = to_cuda(cpu.lse);
        const Tensor dqkv = attention_backward(dy, qkv, cpu_y, cpu_lse, g.heads);
        check_against_cpu(gpu.y, dqkv, cpu.y, cpu_dqkv, in.qkv, g.heads, nullptr, what);
        check_gpu_equal(attention_backward(dy, qkv, cpu_y, cpu_lse, g.heads), to_host(dqkv),
                        "dqkv again " + what);
        const AttentionResult eval = attention_forward(qkv, g.heads, false);
        check_gpu_equal(eval.y, to_host(gpu.y), "eval y " + what);
      }
    }
  }
#endif
}

BOOST_AUTO_TEST_CASE(explicit_cudnn_with_fp32_or_dropout_is_a_usage_error_where_auto_runs_alloys) {
  const AttentionGeometry g{1, 16, 1, 64};
  for (const AttentionKernel kernel : {AttentionKernel::automatic, AttentionKernel::cudnn}) {
    const KernelSetting setting(kernel);
    if (kernel == AttentionKernel::automatic) {
      BOOST_TEST((attention_kernel_used(kGpu, DType::f32, g, false) == AttentionKernel::alloy));
      BOOST_TEST((attention_kernel_used(kGpu, DType::bf16, g, true) == AttentionKernel::alloy));
      continue;
    }
    BOOST_CHECK_EXCEPTION(attention_kernel_used(kGpu, DType::f32, g, false), SettingError,
                          [](const SettingError& error) {
                            return has_text(error, "attention_kernel cudnn") &&
                                   has_text(error, "fp32");
                          });
    BOOST_CHECK_EXCEPTION(attention_kernel_used(kGpu, DType::bf16, g, true), SettingError,
                          [](const SettingError& error) {
                            return has_text(error, "attention_kernel cudnn") &&
                                   has_text(error, "dropout");
                          });
  }
  // The CPU has one kernel: the setting changes nothing there.
  const KernelSetting cudnn(AttentionKernel::cudnn);
  BOOST_TEST((attention_kernel_used(Device::cpu(), DType::f32, g, true) == AttentionKernel::alloy));
}

BOOST_AUTO_TEST_SUITE_END()
