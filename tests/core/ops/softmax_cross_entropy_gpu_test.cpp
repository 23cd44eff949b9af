// CUDA softmax cross-entropy against the CPU kernels: fp32 math in both, reductions in another
// order (within fp32 tolerance); count_correct exactly.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/ops/softmax_cross_entropy.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/last_block.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(softmax_cross_entropy_gpu)

BOOST_AUTO_TEST_CASE(forward_backward_and_accuracy_match_the_cpu) {
  Generator generator(41);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const std::int64_t class_counts[] = {10, 1000};  // one warp per row, and a wide row
  // The mean is formed by the last row's block to finish: one row, and many.
  const std::int64_t row_counts[] = {1, 67, 1500};
  for (const DType dtype : types) {
    for (const std::int64_t classes : class_counts) {
      for (const std::int64_t rows : row_counts) {
        const std::string what = std::string(dtype_name(dtype)) + " with " + std::to_string(rows) +
                                 " rows of " + std::to_string(classes) + " classes";
        const Tensor logits = random_tensor({rows, classes}, dtype, generator, -8.0f, 8.0f);
        const Tensor labels = random_labels(rows, classes, generator);
        const Tensor logits_gpu = to_cuda(logits);
        const Tensor labels_gpu = to_cuda(labels);
        const SoftmaxCrossEntropyResult cpu = softmax_cross_entropy_forward(logits, labels);
        const SoftmaxCrossEntropyResult gpu = softmax_cross_entropy_forward(logits_gpu, labels_gpu);
        check_gpu_close(gpu.loss, cpu.loss, "loss " + what, 1e-5, 0.0);
        // Whichever block finishes last, the mean's order is fixed: the same bits again.
        check_gpu_equal(softmax_cross_entropy_forward(logits_gpu, labels_gpu).loss,
                        to_host(gpu.loss), "loss again " + what);
        check_gpu_close(gpu.probabilities, cpu.probabilities, "probabilities " + what, 1e-5, 1e-7);

        check_gpu_close(
            softmax_cross_entropy_backward(gpu.probabilities, labels_gpu, 1024.0f, dtype),
            softmax_cross_entropy_backward(cpu.probabilities, labels, 1024.0f, dtype),
            "backward " + what, gpu_tolerance(dtype), 1e-5);
        // The loss scale read on the device.
        const Tensor scale = Tensor::from_floats({1}, {65536.0f});
        check_gpu_close(
            softmax_cross_entropy_backward(gpu.probabilities, labels_gpu, to_cuda(scale), dtype),
            softmax_cross_entropy_backward(cpu.probabilities, labels, scale, dtype),
            "backward with a device loss scale " + what, gpu_tolerance(dtype), 1e-3);

        BOOST_CHECK_EQUAL(count_correct(logits_gpu, labels_gpu), count_correct(logits, labels));
      }
    }
  }
}

