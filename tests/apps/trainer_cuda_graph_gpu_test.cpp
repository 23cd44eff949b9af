// --cuda-graph on a GPU: N training steps replayed from one captured graph end with the same
// weights, bit for bit, as N eager steps (LeNet and resnet18 at O2 with SGD, LeNet with AdamW, with
// gradient-norm clipping and with weight averages too, a small ResNet with its blocks recomputed,
// synthetic data) and the same optimizer step count, and the replays call no cudaMalloc. Over whole
// epochs, the last, smaller batch runs eagerly, evaluation runs eagerly, and the graph keeps
// replaying in the next epoch with the same figures as an eager run. With auto, a step that cannot
// be captured runs eagerly after a notice, with the eager run's result.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/train/step_graph.h"
#include "apps/train/trainer.h"
#include "core/data/dataset.h"
#include "core/models/models.h"
#include "core/ops/clip_grad_norm.h"
#include "tests/core/nn/gradient_accumulation.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/context.h"
#endif

using namespace alloy;
using namespace alloy::app;

BOOST_AUTO_TEST_SUITE(trainer_cuda_graph_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

struct Observed : TrainObserver {
  void on_warning(const std::string& message) override { warnings.push_back(message); }
  void on_epoch_end(const EpochStats& stats) override { epochs.push_back(stats); }
  std::vector<std::string> warnings;
  std::vector<EpochStats> epochs;
};

struct Run {
  std::string digest;
  std::int64_t optimizer_steps = -1;  // the device step count, as a checkpoint saves it
  bool captured = false;
  std::int64_t launches = 0;
  std::int64_t mallocs_after_capture = -1;  // cudaMalloc calls when the capture's step is done
  std::int64_t mallocs_at_end = -1;
  float lr = 0;                              // the rate of the last step
  std::size_t nodes = 0;                     // of the captured step
  ClipTally clip;                            // with --clip-grad-norm
  std::vector<std::vector<float>> buffers;   // batch norm's running statistics
  std::vector<std::vector<float>> averages;  // with --ema-decay: the weight averages
  Observed observed;
};

// `steps` steps (0: every step of `epochs` epochs) of `model` at O2 with --cuda-graph `mode`.
// `configure`, when given, changes the options last.
Run train(const std::string& model, const std::string& mode, std::int64_t batch,
          std::int64_t epochs, std::int64_t steps, const std::string& optimizer = "sgd",
          const std::function<void(TrainConfig&)>& configure = {}) {
  TrainConfig options;
  options.model = model;
  options.dataset = "synthetic";
  options.epochs = epochs;
  options.batch_size = batch;
  options.lr = 0.05;
  options.optimizer = optimizer;
  if (optimizer == "adamw") options.lr = 1e-3;  // bias corrections from the device step count
  options.momentum = 0.9;  // optimizer state that the warm-up creates and the graph updates
  options.seed = 5;
  options.threads = 1;
  options.cuda_graph = mode;
  options.precision = amp::resolve_properties(amp::OptLevel::O2, {});
  if (configure) configure(options);
  Trainer trainer(options, Device::cuda(0), data::load_datasets("synthetic", "", 5));
  Run run;
  trainer.set_step_hook([&] {
    if (trainer.steps() == StepGraph::kWarmupSteps + 1) {
      run.mallocs_after_capture = cuda::cache_statistics(0).malloc_calls;
    }
    return steps > 0 && trainer.steps() == steps;
  });
  trainer.run(run.observed);
  cuda::synchronize(Device::cuda(0), "finishing the test's steps");
  run.mallocs_at_end = cuda::cache_statistics(0).malloc_calls;
  if (const StepGraph* graph = trainer.step_graph()) {
    run.captured = graph->captured();
    run.launches = graph->launches();
    run.nodes = graph->nodes();
    BOOST_TEST_MESSAGE(model << ": the captured step has " << graph->nodes() << " nodes");
  }
  run.digest = trainer.params_digest();
  for (const nn::Buffer* buffer : trainer.model().buffers())
    run.buffers.push_back(buffer->value.to_floats());
  for (const Tensor& average : trainer.precision().ema_parameters())
    run.averages.push_back(average.to_floats());
  run.optimizer_steps = trainer.precision().optimizer().steps();
  run.lr = trainer.precision().optimizer().current_lr();
  if (options.clip_grad_norm > 0) run.clip = read_clip_tally(trainer.precision().clip_tally());
  return run;
}

void check_replays_equal_eager_steps(const std::string& model, std::int64_t batch,
                                     const std::string& optimizer = "sgd") {
  constexpr std::int64_t kSteps = 12;
  const Run eager = train(model, "off", batch, 1, kSteps, optimizer);
  const Run graph = train(model, "on", batch, 1, kSteps, optimizer);
  BOOST_TEST(graph.optimizer_steps == eager.optimizer_steps, "replays advance the step count");
  BOOST_TEST(!eager.captured);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.launches == kSteps - StepGraph::kWarmupSteps);
  BOOST_TEST(graph.digest == eager.digest,
             model << ": graph " << graph.digest << ", eager " << eager.digest);
  BOOST_TEST(graph.mallocs_at_end == graph.mallocs_after_capture, "no cudaMalloc in replays");
}

}  // namespace

