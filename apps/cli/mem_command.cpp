// alloy mem: the per-opt-level memory report (apps/train/memory_report.h does the work). The table
// goes to standard output, or to standard error when --json - takes standard output.
#include <iostream>
#include <memory>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/json_log.h"
#include "apps/cli/memory_report.h"
#include "apps/train/device_choice.h"
#include "apps/train/max_batch.h"
#include "core/error.h"
#include "core/ops/allow_tf32.h"
#include "core/ops/attention_kernel.h"
#include "core/thread_pool.h"

namespace alloy::app {

int run_mem(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    print_mem_help();
    return kExitSuccess;
  }
  const MemOptions options = parse_mem_options(args);
  // Output paths are checked before the (possibly long) measurement.
  if (!options.plot.empty()) check_writable("--plot", options.plot);
  std::unique_ptr<JsonLog> json;
  if (!options.json.empty()) json = std::make_unique<JsonLog>(options.json);

  set_cpu_threads(options.threads);
  set_allow_tf32(options.allow_tf32);  // process-wide, as `alloy train` sets it
  set_attention_kernel(parse_attention_kernel(options.attention_kernel));
  const DeviceChoice device = choose_device(options.device);
  if (options.max_batch && device.device.is_cpu()) {
    fail("--max-batch needs a CUDA device, and this run is on the CPU (", device.explanation, ")");
  }
  std::cerr << "alloy: " << device.explanation << std::endl;

  MeasureConfig config;
  config.model = options.model;
  config.image_size = options.image_size;
  config.channels = options.channels;
  config.num_classes = options.num_classes;
  config.normalize = options.normalize;
  config.gpt = options.gpt;
  config.batch_size = options.batch_size;
  config.steps = options.steps;
  config.accumulation_steps = options.accumulation_steps;
  config.clip_grad_norm = static_cast<float>(options.clip_grad_norm);
  config.recompute = options.recompute;
  config.ema_decay = static_cast<float>(options.ema_decay);
  config.seed = options.seed;
  config.device = device.device;
  config.optimizer = mem_optimizer_config(options.optimizer);
  config.world_size = options.world_size;

  ReportHeader header;
  header.model = options.model;
  header.batch_size = options.batch_size;
  header.accumulation_steps = options.accumulation_steps;
  header.clip_grad_norm = options.clip_grad_norm;
  header.recompute = options.recompute;
  header.ema_decay = options.ema_decay;
  header.device = device.device.str();
  header.optimizer = options.optimizer == "sgd" ? "sgd momentum 0.9" : "adamw";
  header.steps = options.steps;
  header.world_size = options.world_size;
  if (models::is_gpt_model(options.model)) header.sequence_length = options.gpt.block_size;

  std::vector<LevelReport> reports;
  for (amp::OptLevel level : options.levels) {
    std::cerr << "alloy: measuring " << amp::opt_level_name(level) << " (" << options.steps
              << (options.steps == 1 ? " step" : " steps") << ")" << std::endl;
    const amp::AmpProperties properties = level_properties(level, options.half_dtype);
    // With --zero 1, plain DDP first and ZeRO beside it.
    for (int zero = 0; zero <= options.zero; ++zero) {
      config.zero = zero;
      reports.push_back(measure_level(config, properties));
    }
    if (options.max_batch) {
      std::cerr << "alloy: searching the largest batch of " << amp::opt_level_name(level)
                << " (up to " << options.max_batch_limit << ")" << std::endl;
      reports.back().max_batch =
          find_max_batch(config, properties, options.max_batch_limit, kMaxBatchTolerance);
    }
  }

  std::ostream& table_out = json && json->to_stdout() ? std::cerr : std::cout;
  table_out << format_table(header, reports) << std::flush;
  if (json) {
    for (const JsonObject& object : json_objects(header, reports))
      json->write(object);
  }
  if (!options.plot.empty()) {
    write_text_atomically("--plot", options.plot, render_svg(header, reports));
    std::cerr << "alloy: wrote " << options.plot << std::endl;
  }
  return kExitSuccess;
}

}  // namespace alloy::app
