// The ImageNet-class ResNets on a GPU at O2: resnet50 on 64x64 RGB synthetic images (its
// ImageNet stem: 7x7/2 convolution and max pool, then bottlenecks), normalised on the device
// with ImageNet's statistics, trains with finite weights; steps replayed from a captured CUDA
// graph end with the weights of eager steps, bit for bit, without a cudaMalloc in the replays.
// And, fast enough for the emulator's regular run: resnet18's ImageNet stem and the device's
// normalisation table give the CPU's logits.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>

#include "apps/train/normalization.h"
#include "apps/train/step_graph.h"
#include "apps/train/trainer.h"
#include "core/data/dataset.h"
#include "core/data/synthetic.h"
#include "core/models/models.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/context.h"
#endif

using namespace alloy;
using namespace alloy::app;

BOOST_AUTO_TEST_SUITE(trainer_resnet_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

constexpr std::int64_t kSteps = StepGraph::kWarmupSteps + 2;

struct Run {
  std::string digest;
  bool captured = false;
  std::int64_t mallocs_after_capture = -1;
  std::int64_t mallocs_at_end = -1;
  bool finite = true;
  std::int64_t skipped_steps = -1;
};

Run train(const std::string& cuda_graph) {
  TrainConfig options;
  options.model = "resnet50";
  options.dataset = "synthetic";
  options.image_size = 64;
  options.channels = 3;
  options.num_classes = 5;
  options.synthetic_size = 16;
  options.batch_size = 2;
  options.epochs = 1;
  options.steps = kSteps;
  options.lr = 0.01;
  options.momentum = 0.9;
  options.seed = 7;
  options.threads = 1;
  options.cuda_graph = cuda_graph;
  // A scale at which the first steps do not overflow: every step updates the weights.
  amp::AmpOverrides overrides;
  overrides.init_scale = 256.0f;
  options.precision = amp::resolve_properties(amp::OptLevel::O2, overrides);
  const data::DatasetPair data = load_training_data(options);
  BOOST_TEST_REQUIRE(data.train.images.dim(1) == 3);
  Trainer trainer(options, Device::cuda(0), data);
  Run run;
  trainer.set_step_hook([&] {
    if (trainer.steps() == StepGraph::kWarmupSteps + 1) {
      run.mallocs_after_capture = cuda::cache_statistics(0).malloc_calls;
    }
    // Before the evaluation that ends the run, which allocates its own buffers.
    if (trainer.steps() == kSteps) run.mallocs_at_end = cuda::cache_statistics(0).malloc_calls;
    return false;
  });
  TrainObserver observer;
  trainer.run(observer);
  BOOST_TEST(trainer.steps() == kSteps);
  cuda::synchronize(Device::cuda(0), "finishing the test's steps");
  run.skipped_steps = trainer.precision().scaler().snapshot().skipped_steps;
  run.captured = trainer.step_graph() != nullptr && trainer.step_graph()->captured();
  run.digest = trainer.params_digest();
  for (const nn::Parameter* master : trainer.precision().canonical_parameters()) {
    for (const float value : master->value.to_floats())
      run.finite = run.finite && std::isfinite(value);
  }
  return run;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_imagenet_stem_and_normalisation_run_on_the_device_as_on_the_cpu) {
  // resnet18 at 64x64x3 (7x7/2 convolution, max pool), evaluation mode, fp32, ImageNet's
  // normalisation table: the device's logits are the CPU's up to summation order.
  Generator cpu_init(11), gpu_init(11);
  auto cpu_model = models::make_model("resnet18", cpu_init, 4, {3, 64});
  auto gpu_model = models::make_model("resnet18", gpu_init, 4, {3, 64});
  gpu_model->to_device(Device::cuda(0));
  cpu_model->set_training(false);
  gpu_model->set_training(false);
  const Normalization imagenet = parse_normalization("imagenet", 3);
  const data::Dataset batch = data::make_synthetic_dataset(2, 3, "gpu/batch", 4, 64, 64, 3);
  const Tensor cpu_logits = cpu_model->forward(
      normalize_batch(batch.images, normalization_table(imagenet, Device::cpu()), DType::f32));
  const Tensor gpu_logits = gpu_model->forward(normalize_batch(
      test::to_cuda(batch.images), normalization_table(imagenet, Device::cuda(0)), DType::f32));
  test::check_gpu_close(gpu_logits, cpu_logits, "resnet18 64x64 logits", 1e-3, 1e-3);
}

BOOST_AUTO_TEST_CASE(resnet50_o2_replayed_steps_equal_eager_steps_bit_for_bit) {
  const Run eager = train("off");
  const Run graph = train("on");
  BOOST_TEST(eager.finite);
  BOOST_TEST(eager.skipped_steps == 0);
  BOOST_TEST(graph.skipped_steps == 0);
  BOOST_TEST(!eager.captured);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.digest == eager.digest, "graph " << graph.digest << ", eager " << eager.digest);
  BOOST_TEST(graph.mallocs_at_end == graph.mallocs_after_capture, "no cudaMalloc in replays");
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
