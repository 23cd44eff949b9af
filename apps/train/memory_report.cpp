#include "apps/train/memory_report.h"

#include <chrono>
#include <optional>

#include "amp/mixed_precision.h"
#include "apps/train/data_parallel.h"
#include "apps/train/layout_choice.h"
#include "apps/train/lm_trainer.h"
#include "apps/train/micro_batches.h"
#include "apps/train/normalization.h"
#include "apps/train/recompute.h"
#include "apps/train/train_step.h"
#include "core/data/synthetic.h"
#include "core/error.h"
#include "core/models/models.h"
#include "core/nn/cast_policy.h"
#include "core/ops/step_tally.h"
#include "core/random.h"
#include "parallel/distributed_sampler.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/context.h"
#endif

namespace alloy::app {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Tensor to_device(const Tensor& host, Device device) {
  if (host.device() == device) return host;
  Tensor placed = Tensor::empty(host.shape(), host.dtype(), device, MemoryCategory::data);
  placed.copy_from(host);
  return placed;
}

// Waits for the step's work (a device-to-host copy of the tally, the step's last output, off
// the CPU).
void synchronize(const Tensor& tally) {
  if (tally.device().is_cpu()) return;
  read_step_tally(tally);
}

// A CUDA device readied for measuring a level: its context built first, since its cuBLAS
// workspace (32 MiB, held as long as the process) belongs to no level (the first level measured
// used to count it, and to report it as left allocated), then its block cache given back to the
// driver; nothing to do on the CPU.
void prepare_device(Device device) {
#ifdef ALLOY_HAVE_CUDA
  if (device.is_cuda()) {
    cuda::context(device);
    cuda::empty_cache(device.index);
  }
#else
  static_cast<void>(device);
#endif
}

std::optional<DeviceView> device_view_of(Device device) {
#ifdef ALLOY_HAVE_CUDA
  if (device.is_cuda()) {
    const cuda::DeviceMemoryInfo driver = cuda::device_memory_info(device.index);
    return DeviceView{cuda::cache_statistics(device.index).reserved_bytes, driver.used_bytes(),
                      driver.total_bytes};
  }
#else
  static_cast<void>(device);
#endif
  return std::nullopt;
}

// Rank 0 of a world whose other ranks are not there: every collective leaves the tensors as they
// are, which is all a memory measurement needs (they allocate nothing of their own on the CPU).
class SimulatedGroup final : public parallel::ProcessGroup {
 public:
  explicit SimulatedGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void allreduce(const Tensor&, parallel::ReduceOp) override {}
  void allreduce_half_sum(const Tensor&) override {}
  void broadcast(const Tensor&, int) override {}
  void reduce_scatter(const Tensor&, const std::vector<std::int64_t>&,
                      parallel::ReduceOp) override {}
  void reduce_scatter_half_sum(const Tensor&, const std::vector<std::int64_t>&) override {}
  void allgather(const Tensor&, const std::vector<std::int64_t>&) override {}
  std::vector<std::string> allgather_bytes(const std::string& bytes) override {
    return std::vector<std::string>(static_cast<std::size_t>(size_), bytes);
  }
  void barrier() override {}
  // On a device too: nothing to queue.
  void allreduce_async(const Tensor&, parallel::ReduceOp, parallel::StreamHandle) override {}
  void allreduce_half_sum_async(const Tensor&, parallel::StreamHandle) override {}
  void broadcast_async(const Tensor&, int, parallel::StreamHandle) override {}
  void reduce_scatter_async(const Tensor&, const std::vector<std::int64_t>&, parallel::ReduceOp,
                            parallel::StreamHandle) override {}
  void reduce_scatter_half_sum_async(const Tensor&, const std::vector<std::int64_t>&,
                                     parallel::StreamHandle) override {}
  void allgather_async(const Tensor&, const std::vector<std::int64_t>&,
                       parallel::StreamHandle) override {}

 private:
  int size_;
};

}  // namespace

optim::OptimizerConfig mem_optimizer_config(const std::string& kind) {
  optim::OptimizerConfig config;
  config.kind = kind;
  config.lr = kind == "sgd" ? 0.01f : 0.001f;
  config.momentum = kind == "sgd" ? 0.9f : 0.0f;
  return config;
}

std::int64_t LevelReport::sum_of_category_peaks() const {
  std::int64_t sum = 0;
  for (std::int64_t bytes : peak)
    sum += bytes;
  return sum;
}

amp::AmpProperties level_properties(amp::OptLevel level, std::optional<DType> half_dtype) {
  amp::AmpOverrides overrides;
  if (level != amp::OptLevel::O0) overrides.half_dtype = half_dtype;
  return amp::resolve_properties(level, overrides);
}

