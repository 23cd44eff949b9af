// --cuda-graph on the CPU (apps/train/step_graph.h): which runs capture the training step (auto, on
// and off against the device and data parallelism; either optimizer captures, since both read
// lr and the step count from device memory; `on` where capture is impossible is a usage error
// naming why, also from the command line), and StepGraph's sequence driven through a stand-in
// for the CUDA capture: warm-up steps on the fixed input buffers, one capture, replays that run
// no host code, eager batches of another shape, and a failed capture that falls back (auto)
// or fails (on). The CUDA side has its own tests: tests/core/cuda/graph_gpu_test.cpp and
// tests/apps/trainer_cuda_graph_gpu_test.cpp.
#include <array>
#include <boost/test/unit_test.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "apps/cli/train_options.h"
#include "apps/train/step_graph.h"
#include "apps/train/trainer.h"
#include "core/data/dataset.h"

using namespace alloy;
using namespace alloy::app;

namespace {

bool message_has(const Error& error, const std::string& needle) {
  const std::string message = error.what();
  BOOST_TEST_INFO("message: " << message);
  return message.find(needle) != std::string::npos;
}

// What the stand-in capture saw and did.
struct Record {
  int captures = 0;
  int replays = 0;
  bool fail = false;  // the next capture throws, as one with an uncapturable call would
};

// Like a CUDA capture: the captured code runs once on the host (here it also does its "device"
// work, which is harmless since every test below counts calls only), and replay() repeats the
// device work without the host code.
class FakeCapture final : public CapturedWork {
 public:
  explicit FakeCapture(Record& record) : record_(record) {}
  void replay() override { ++record_.replays; }
  std::size_t nodes() const override { return 7; }
  std::array<std::int64_t, kMemoryCategoryCount> replay_bytes() const override {
    std::array<std::int64_t, kMemoryCategoryCount> bytes{};
    bytes[static_cast<std::size_t>(MemoryCategory::activations)] = 1 << 20;
    return bytes;
  }