BOOST_AUTO_TEST_CASE(lenet_o2_replayed_steps_equal_eager_steps_bit_for_bit) {
  check_replays_equal_eager_steps("lenet", 64);
}

// AdamW reads lr and its step count from device memory, so replays see the current ones.
BOOST_AUTO_TEST_CASE(lenet_o2_adamw_replayed_steps_equal_eager_steps_bit_for_bit) {
  check_replays_equal_eager_steps("lenet", 64, "adamw");
}

// The schedule's rate is computed on the device from the step count, so each replay uses its
// own step's rate: replays through the warm-up and into the decay equal eager steps.
BOOST_AUTO_TEST_CASE(a_scheduled_rate_follows_the_step_count_in_replays) {
  constexpr std::int64_t kSteps = 12;
  const auto cosine = [](TrainConfig& options) {
    options.lr_schedule = "cosine";
    options.warmup_steps = 5;  // 3 eager warm-up steps, then 2 replays still warming up
    options.min_lr = 0.001;
  };
  const Run eager = train("lenet", "off", 64, 1, kSteps, "sgd", cosine);
  const Run graph = train("lenet", "on", 64, 1, kSteps, "sgd", cosine);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.digest == eager.digest, "graph " << graph.digest << ", eager " << eager.digest);
  LrSchedule schedule;
  schedule.decay = LrDecay::cosine;
  schedule.base_lr = 0.05f;
  schedule.min_lr = 0.001f;
  schedule.warmup_steps = 5;
  schedule.total_steps = 200;  // 12800 synthetic examples at batch 64, one epoch
  BOOST_TEST(graph.optimizer_steps == kSteps);
  BOOST_TEST(std::fabs(graph.lr - scheduled_lr(schedule, kSteps - 1)) <= 1e-7f,
             "last rate " << graph.lr << ", schedule " << scheduled_lr(schedule, kSteps - 1));
  BOOST_TEST(graph.lr != 0.05f);
}