// The trainer's fused loss op: on the GPU the same bits as the three CUDA ops it replaces, and
// like the CPU's fused op within fp32 tolerance (the tally's count exactly).
BOOST_AUTO_TEST_CASE(the_fused_step_equals_the_cuda_ops_it_replaces_and_matches_the_cpu) {
  Generator generator(43);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const std::int64_t class_counts[] = {10, 1000};
  const std::int64_t row_counts[] = {1, 67, 1500};
  for (const DType dtype : types) {
    for (const std::int64_t classes : class_counts) {
      for (const std::int64_t rows : row_counts) {
        const std::string what = std::string(dtype_name(dtype)) + " with " + std::to_string(rows) +
                                 " rows of " + std::to_string(classes) + " classes";
        const Tensor logits = random_tensor({rows, classes}, dtype, generator, -8.0f, 8.0f);
        const Tensor labels = random_labels(rows, classes, generator);
        const Tensor scale = Tensor::from_floats({1}, {65536.0f});
        const Tensor logits_gpu = to_cuda(logits);
        const Tensor labels_gpu = to_cuda(labels);
        const Tensor scale_gpu = to_cuda(scale);
        const StepTally start{5.5, 3};

        Tensor unfused_tally = make_step_tally(Device::cuda(0), start);
        const SoftmaxCrossEntropyResult forward =
            softmax_cross_entropy_forward(logits_gpu, labels_gpu);
        const Tensor unfused_dlogits =
            softmax_cross_entropy_backward(forward.probabilities, labels_gpu, scale_gpu, dtype);
        add_to_step_tally(unfused_tally, forward.loss, logits_gpu, labels_gpu);

        Tensor tally = make_step_tally(Device::cuda(0), start);
        const SoftmaxCrossEntropyStep fused =
            softmax_cross_entropy_step(logits_gpu, labels_gpu, scale_gpu, tally);
        check_gpu_equal(fused.loss, to_host(forward.loss), "loss " + what);
        check_gpu_equal(fused.dlogits, to_host(unfused_dlogits), "dlogits " + what);
        check_gpu_equal(tally, to_host(unfused_tally), "tally " + what);

        Tensor cpu_tally = make_step_tally(Device::cpu(), start);
        const SoftmaxCrossEntropyStep cpu =
            softmax_cross_entropy_step(logits, labels, scale, cpu_tally);
        check_gpu_close(fused.loss, cpu.loss, "loss vs cpu " + what, 1e-5, 0.0);
        check_gpu_close(fused.dlogits, cpu.dlogits, "dlogits vs cpu " + what, gpu_tolerance(dtype),
                        1e-3);
        const StepTally gpu_sums = read_step_tally(tally);
        const StepTally cpu_sums = read_step_tally(cpu_tally);
        BOOST_CHECK_EQUAL(gpu_sums.correct, cpu_sums.correct);
        BOOST_CHECK_CLOSE(gpu_sums.loss_sum, cpu_sums.loss_sum, 1e-3);
      }
    }
  }
}

// Gradient accumulation's micro-batch: the gradient divided by the rows of its step. Bit for
// bit the formula's fp32 expression from the forward kernel's probabilities, close to the
// CPU's, with the loss and tally of the default call.
BOOST_AUTO_TEST_CASE(the_fused_step_divides_the_gradient_by_the_rows_of_its_step) {
  Generator generator(47);
  const std::int64_t rows = 67, classes = 10;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::int64_t step_rows : {rows, std::int64_t{4 * 67}, std::int64_t{200}}) {
      const std::string what =
          std::string(dtype_name(dtype)) + ", step of " + std::to_string(step_rows) + " rows";
      const Tensor logits = random_tensor({rows, classes}, dtype, generator, -8.0f, 8.0f);
      const Tensor labels = random_labels(rows, classes, generator);
      const Tensor scale = Tensor::from_floats({1}, {65536.0f});
      const Tensor logits_gpu = to_cuda(logits);
      const Tensor labels_gpu = to_cuda(labels);
      const StepTally start{5.5, 3};

      Tensor tally = make_step_tally(Device::cuda(0), start);
      const SoftmaxCrossEntropyStep fused =
          softmax_cross_entropy_step(logits_gpu, labels_gpu, to_cuda(scale), tally, step_rows);
      Tensor default_tally = make_step_tally(Device::cuda(0), start);
      const SoftmaxCrossEntropyStep by_default =
          softmax_cross_entropy_step(logits_gpu, labels_gpu, to_cuda(scale), default_tally);
      check_gpu_equal(fused.loss, to_host(by_default.loss), "loss " + what);
      check_gpu_equal(tally, to_host(default_tally), "tally " + what);

      const std::vector<float> p =
          softmax_cross_entropy_forward(logits_gpu, labels_gpu).probabilities.to_floats();
      const std::vector<float> label_values = labels.to_floats();
      const float factor = 65536.0f / static_cast<float>(step_rows);
      std::vector<float> formula(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) {
        const bool at_label = static_cast<float>(i % classes) == label_values[i / classes];
        formula[i] = at_label ? (p[i] - 1.0f) * factor : p[i] * factor;
      }
      check_gpu_equal(fused.dlogits, Tensor::from_floats({rows, classes}, formula, dtype),
                      "dlogits " + what);

      Tensor cpu_tally = make_step_tally(Device::cpu(), start);
      check_gpu_close(
          fused.dlogits,
          softmax_cross_entropy_step(logits, labels, scale, cpu_tally, step_rows).dlogits,
          "dlogits vs cpu " + what, gpu_tolerance(dtype), 1e-3);
    }
  }
}