 private:
  Record& record_;
};

CaptureFunction fake_capture(Record& record) {
  return [&record](Device, const std::function<void()>& work) -> std::unique_ptr<CapturedWork> {
    ++record.captures;
    work();
    if (record.fail)
      fail(
          "cudaMemcpyAsync(...) failed: operation not permitted when stream is "
          "capturing");
    return std::make_unique<FakeCapture>(record);
  };
}

data::Batch batch_of(std::int64_t rows, float first_pixel) {
  data::Batch batch;
  std::vector<float> pixels(static_cast<std::size_t>(rows * 4), 1.0f);
  pixels[0] = first_pixel;
  batch.images = Tensor::from_floats({rows, 1, 2, 2}, pixels, DType::u8, MemoryCategory::data);
  batch.labels = Tensor::from_floats({rows}, std::vector<float>(static_cast<std::size_t>(rows), 3),
                                     DType::i32, MemoryCategory::data);
  return batch;
}

// The step's side as the trainer gives it: how often its host code ran, and what it was handed.
struct Calls {
  int runs = 0;
  std::vector<float> first_pixels;  // images[0] at each run
  const void* images = nullptr;     // the buffer the last run saw
};

StepWork work_for(Calls& calls) {
  return [&calls](const Tensor& images, const Tensor& labels) {
    ++calls.runs;
    calls.first_pixels.push_back(images.to_floats()[0]);
    BOOST_TEST(labels.to_floats()[0] == 3.0f);
    calls.images = images.raw();
  };
}

TrainOptions parse(std::vector<std::string> args) {
  return parse_train_options(args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(step_graph)

BOOST_AUTO_TEST_CASE(modes_parse_and_a_bad_one_names_the_flag) {
  BOOST_TEST((parse_cuda_graph_mode("auto") == CudaGraphMode::automatic));
  BOOST_TEST((parse_cuda_graph_mode("on") == CudaGraphMode::on));
  BOOST_TEST((parse_cuda_graph_mode("off") == CudaGraphMode::off));
  BOOST_CHECK_EXCEPTION(parse_cuda_graph_mode("yes"), UsageError, [](const UsageError& e) {
    return message_has(e, "cuda_graph 'yes'") && message_has(e, "auto, on or off");
  });
}

BOOST_AUTO_TEST_CASE(the_plan_over_every_mode_device_and_world) {
  for (const CudaGraphMode mode :
       {CudaGraphMode::automatic, CudaGraphMode::on, CudaGraphMode::off}) {
    for (const bool cuda : {false, true}) {
      // {world, group, gloo}
      const std::tuple<int, bool, bool> worlds[] = {
          {1, false, false}, {1, true, false}, {2, true, false}, {1, true, true}, {2, true, true}};
      for (const auto& [world, group, gloo] : worlds) {
        BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode) << ", cuda " << cuda << ", world "
                                   << world << ", group " << group << ", gloo " << gloo) {
          // Data parallelism over NCCL is captured (its collectives are device work), even in
          // a group of one rank; over Gloo, whose buckets the host stages, it stays eager.
          const bool capturable = cuda && !gloo;
          const CudaGraphSetting setting{cuda, world, group, gloo};
          if (mode == CudaGraphMode::off) {
            const CudaGraphPlan plan = plan_cuda_graph(mode, setting);
            BOOST_TEST(!plan.capture);
            BOOST_TEST(plan.reason == "--cuda-graph off");
          } else if (capturable) {
            const CudaGraphPlan plan = plan_cuda_graph(mode, setting);
            BOOST_TEST(plan.capture);
            BOOST_TEST(plan.reason.empty());
          } else {
            // The first obstacle is the one named.
            const std::string why = !cuda ? "CPU" : "over Gloo";
            if (mode == CudaGraphMode::on) {
              BOOST_CHECK_EXCEPTION(plan_cuda_graph(mode, setting), UsageError,
                                    [&](const UsageError& e) {
                                      return message_has(e, "cuda_graph on") && message_has(e, why);
                                    });
            } else {
              const CudaGraphPlan plan = plan_cuda_graph(mode, setting);
              BOOST_TEST(!plan.capture);
              BOOST_TEST(plan.reason.find(why) != std::string::npos, plan.reason);
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_flag_defaults_to_auto_and_on_fails_early_where_the_flags_rule_it_out) {
  BOOST_TEST(parse({}).cuda_graph == "auto");
  BOOST_TEST(parse({"--cuda-graph", "off", "--device", "cpu"}).cuda_graph == "off");
  BOOST_TEST(parse({"--cuda-graph", "auto", "--device", "cpu"}).cuda_graph == "auto");
  // --device auto may still find a GPU: decided once the device is chosen.
  BOOST_TEST(parse({"--cuda-graph", "on"}).cuda_graph == "on");
  const auto usage_error_naming = [](std::vector<std::string> args, const std::string& why) {
    BOOST_TEST_CONTEXT(args.back()) {
      BOOST_CHECK_EXCEPTION(parse(args), UsageError, [&](const UsageError& e) {
        return message_has(e, "cuda_graph") && message_has(e, why);
      });
    }
  };
  usage_error_naming({"--cuda-graph", "sometimes"}, "auto, on or off");
  usage_error_naming({"--cuda-graph", "on", "--device", "cpu"}, "CPU");
  usage_error_naming({"--cuda-graph", "on", "--gpus", "2", "--dist-backend", "gloo"},
                     "over Gloo (2 ranks)");
  usage_error_naming({"--cuda-graph", "on", "--nodes", "2", "--dist-backend", "gloo"},
                     "over Gloo (2 ranks)");
  usage_error_naming({"--cuda-graph", "on", "--dist-backend", "gloo"}, "over Gloo (1 rank)");
  // Over NCCL the collectives are captured with the step.
  BOOST_TEST(
      parse({"--cuda-graph", "on", "--dist-backend", "nccl", "--device", "cuda"}).cuda_graph ==
      "on");
  BOOST_TEST(parse({"--cuda-graph", "on", "--gpus", "2", "--device", "cuda"}).cuda_graph == "on");
  // AdamW's lr, step count and bias corrections are read from device memory: capturable.
  BOOST_TEST(parse({"--cuda-graph", "on", "--optimizer", "adamw"}).optimizer == "adamw");
}

BOOST_AUTO_TEST_CASE(a_cpu_trainer_runs_eagerly_and_refuses_on) {
  TrainOptions options;
  options.model = "mlp";
  options.dataset = "synthetic";
  options.threads = 1;
  Trainer automatic(options, Device::cpu(), data::load_datasets("synthetic", "", 1));
  BOOST_TEST(!automatic.cuda_graph());
  BOOST_TEST(automatic.step_graph() == nullptr);

  options.cuda_graph = "on";  // as a config or resume could leave it, past the flag checks
  Trainer on(options, Device::cpu(), data::load_datasets("synthetic", "", 1));
  BOOST_CHECK_EXCEPTION(on.cuda_graph(), UsageError,
                        [](const UsageError& e) { return message_has(e, "CPU"); });
}

BOOST_AUTO_TEST_CASE(warm_up_then_one_capture_then_replays_from_fixed_buffers) {
  Record record;
  Calls calls;
  StepGraph graph(Device::cpu(), /*required=*/false, fake_capture(record));
  const StepWork work = work_for(calls);
  const std::int64_t warmup = StepGraph::kWarmupSteps;
  for (std::int64_t i = 0; i < warmup; ++i) {
    BOOST_TEST(graph.step(batch_of(2, static_cast<float>(10 + i)), work));
    BOOST_TEST(!graph.captured());
  }
  BOOST_TEST(calls.runs == warmup);
  BOOST_TEST(record.captures == 0);
  const void* buffer = calls.images;

  // The capture runs the host code once, then launches the graph: that is the step's run.
  BOOST_TEST(graph.step(batch_of(2, 20.0f), work));
  BOOST_TEST(graph.captured());
  BOOST_TEST(record.captures == 1);
  BOOST_TEST(record.replays == 1);
  BOOST_TEST(graph.launches() == 1);
  BOOST_TEST(graph.nodes() == 7u);
  BOOST_TEST(calls.runs == warmup + 1);
  BOOST_TEST(calls.images == buffer, "every step reads the same buffer");
  BOOST_TEST(calls.first_pixels.back() == 20.0f);

  // Replays: no host code, the batch copied into the same buffer.
  MemoryStats& stats = memory_stats(Device::cpu());
  stats.reset_peaks();
  const MemorySnapshot before = stats.snapshot();
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(graph.step(batch_of(2, static_cast<float>(30 + i)), work));
  }
  BOOST_TEST(calls.runs == warmup + 1);
  BOOST_TEST(record.captures == 1);
  BOOST_TEST(record.replays == 4);
  BOOST_TEST(graph.launches() == 4);
  // Each replay shows the captured step's memory in the statistics, and gives it back.
  const MemorySnapshot after = stats.snapshot();
  BOOST_TEST(after.total_current == before.total_current);
  BOOST_TEST(after.peak_of(MemoryCategory::activations) -
                 before.current_of(MemoryCategory::activations) >=
             (1 << 20));
  BOOST_TEST(!graph.take_notice().has_value());
}

BOOST_AUTO_TEST_CASE(a_batch_of_another_shape_is_left_to_the_caller) {
  Record record;
  Calls calls;
  StepGraph graph(Device::cpu(), /*required=*/true, fake_capture(record));
  const StepWork work = work_for(calls);
  BOOST_TEST(graph.step(batch_of(4, 1.0f), work));
  BOOST_TEST(!graph.step(batch_of(3, 1.0f), work));  // an epoch's last, smaller batch
  BOOST_TEST(calls.runs == 1);
  for (std::int64_t i = 1; i <= StepGraph::kWarmupSteps; ++i)
    BOOST_TEST(graph.step(batch_of(4, 1.0f), work));
  BOOST_TEST(graph.captured());
  BOOST_TEST(!graph.step(batch_of(3, 1.0f), work));
  BOOST_TEST(graph.launches() == 1);
  BOOST_TEST(graph.step(batch_of(4, 1.0f), work));
  BOOST_TEST(graph.launches() == 2);
}

BOOST_AUTO_TEST_CASE(a_failed_capture_in_auto_falls_back_once) {
  Record record;
  record.fail = true;
  Calls calls;
  StepGraph graph(Device::cpu(), /*required=*/false, fake_capture(record));
  const StepWork work = work_for(calls);
  for (std::int64_t i = 0; i < StepGraph::kWarmupSteps; ++i)
    BOOST_TEST(graph.step(batch_of(2, 1.0f), work));
  BOOST_TEST(!graph.step(batch_of(2, 1.0f), work), "the caller runs the failed step eagerly");
  BOOST_TEST(record.captures == 1);
  BOOST_TEST(record.replays == 0);
  BOOST_TEST(!graph.captured());
  const std::optional<std::string> notice = graph.take_notice();
  BOOST_REQUIRE(notice.has_value());
  BOOST_TEST(notice->find("runs eagerly") != std::string::npos, *notice);
  BOOST_TEST(notice->find("not permitted when stream is capturing") != std::string::npos, *notice);
  BOOST_TEST(!graph.take_notice().has_value(), "said once");
  // From now on every step is the caller's, and nothing is captured again.
  BOOST_TEST(!graph.step(batch_of(2, 1.0f), work));
  BOOST_TEST(record.captures == 1);
  BOOST_TEST(calls.runs == StepGraph::kWarmupSteps + 1);
}

BOOST_AUTO_TEST_CASE(a_failed_capture_with_on_is_an_error_naming_the_cause) {
  Record record;
  record.fail = true;
  Calls calls;
  StepGraph graph(Device::cpu(), /*required=*/true, fake_capture(record));
  const StepWork work = work_for(calls);
  for (std::int64_t i = 0; i < StepGraph::kWarmupSteps; ++i)
    graph.step(batch_of(2, 1.0f), work);
  BOOST_CHECK_EXCEPTION(graph.step(batch_of(2, 1.0f), work), Error, [](const Error& e) {
    return message_has(e, "cuda_graph on") && message_has(e, "cannot be captured") &&
           message_has(e, "cudaMemcpyAsync");
  });
  BOOST_TEST(record.replays == 0);
}

BOOST_AUTO_TEST_SUITE_END()