// Gradient accumulation: a captured step replays both micro-batches (views of the graph's batch
// buffers) and the one amp step, with the eager run's bits.
BOOST_AUTO_TEST_CASE(mlp_o2_accumulating_two_micro_batches_replays_equal_eager_steps) {
  constexpr std::int64_t kSteps = 6;
  const auto twice = [](TrainConfig& options) { options.accumulation_steps = 2; };
  const Run eager = train("mlp", "off", 32, 1, kSteps, "sgd", twice);
  const Run graph = train("mlp", "on", 32, 1, kSteps, "sgd", twice);
  const Run whole = train("mlp", "on", 32, 1, kSteps, "sgd");
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.launches == kSteps - StepGraph::kWarmupSteps);
  BOOST_TEST(graph.optimizer_steps == kSteps);
  BOOST_TEST(graph.digest == eager.digest,
             "accumulating: graph " << graph.digest << ", eager " << eager.digest);
  BOOST_TEST(graph.mallocs_at_end == graph.mallocs_after_capture, "no cudaMalloc in replays");
  // The graph holds the second micro-batch's forward and backward: more nodes than one pass.
  BOOST_TEST(graph.nodes > whole.nodes, graph.nodes << " nodes, " << whole.nodes << " without");
  BOOST_TEST(graph.digest != whole.digest, "accumulation changed nothing");
}

// Gradient-norm clipping inside the captured step: the norm's partials come from the graph's
// pool, its coefficient and tally stay on the device, and replays equal eager steps.
BOOST_AUTO_TEST_CASE(lenet_o2_clipped_replayed_steps_equal_eager_steps_bit_for_bit) {
  constexpr std::int64_t kSteps = 12;
  const auto clipped = [](TrainConfig& options) { options.clip_grad_norm = 0.05; };
  const Run eager = train("lenet", "off", 64, 1, kSteps, "sgd", clipped);
  const Run graph = train("lenet", "on", 64, 1, kSteps, "sgd", clipped);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.digest == eager.digest, "graph " << graph.digest << ", eager " << eager.digest);
  BOOST_TEST(graph.mallocs_at_end == graph.mallocs_after_capture, "no cudaMalloc in replays");
  BOOST_TEST(eager.clip.finite_steps == kSteps);
  BOOST_TEST(graph.clip.finite_steps == kSteps);  // every replay counted
  BOOST_TEST(graph.clip.clipped_steps == eager.clip.clipped_steps);
  BOOST_TEST(eager.clip.clipped_steps > 0);
  BOOST_TEST(graph.clip.norm_sum == eager.clip.norm_sum);
}

// Weight averages: the captured step updates them on the device after the optimizer, reading
// found_inf there; replays equal eager steps, averages included, bit for bit.
BOOST_AUTO_TEST_CASE(lenet_o2_weight_averages_replay_equal_eager_steps) {
  const auto averaged = [](TrainConfig& options) { options.ema_decay = 0.9; };
  constexpr std::int64_t kSteps = 8;
  const Run eager = train("lenet", "off", 16, 1, kSteps, "sgd", averaged);
  const Run graph = train("lenet", "on", 16, 1, kSteps, "sgd", averaged);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.digest == eager.digest);
  BOOST_TEST_REQUIRE(!eager.averages.empty());
  BOOST_TEST(graph.averages == eager.averages);
}

// Activation recomputation: the captured step runs each block's forward twice, the second time
// without touching the running statistics; replays equal eager steps, and both equal the run
// that keeps its activations, bit for bit.
BOOST_AUTO_TEST_CASE(recomputed_blocks_replay_equal_eager_steps_and_kept_activations) {
  static const bool registered = [] {
    models::register_model("graph_small_resnet", [](Generator& generator, int) {
      return test::make_small_resnet(generator);
    });
    return true;
  }();
  BOOST_TEST_REQUIRE(registered);
  const auto recompute = [](TrainConfig& options) { options.recompute = "blocks"; };
  constexpr std::int64_t kSteps = 8;
  const Run kept = train("graph_small_resnet", "off", 8, 1, kSteps);
  const Run eager = train("graph_small_resnet", "off", 8, 1, kSteps, "sgd", recompute);
  const Run graph = train("graph_small_resnet", "on", 8, 1, kSteps, "sgd", recompute);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.launches == kSteps - StepGraph::kWarmupSteps);
  BOOST_TEST(graph.digest == eager.digest);
  BOOST_TEST(eager.digest == kept.digest);
  BOOST_TEST(graph.buffers == kept.buffers, "the running statistics count each batch once");
}