// Label smoothing on the GPU: the forward, both backwards and the fused step like the CPU's
// within the tolerances above (a row's sum over its classes is a block reduction there), the
// step bit for bit the CUDA ops it replaces; a bad eps is refused before any launch.
BOOST_AUTO_TEST_CASE(label_smoothing_matches_the_cpu) {
  Generator generator(53);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::int64_t classes : {std::int64_t{10}, std::int64_t{1000}}) {
      for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{67}}) {
        const float eps = rows == 1 ? 0.3f : 0.1f;
        const std::string what = std::string(dtype_name(dtype)) + " with " + std::to_string(rows) +
                                 " rows of " + std::to_string(classes) + " classes, eps " +
                                 std::to_string(eps);
        const Tensor logits = random_tensor({rows, classes}, dtype, generator, -8.0f, 8.0f);
        const Tensor labels = random_labels(rows, classes, generator);
        const Tensor scale = Tensor::from_floats({1}, {65536.0f});
        const Tensor logits_gpu = to_cuda(logits);
        const Tensor labels_gpu = to_cuda(labels);
        const Tensor scale_gpu = to_cuda(scale);
        const StepTally start{5.5, 3};

        const SoftmaxCrossEntropyResult cpu = softmax_cross_entropy_forward(logits, labels, eps);
        const SoftmaxCrossEntropyResult gpu =
            softmax_cross_entropy_forward(logits_gpu, labels_gpu, eps);
        check_gpu_close(gpu.loss, cpu.loss, "loss " + what, 1e-5, 0.0);
        check_gpu_close(gpu.probabilities, cpu.probabilities, "probabilities " + what, 1e-5, 1e-7);
        check_gpu_close(
            softmax_cross_entropy_backward(gpu.probabilities, labels_gpu, 1024.0f, dtype, eps),
            softmax_cross_entropy_backward(cpu.probabilities, labels, 1024.0f, dtype, eps),
            "backward " + what, gpu_tolerance(dtype), 1e-5);
        const Tensor unfused_dlogits =
            softmax_cross_entropy_backward(gpu.probabilities, labels_gpu, scale_gpu, dtype, eps);
        check_gpu_close(
            unfused_dlogits,
            softmax_cross_entropy_backward(cpu.probabilities, labels, scale, dtype, eps),
            "backward with a device loss scale " + what, gpu_tolerance(dtype), 1e-3);
        Tensor unfused_tally = make_step_tally(Device::cuda(0), start);
        add_to_step_tally(unfused_tally, gpu.loss, logits_gpu, labels_gpu);

        Tensor tally = make_step_tally(Device::cuda(0), start);
        const SoftmaxCrossEntropyStep fused =
            softmax_cross_entropy_step(logits_gpu, labels_gpu, scale_gpu, tally, 0, eps);
        check_gpu_equal(fused.loss, to_host(gpu.loss), "step loss " + what);
        check_gpu_equal(fused.dlogits, to_host(unfused_dlogits), "step dlogits " + what);
        check_gpu_equal(tally, to_host(unfused_tally), "step tally " + what);

        Tensor cpu_tally = make_step_tally(Device::cpu(), start);
        const SoftmaxCrossEntropyStep cpu_step =
            softmax_cross_entropy_step(logits, labels, scale, cpu_tally, 0, eps);
        check_gpu_close(fused.loss, cpu_step.loss, "step loss vs cpu " + what, 1e-5, 0.0);
        check_gpu_close(fused.dlogits, cpu_step.dlogits, "step dlogits vs cpu " + what,
                        gpu_tolerance(dtype), 1e-3);
        const StepTally gpu_sums = read_step_tally(tally);
        const StepTally cpu_sums = read_step_tally(cpu_tally);
        BOOST_CHECK_EQUAL(gpu_sums.correct, cpu_sums.correct);
        BOOST_CHECK_CLOSE(gpu_sums.loss_sum, cpu_sums.loss_sum, 1e-3);

        const std::int64_t step_rows = 4 * rows + 1;
        check_gpu_close(
            softmax_cross_entropy_step(logits_gpu, labels_gpu, scale_gpu, tally, step_rows, eps)
                .dlogits,
            softmax_cross_entropy_step(logits, labels, scale, cpu_tally, step_rows, eps).dlogits,
            "dlogits of a step of " + std::to_string(step_rows) + " rows " + what,
            gpu_tolerance(dtype), 1e-3);
      }
    }
  }
  const Tensor logits = to_cuda(Tensor::zeros({2, 3}, DType::f32));
  const Tensor labels = to_cuda(Tensor::from_floats({2}, {0, 1}, DType::i32));
  const Tensor scale = to_cuda(Tensor::from_floats({1}, {1.0f}));
  const auto names = [](const char* op) {
    return [op](const Error& error) {
      const std::string message = error.what();
      return message.find(op) != std::string::npos &&
             message.find("label_smoothing must be in [0, 1), got 1") != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_forward(logits, labels, 1.0f), Error,
                        names("softmax_cross_entropy_forward"));
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_backward(logits, labels, scale, DType::f32, 1.0f),
                        Error, names("softmax_cross_entropy_backward"));
  Tensor tally = make_step_tally(Device::cuda(0));
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_step(logits, labels, scale, tally, 0, 1.0f), Error,
                        names("softmax_cross_entropy_step"));
  BOOST_TEST(read_step_tally(tally).correct == 0u, "nothing was added by a refused call");
}

