#include "apps/cli/train_report.h"

#include <cstdio>
#include <iostream>

#include "amp/opt_level.h"
#include "apps/train/version.h"
#include "core/ops/cpu/blas_core.h"
#include "core/ops/gemm.h"

namespace alloy::app {

namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::int64_t counter(std::uint64_t count) {
  return static_cast<std::int64_t>(count);
}

std::string mebibytes(std::int64_t bytes) {
  return format("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

TrainReport::TrainReport(const TrainOptions& options, bool append_log)
    : options_(options),
      log_(options.log_json.empty() ? nullptr
                                    : std::make_unique<JsonLog>(options.log_json, append_log)),
      human_(log_ && log_->to_stdout() ? std::cerr : std::cout) {}

void TrainReport::start(Trainer& trainer) {
  const TrainOptions& o = options_;
  const data::DatasetPair& data = trainer.data();
  const std::int64_t parameters = trainer.parameter_count();
  const Shape image = data.train.example_shape();
  const bool cuda_graph = trainer.cuda_graph();  // a UsageError here comes before any output
  const char* level = amp::opt_level_name(o.precision.level);
  human_ << o.model << " (" << parameters << " parameters) on " << trainer.device().str() << ", "
         << o.threads << " threads | " << o.dataset << ": " << data.train.size() << " train, "
         << data.test.size() << " test, " << image[0] << "x" << image[1] << "x" << image[2] << ", "
         << data.train.classes << " classes | " << level << " | " << o.optimizer << " lr " << o.lr;
  if (scheduled()) {
    human_ << " (" << o.lr_schedule;
    if (o.lr_schedule != "constant") human_ << " to " << o.min_lr;
    if (o.warmup_steps > 0) human_ << ", " << o.warmup_steps << " warm-up steps";
    human_ << ")";
  }
  if (o.optimizer == "sgd") human_ << " momentum " << o.momentum;
  human_ << " weight_decay " << o.weight_decay;
  if (o.clip_grad_norm > 0) human_ << " clip_grad_norm " << o.clip_grad_norm;
  if (o.label_smoothing > 0) human_ << " label_smoothing " << o.label_smoothing;
  if (o.ema_decay > 0) human_ << " ema_decay " << o.ema_decay << (o.ema_warmup ? " (warm-up)" : "");
  human_ << " | batch " << o.batch_size;
  if (o.accumulation_steps > 1) {
    // How a step's batch is split: "batch 256 (4 x 64)", "(2 ranks x 4 x 32)" in a DDP run.
    const int world = trainer.world_size();
    human_ << " (";
    if (world > 1) human_ << world << " ranks x ";
    human_ << o.accumulation_steps << " x " << o.batch_size / world / o.accumulation_steps << ")";
  }
  if (o.recompute != "none") human_ << " | recompute " << o.recompute;
  human_ << " | " << o.epochs << " epochs | seed " << o.seed << std::endl;
  // An eager step that could have been a graph on this device says why (Gloo's collectives).
  if (!cuda_graph && trainer.device().is_cuda() && o.cuda_graph == "auto") {
    human_ << "cuda graph: eager steps: " << trainer.cuda_graph_reason() << std::endl;
  }
  if (!log_) return;
  JsonObject event;
  event.add("event", "start")
      .add("model", o.model)
      .add("opt_level", level)
      .add("device", trainer.device().str())
      .add("world_size", trainer.world_size())
      .add("cuda_graph", cuda_graph)
      .add("cuda_graph_reason", trainer.cuda_graph_reason())
      .add("allow_tf32", o.allow_tf32)
      .add("stochastic_rounding", o.stochastic_rounding)
      .add("dataset", o.dataset)
      .add("train_examples", data.train.size())
      .add("test_examples", data.test.size())
      .add("batch_size", o.batch_size)
      .add("accumulation_steps", o.accumulation_steps)
      .add("recompute", o.recompute)
      .add("layout", layout_name(trainer.model().layout()))
      .add("optimizer", o.optimizer)
      .add("lr", o.lr)
      .add("lr_schedule", o.lr_schedule)
      .add("warmup_steps", o.warmup_steps)
      .add("min_lr", o.min_lr)
      .add("momentum", o.momentum)
      .add("weight_decay", o.weight_decay)
      .add("epochs", o.epochs)
      .add("steps", o.steps)
      .add("image_size", image[1])
      .add("channels", image[0])
      .add("classes", data.train.classes)
      .add("seed", o.seed)
      .add("threads", o.threads)
      .add("blas_core", cpu::blas_core())
      .add("cpu_gemm", cpu::gemm_kernels())
      .add("parameters", parameters)
      .add("version", version_string());
  if (trainer.data_parallel()) event.add("dist_backend", o.dist_backend);
  if (o.zero != 0) event.add("zero", static_cast<std::int64_t>(o.zero));
  if (trainer.device().is_cuda()) event.add("conv_algorithms", o.conv_algorithms);
  if (o.clip_grad_norm > 0) event.add("clip_grad_norm", o.clip_grad_norm);
  if (o.label_smoothing > 0) event.add("label_smoothing", o.label_smoothing);
  if (o.ema_decay > 0) event.add("ema_decay", o.ema_decay).add("ema_warmup", o.ema_warmup);
  log_->write(event);
}

void TrainReport::on_epoch_begin(std::int64_t epoch, std::int64_t batches) {
  progress_ = std::make_unique<ProgressBar>(
      "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(options_.epochs), batches);
}

void TrainReport::on_step(std::int64_t batches, std::int64_t images, double seconds,
                          const std::function<double()>& mean_loss) {
  if (!progress_) return;
  progress_->update(batches, [&] {
    return format("loss %.4f", mean_loss()) + "  " +
           format("%.0f img/s", seconds > 0 ? images / seconds : 0.0);
  });
}

void TrainReport::on_epoch_end(const EpochStats& s) {
  progress_.reset();  // clears the bar before the epoch's line
  total_seconds_ += s.epoch_seconds;
  human_ << "epoch " << s.epoch << "/" << options_.epochs << format("  loss %.4f", s.train_loss)
         << format("  train_acc %.4f", s.train_acc) << format("  test_acc %.4f", s.test_acc);
  if (s.ema) human_ << format("  test_acc_ema %.4f", s.test_acc_ema);
  human_ << format("  %.1f s", s.epoch_seconds) << format("  %.0f img/s", s.images_per_second)
         << format("  scale %g", s.loss_scale) << "  skipped " << s.skipped_steps;
  if (scheduled()) human_ << format("  lr %.6g", s.lr);
  if (s.clipping) human_ << "  clipped " << s.clipped_steps;
  human_ << "  peak " << mebibytes(s.peak_memory_bytes) << std::endl;
  if (!log_) return;
  JsonObject event;
  event.add("event", "epoch")
      .add("epoch", s.epoch)
      .add("step", s.step)
      .add("train_loss", s.train_loss)
      .add("train_acc", s.train_acc)
      .add("test_acc", s.test_acc)
      .add("epoch_seconds", s.epoch_seconds)
      .add("images_per_second", s.images_per_second)
      .add("loss_scale", s.loss_scale)
      .add("skipped_steps", s.skipped_steps)
      .add("lr", s.lr)
      .add("peak_memory_bytes", s.peak_memory_bytes)
      .add("uploads", counter(s.round_trips.uploads))
      .add("downloads", counter(s.round_trips.downloads))
      .add("host_waits", counter(s.round_trips.host_waits))
      .add("backpressure_waits", counter(s.round_trips.backpressure_waits))
      .add("device_allocations", counter(s.round_trips.device_allocations));
  if (s.clipping) event.add("grad_norm", s.grad_norm).add("clipped_steps", s.clipped_steps);
  if (s.ema) event.add("test_acc_ema", s.test_acc_ema);
  log_->write(event);
}

void TrainReport::end(Trainer& trainer, const std::vector<std::string>& digests) {
  const std::string digest = digests.empty() ? trainer.params_digest() : digests.front();
  human_ << "done: " << trainer.epochs_done() << " epochs, " << trainer.steps() << " steps"
         << format(", test_acc %.4f", trainer.last_test_acc());
  if (trainer.options().ema_decay > 0) {
    human_ << format(", test_acc_ema %.4f", trainer.last_test_acc_ema());
  }
  human_ << ", params_digest " << digest << format(", %.1f s training", total_seconds_)
         << std::endl;
  if (!log_) return;
  JsonObject event;
  event.add("event", "end")
      .add("epoch", trainer.epochs_done())
      .add("step", trainer.steps())
      .add("test_acc", trainer.last_test_acc())
      .add("params_digest", digest);
  if (trainer.options().ema_decay > 0) event.add("test_acc_ema", trainer.last_test_acc_ema());
  if (trainer.data_parallel()) {
    event.add("world_size", static_cast<std::int64_t>(digests.size()))
        .add("params_digests", digests);
  }
  log_->write(event);
}

void TrainReport::restart(int generation, const std::string& cause, const std::string& checkpoint) {
  if (!log_) return;
  JsonObject event;
  event.add("event", "restart")
      .add("generation", generation)
      .add("cause", cause)
      .add("checkpoint", checkpoint);
  log_->write(event);
}

void TrainReport::on_checkpoint(const std::string& path, std::int64_t step, double stall_seconds,
                                double write_seconds) {
  if (!progress_ || !ProgressBar::enabled()) human_ << "checkpoint " << path << std::endl;
  if (!log_) return;
  JsonObject event;
  event.add("event", "checkpoint")
      .add("path", path)
      .add("step", step)
      .add("stall_seconds", stall_seconds)
      .add("write_seconds", write_seconds);
  log_->write(event);
}

}  // namespace alloy::app
