// CUDA token plus position embedding against the CPU kernels: forward, and backward into f32
// gradients (the same sums in the same order: equal bits) and half ones; a second run repeats.
#include <boost/test/unit_test.hpp>

#include "core/ops/embedding.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(embedding_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu_and_repeat_bit_for_bit) {
  Generator generator(7);
  const std::int64_t batch = 3, time = 9, channels = 70, vocab = 13, positions = 12;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const DType grad_dtype : {DType::f32, dtype}) {
      const std::string what =
          std::string(dtype_name(dtype)) + " gradients " + dtype_name(grad_dtype);
      const Tensor tokens =
          random_labels(batch * time, vocab / 2, generator).reshape({batch, time});
      const Tensor wte = random_tensor({vocab, channels}, dtype, generator);
      const Tensor wpe = random_tensor({positions, channels}, dtype, generator);
      const Tensor dy = random_tensor({batch, time, channels}, dtype, generator);
      const Tensor dwte0 = random_tensor({vocab, channels}, grad_dtype, generator);
      const Tensor dwpe0 = random_tensor({positions, channels}, grad_dtype, generator);

      const Tensor y = embedding_forward(tokens, wte, wpe);
      Tensor dwte = dwte0.clone(), dwpe = dwpe0.clone();
      embedding_backward(dy, tokens, dwte, dwpe);

      const Tensor tokens_gpu = to_cuda(tokens), dy_gpu = to_cuda(dy);
      Tensor y_gpu[2], dwte_gpu[2], dwpe_gpu[2];
      for (int run = 0; run < 2; ++run) {
        y_gpu[run] = embedding_forward(tokens_gpu, to_cuda(wte), to_cuda(wpe));
        dwte_gpu[run] = to_cuda(dwte0);
        dwpe_gpu[run] = to_cuda(dwpe0);
        embedding_backward(dy_gpu, tokens_gpu, dwte_gpu[run], dwpe_gpu[run]);
      }
      check_gpu_equal(y_gpu[0], y, "y " + what);
      check_gpu_equal(dwte_gpu[0], dwte, "dwte " + what);
      check_gpu_equal(dwpe_gpu[0], dwpe, "dwpe " + what);
      check_gpu_equal(dwte_gpu[1], to_host(dwte_gpu[0]), "dwte again " + what);
      check_gpu_equal(dwpe_gpu[1], to_host(dwpe_gpu[0]), "dwpe again " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_token_outside_the_vocabulary_gives_a_nan_row) {
  Generator generator(8);
  Tensor tokens = Tensor::zeros({1, 2}, DType::i32);
  tokens.data<std::int32_t>()[1] = 9;
  const Tensor y = to_host(
      embedding_forward(to_cuda(tokens), to_cuda(random_tensor({4, 3}, DType::f32, generator)),
                        to_cuda(random_tensor({2, 3}, DType::f32, generator))));
  const std::vector<float> values = y.to_floats();
  for (int j = 0; j < 3; ++j) {
    BOOST_TEST(std::isfinite(values[static_cast<std::size_t>(j)]));
    BOOST_TEST(std::isnan(values[static_cast<std::size_t>(3 + j)]));
  }
}

BOOST_AUTO_TEST_SUITE_END()