BOOST_AUTO_TEST_CASE(count_correct_breaks_ties_and_nan_like_the_cpu) {
  Tensor logits = Tensor::from_floats({4, 3}, {1, 1, 0, 0, 2, 2, NAN, 5, 1, 3, NAN, NAN});
  Tensor labels = Tensor::empty({4}, DType::i32);
  const std::int32_t values[] = {0, 1, 0, 2};
  std::copy(values, values + 4, labels.data<std::int32_t>());
  BOOST_CHECK_EQUAL(count_correct(to_cuda(logits), to_cuda(labels)), count_correct(logits, labels));
}

#ifdef ALLOY_HAVE_CUDA
// Every grid's last block puts its arrival counter back to zero, ready for the next launch (and
// for the next replay of a captured graph); the unscale pass's overflow mark too.
BOOST_AUTO_TEST_CASE(arrival_counters_are_zero_between_launches) {
  Generator generator(42);
  const Tensor logits = to_cuda(random_tensor({300, 10}, DType::f16, generator, -8.0f, 8.0f));
  const Tensor labels = to_cuda(random_labels(300, 10, generator));
  softmax_cross_entropy_forward(logits, labels);
  Tensor tally = make_step_tally(Device::cuda(0));
  softmax_cross_entropy_step(logits, labels, to_cuda(Tensor::from_floats({1}, {1024.0f})), tally);
  const cudaStream_t stream = cuda::stream_of(Device::cuda(0));
  // The slots lie side by side in one buffer.
  const unsigned int* first = cuda::arrival_counter(cuda::ArrivalSlot::softmax_loss) -
                              static_cast<int>(cuda::ArrivalSlot::softmax_loss);
  const int slots = static_cast<int>(cuda::ArrivalSlot::count);
  std::vector<unsigned int> counters(static_cast<std::size_t>(slots), 1u);
  BOOST_REQUIRE(cudaMemcpyAsync(counters.data(), first, sizeof(unsigned int) * counters.size(),
                                cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  for (int slot = 0; slot < slots; ++slot)
    BOOST_TEST(counters[static_cast<std::size_t>(slot)] == 0u, "slot " << slot);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