// The transformer blocks in a captured step: dropout reads the optimizer's step count from the
// device, so each replay draws that step's masks (a count frozen at capture would replay the
// capture's masks, and the weights would drift from the eager run's); label smoothing rides in
// the fused loss kernel's arguments.
BOOST_AUTO_TEST_CASE(ffn_o2_replays_draw_each_steps_dropout_masks) {
  const auto smoothed = [](TrainConfig& options) { options.label_smoothing = 0.1; };
  constexpr std::int64_t kSteps = 8;
  const Run eager = train("ffn", "off", 8, 1, kSteps, "sgd", smoothed);
  const Run graph = train("ffn", "on", 8, 1, kSteps, "sgd", smoothed);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.launches == kSteps - StepGraph::kWarmupSteps);
  BOOST_TEST(graph.digest == eager.digest,
             "ffn: graph " << graph.digest << ", eager " << eager.digest);
  BOOST_TEST(graph.mallocs_at_end == graph.mallocs_after_capture, "no cudaMalloc in replays");
}

BOOST_AUTO_TEST_CASE(resnet18_o2_replayed_steps_equal_eager_steps_bit_for_bit) {
  check_replays_equal_eager_steps("resnet18", 16);
}

BOOST_AUTO_TEST_CASE(whole_epochs_replay_full_batches_and_run_the_rest_eagerly) {
  // 12800 synthetic training images in batches of 48: 266 full batches and one of 32.
  constexpr std::int64_t kBatch = 48;
  constexpr std::int64_t kFull = 12800 / kBatch;
  // Heuristic algorithms: with measured ones only the first run would time them, and Find's
  // workspace would raise that run's first peak alone (seen on an H200).
  const auto heuristic = [](TrainConfig& options) { options.conv_algorithms = "heuristic"; };
  const Run eager = train("lenet", "off", kBatch, 2, 0, "sgd", heuristic);
  const Run graph = train("lenet", "on", kBatch, 2, 0, "sgd", heuristic);
  BOOST_TEST(graph.captured);
  BOOST_TEST(graph.launches == 2 * kFull - StepGraph::kWarmupSteps);
  BOOST_TEST(graph.digest == eager.digest);
  BOOST_REQUIRE_EQUAL(graph.observed.epochs.size(), 2u);
  BOOST_REQUIRE_EQUAL(eager.observed.epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    const EpochStats& g = graph.observed.epochs[e];
    const EpochStats& x = eager.observed.epochs[e];
    BOOST_TEST_CONTEXT("epoch " << e + 1) {
      BOOST_TEST(g.train_loss == x.train_loss);  // the tally, reset in place at epoch start
      BOOST_TEST(g.train_acc == x.train_acc);
      BOOST_TEST(g.test_acc == x.test_acc);
      BOOST_TEST(g.loss_scale == x.loss_scale);
      BOOST_TEST(g.skipped_steps == x.skipped_steps);
      // Replays show the captured step's memory: the peak is an eager step's.
      BOOST_TEST(g.peak_memory_bytes >= x.peak_memory_bytes);
    }
  }
}

BOOST_AUTO_TEST_CASE(auto_captures_or_falls_back_with_a_notice_and_the_eager_result) {
  constexpr std::int64_t kSteps = 10;
  const Run eager = train("lenet", "off", 64, 1, kSteps);
  const Run automatic = train("lenet", "auto", 64, 1, kSteps);
  BOOST_TEST(automatic.digest == eager.digest);
  if (automatic.captured) {
    BOOST_TEST(automatic.observed.warnings.empty());
  } else {
    BOOST_REQUIRE_EQUAL(automatic.observed.warnings.size(), 1u);
    BOOST_TEST_MESSAGE("fell back: " << automatic.observed.warnings.front());
    BOOST_TEST(automatic.observed.warnings.front().find("--cuda-graph auto") != std::string::npos);
  }
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