LevelReport measure_level(const MeasureConfig& config, const amp::AmpProperties& properties) {
  ALLOY_CHECK(config.batch_size >= 1 && config.steps >= 1, "measure_level: batch size ",
              config.batch_size, " and steps ", config.steps, " must be at least 1");
  MemoryStats& stats = memory_stats(config.device);
  // Blocks an earlier level cached would serve this one and hide its reservation.
  prepare_device(config.device);
  const MemorySnapshot before = stats.snapshot();
  LevelReport report;
  report.properties = properties;
  report.steps = config.steps;
  report.world_size = config.world_size;
  report.zero = config.zero;
  const bool data_parallel = config.world_size > 1 || config.zero != 0;
  ALLOY_CHECK(!data_parallel || !models::is_gpt_model(config.model),
              "measure_level: a language model is measured as a single process");
  const std::int64_t rank_batch = parallel::local_batch_size(config.batch_size, config.world_size);

  nn::CastPolicy policy;
  policy.enabled = properties.cast_policy;
  policy.half_dtype = properties.half_dtype;
  nn::set_cast_policy(policy);
  MemorySnapshot after;
  try {
    if (models::is_gpt_model(config.model)) {
      const GptMeasurement gpt =
          measure_gpt_steps(config, properties, [&] { stats.reset_peaks(); });
      report.parameter_count = gpt.parameter_count;
      report.timed_seconds = gpt.timed_seconds;
      after = stats.snapshot();
      report.device_view = device_view_of(config.device);
    } else {
      Generator generator(static_cast<std::uint64_t>(config.seed));
      std::unique_ptr<nn::Module> model = models::make_model(
          config.model, generator, config.num_classes, {config.channels, config.image_size});
      model->to_device(config.device);
      model->set_needs_input_grad(false);
      model->set_layout(
          choose_layout(config.layout, config.model, *model, config.device.is_cuda(), properties));
      apply_recompute(*model, config.model, config.recompute);
      for (const nn::Parameter* p : model->parameters())
        report.parameter_count += p->value.numel();
      amp::MixedPrecision precision(properties, *model, config.optimizer);
      precision.set_clip_grad_norm(config.clip_grad_norm);
      precision.set_ema_decay(config.ema_decay);
      SimulatedGroup group(config.world_size);
      std::unique_ptr<DataParallel> replica;
      if (data_parallel) {
        parallel::DdpOptions ddp;
        ddp.reduce_to_owners = config.zero == 1;
        replica = std::make_unique<DataParallel>(group, *model, precision, ddp);
      }
      const data::Dataset batch = data::make_synthetic_dataset(
          rank_batch, static_cast<std::uint64_t>(config.seed), "mem/batch", config.num_classes,
          config.image_size, config.image_size, config.channels);
      const Tensor images = to_device(batch.images, config.device);
      const Tensor normalization = normalization_table(
          parse_normalization(config.normalize, config.channels), config.device);
      const Tensor labels = to_device(batch.labels, config.device);
      Tensor tally = make_step_tally(config.device);  // the epoch's sums, as the trainer keeps them
      model->set_training(true);

      // Steady state from here: the fp32 model that O2/O3 rounded to half is gone.
      stats.reset_peaks();
      auto timed_from = std::chrono::steady_clock::now();
      for (std::int64_t step = 0; step < config.steps; ++step) {
        if (step == 1) timed_from = std::chrono::steady_clock::now();
        // The step `alloy train` runs.
        train_step(*model, precision, images, labels, tally, replica.get(),
                   config.accumulation_steps, 0.0f, normalization);
        synchronize(tally);
      }
      report.timed_seconds = seconds_since(timed_from);
      after = stats.snapshot();
      report.device_view = device_view_of(config.device);
    }
  } catch (...) {
    nn::clear_weight_cast_cache();
    nn::set_cast_policy(nn::CastPolicy{});
    throw;
  }
  nn::set_cast_policy(nn::CastPolicy{});

  // Anything alive before the level (nothing, normally) is not the level's.
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    report.peak[c] = after.peak[c] - before.current[c];
  }
  report.peak_bytes = after.total_peak - before.total_current;
  report.leaked_bytes = stats.snapshot().total_current - before.total_current;
  const std::int64_t timed_steps = config.steps > 1 ? config.steps - 1 : 1;
  report.images_per_second =
      report.timed_seconds > 0
          ? static_cast<double>(timed_steps * rank_batch) / report.timed_seconds
          : 0.0;
  return report;
}

}  // namespace alloy::app
