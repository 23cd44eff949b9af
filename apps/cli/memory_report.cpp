#include "apps/cli/memory_report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "amp/mixed_precision.h"
#include "apps/cli/cli.h"
#include "apps/cli/json_log.h"
#include "apps/cli/sequence_flags.h"
#include "apps/train/layout_choice.h"
#include "apps/train/micro_batches.h"
#include "apps/train/normalization.h"
#include "apps/train/recompute.h"
#include "apps/train/train_step.h"
#include "core/checkpoint/posix_file.h"
#include "core/data/synthetic.h"
#include "core/error.h"
#include "core/models/models.h"
#include "core/nn/cast_policy.h"
#include "core/ops/step_tally.h"
#include "core/random.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/context.h"
#endif

namespace alloy::app {

namespace {

constexpr int kMaxThreads = 1024;
constexpr double kMiB = 1024.0 * 1024.0;

std::vector<amp::OptLevel> parse_levels(const std::string& text) {
  std::vector<amp::OptLevel> levels;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string word = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (word.empty()) usage_fail("--opt-levels '", text, "' has an empty entry");
    amp::OptLevel level{};
    try {
      level = amp::parse_opt_level(word);
    } catch (const UsageError&) {
      usage_fail("--opt-levels: '", word, "' is not one of O0, O1, O2 or O3");
    }
    if (std::find(levels.begin(), levels.end(), level) != levels.end()) {
      usage_fail("--opt-levels lists ", amp::opt_level_name(level), " twice");
    }
    levels.push_back(level);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return levels;
}

po::options_description mem_options(MemOptions& o) {
  using po::value;
  auto group = make_group("Options");
  // clang-format off
  group.add_options()
    ("model", value(&o.model)->required()->value_name("M"),
     "lenet, mlp, ffn, resnet18, resnet34 or resnet50 (the resnets' stem as in 'alloy train "
     "--help'); gpt, gpt2 or gpt-shakespeare (language models)")
    ("batch-size", value(&o.batch_size)->required()->value_name("B"),
     "images (a GPT's: sequences) per step (synthetic batches; no dataset needed)")
    ("image-size", value(&o.image_size)->default_value(28)->value_name("S"),
     "the batches' images are S x S")
    ("channels", value(&o.channels)->value_name("1|3"),
     "the batches' channels (default: 3 from --image-size 64 up, else 1, as alloy train's "
     "synthetic data)")
    ("num-classes", value(&o.num_classes)->default_value(10)->value_name("K"),
     "the model's classes")
    ("normalize", value(&o.normalize)->default_value("auto")->value_name("MODE"),
     "input normalisation, as 'alloy train --normalize'")
    ("device", value(&o.device)->default_value("auto")->value_name("D"),
     "auto, cpu, cuda or cuda:N")
    ("opt-levels", value<std::string>()->default_value("O0,O1,O2,O3")->value_name("LIST"),
     "opt levels to compare, comma-separated, each once")
    ("half-dtype", value<std::string>()->value_name("fp16|bf16"),
     "half type of O1-O3 (default fp16)")
    ("steps", value(&o.steps)->default_value(3)->value_name("N"),
     "training steps per level; images/s (sequences/s) is timed over those after the first")
    ("accumulation-steps", value(&o.accumulation_steps)->default_value(1)->value_name("N"),
     "train each step's batch as N micro-batches of B/N images (gradient accumulation), as "
     "'alloy train --accumulation-steps N' does; N must divide B")
    ("clip-grad-norm", value(&o.clip_grad_norm)->default_value(0, "0")->value_name("X"),
     "clip the unscaled gradients' total norm to X in each step, as 'alloy train "
     "--clip-grad-norm X' does (0: off)")
    ("ema-decay", value(&o.ema_decay)->default_value(0, "0")->value_name("D"),
     "keep weight averages, updated after each step, as 'alloy train --ema-decay D' does "
     "(0: off)")
    ("recompute", value(&o.recompute)->default_value("none")->value_name("none|blocks"),
     "blocks: run each block's forward again in backward instead of keeping its activations, "
     "as 'alloy train --recompute blocks' does")
    ("optimizer", value(&o.optimizer)->default_value("sgd")->value_name("sgd|adamw"),
     "sgd (momentum 0.9: one fp32 buffer per parameter) or adamw (two)")
    ("allow-tf32", value(&o.allow_tf32)->default_value(false, "false")
                       ->implicit_value(true, "true")->value_name("BOOL"),
     "let fp32 matrix products and convolutions on CUDA use TF32 tensor cores, as 'alloy "
     "train --allow-tf32' does; a no-op on the CPU")
    ("attention-kernel", value(&o.attention_kernel)->default_value("auto")
                             ->value_name("auto|alloy|cudnn"),
     "the kernel of causal attention on CUDA, as 'alloy train --attention-kernel' chooses it; "
     "a no-op on the CPU")
    ("threads", value(&o.threads)->value_name("N"),
     "CPU threads for the kernels (default: every core this process may use)")
    ("seed", value(&o.seed)->default_value(1)->value_name("N"), "model and batch seed")
    ("json", value(&o.json)->value_name("FILE|-"),
     "one JSON object per opt level (with -, the table goes to standard error)")
    ("plot", value(&o.plot)->value_name("FILE.svg"), "stacked bar chart of the categories")
    ("max-batch", po::bool_switch(&o.max_batch),
     "also search the largest batch each level fits in free device memory (CUDA only)")
    ("max-batch-limit", value(&o.max_batch_limit)->default_value(32768)->value_name("N"),
     "the largest batch --max-batch tries")
    ("world-size", value(&o.world_size)->default_value(1)->value_name("W"),
     "measure one rank of W data-parallel ranks (simulated in this process: its share of "
     "--batch-size, which is then the global batch, and DDP's gradient buckets)")
    ("zero", value(&o.zero)->default_value(0)->value_name("0|1"),
     "1: measure each level with ZeRO stage 1 (the fp32 masters and the optimizer's state "
     "sharded over the W ranks, as 'alloy train --zero 1') beside plain DDP")
    ("help,h", "print this help and exit");
  // clang-format on
  return group;
}

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / kMiB);
  return text;
}

std::string ratio_text(double value, double base) {
  if (!(base > 0)) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", value / base);
  return text;
}

const LevelReport* baseline_of(const std::vector<LevelReport>& reports) {
  for (const LevelReport& report : reports) {
    if (report.properties.level == amp::OptLevel::O0 && report.zero == 0) return &report;
  }
  return nullptr;
}

// What a report's ratios compare with: for ZeRO, plain DDP at the same level; else O0.
const LevelReport* base_of(const LevelReport& report, const std::vector<LevelReport>& reports) {
  if (report.zero == 0) return baseline_of(reports);
  for (const LevelReport& other : reports) {
    if (other.zero == 0 && other.properties.level == report.properties.level) return &other;
  }
  return nullptr;
}

std::string column_name(const LevelReport& report) {
  std::string name = amp::opt_level_name(report.properties.level);
  if (report.zero == 1) return name + " ZeRO-1";
  return report.world_size > 1 ? name + " DDP" : name;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round axis step of 1, 2 or 5 times a power of ten giving about `ticks` intervals.
double nice_step(double range, int ticks) {
  const double raw = range / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10.0 * power;
}

std::string number(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

const char* category_colour(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters:
      return "#4e79a7";
    case MemoryCategory::master_parameters:
      return "#a0cbe8";
    case MemoryCategory::gradients:
      return "#f28e2b";
    case MemoryCategory::optimizer_state:
      return "#ffbe7d";
    case MemoryCategory::activations:
      return "#59a14f";
    case MemoryCategory::workspace:
      return "#b6992d";
    case MemoryCategory::data:
      return "#bab0ac";
    case MemoryCategory::communication:
      return "#e15759";
  }
  return "#000000";
}

std::string max_batch_text(const MaxBatch& m) {
  if (m.reached_limit()) return ">= " + std::to_string(m.largest_fitting);
  return std::to_string(m.largest_fitting) + " (" + std::to_string(m.smallest_failing) + ")";
}

std::string header_line(const ReportHeader& h) {
  std::ostringstream out;
  out << "alloy mem: " << h.model << ", batch " << h.batch_size;
  if (h.accumulation_steps > 1) {
    out << " (" << h.accumulation_steps << " micro-batches of "
        << h.batch_size / h.accumulation_steps << ")";
  }
  if (h.clip_grad_norm > 0) out << ", clip_grad_norm " << h.clip_grad_norm;
  if (h.recompute != "none") out << ", recompute " << h.recompute;
  if (h.ema_decay > 0) out << ", ema_decay " << h.ema_decay;
  out << ", " << h.device << ", " << h.steps << (h.steps == 1 ? " step" : " steps")
      << " per level, " << h.optimizer;
  if (h.world_size > 1) {
    out << "; one rank of " << h.world_size << " (rank 0, simulated), batch "
        << h.batch_size / h.world_size << " each";
  }
  return out.str();
}

}  // namespace

MemOptions parse_mem_options(const std::vector<std::string>& args) {
  MemOptions o;
  po::options_description options;
  options.add(mem_options(o)).add(gpt_model_options(o.gpt_flags));
  po::variables_map values;
  parse_arguments(args, options, values);
  po::notify(values);

  const auto given = [&values](const std::string& flag) {
    return values.count(flag) != 0 && !values[flag].defaulted();
  };
  if (models::is_gpt_model(o.model)) {
    o.gpt = resolve_gpt_config(o.model, o.gpt_flags, given);
  } else {
    const std::vector<std::string> models = models::model_names();
    if (std::find(models.begin(), models.end(), o.model) == models.end()) {
      usage_fail("--model '", o.model, "' is not one of ", join(models), ", gpt, gpt2 or ",
                 "gpt-shakespeare");
    }
    for (const std::string& flag : gpt_model_flags()) {
      if (given(flag)) usage_fail("--", flag, " applies to sequence models (--model gpt)");
    }
  }
  if (o.batch_size < 1) usage_fail("--batch-size must be at least 1, got ", o.batch_size);
  if (o.image_size < 1) usage_fail("--image-size must be at least 1, got ", o.image_size);
  if (o.channels == 0) o.channels = data::default_synthetic_channels(o.image_size);
  if (o.channels != 1 && o.channels != 3) usage_fail("--channels must be 1 or 3, got ", o.channels);
  if (o.num_classes < 1) usage_fail("--num-classes must be at least 1, got ", o.num_classes);
  parse_normalization(o.normalize, o.channels);  // a UsageError naming --normalize
  models::check_model_input(o.model, {o.channels, o.image_size});
  if (o.steps < 1) usage_fail("--steps must be at least 1, got ", o.steps);
  if (o.world_size < 1) usage_fail("--world-size must be at least 1, got ", o.world_size);
  if (o.zero != 0 && o.zero != 1) {
    usage_fail("--zero must be 0 (plain data parallelism) or 1 (sharded optimizer state), got ",
               o.zero);
  }
  const bool data_parallel = o.world_size > 1 || o.zero == 1;
  if (data_parallel && models::is_gpt_model(o.model)) {
    usage_fail("--world-size and --zero measure the image models; --model ", o.model,
               " is measured as one process");
  }
  if (o.zero == 1 && o.ema_decay > 0) usage_fail("--zero 1 with --ema-decay is not supported yet");
  if (o.zero == 1 && o.clip_grad_norm > 0) {
    usage_fail("--zero 1 with --clip-grad-norm is not supported yet");
  }
  if (data_parallel && o.max_batch) {
    usage_fail("--max-batch measures a single process, not one rank of --world-size ",
               o.world_size);
  }
  // N >= 1 dividing each rank's share of B, or a UsageError.
  micro_batch_size(o.batch_size, o.world_size, o.accumulation_steps);
  if (!(o.clip_grad_norm >= 0 && std::isfinite(static_cast<float>(o.clip_grad_norm)))) {
    usage_fail("--clip-grad-norm must be a number >= 0 that fits a 32-bit float, got ",
               o.clip_grad_norm);
  }
  if (o.seed < 0) usage_fail("--seed must be at least 0, got ", o.seed);
  check_recompute_choice(o.recompute);
  check_fraction_flag("--ema-decay", o.ema_decay);
  // A model without blocks fails here, before any measurement (every GPT layer is a block).
  if (o.recompute != "none" && !models::is_gpt_model(o.model)) {
    Generator generator(0);
    apply_recompute(
        *models::make_model(o.model, generator, o.num_classes, {o.channels, o.image_size}), o.model,
        o.recompute);
  }
  if (!(o.device == "auto" || o.device == "cpu" || o.device == "cuda" ||
        o.device.rfind("cuda:", 0) == 0)) {
    usage_fail("--device '", o.device, "' is not one of auto, cpu, cuda or cuda:N");
  }
  o.levels = parse_levels(values["opt-levels"].as<std::string>());
  if (values.count("half-dtype")) {
    const std::string text = values["half-dtype"].as<std::string>();
    if (text == "fp16") {
      o.half_dtype = DType::f16;
    } else if (text == "bf16") {
      o.half_dtype = DType::bf16;
    } else {
      usage_fail("--half-dtype '", text, "' is not one of fp16 or bf16");
    }
  }
  if (o.optimizer != "sgd" && o.optimizer != "adamw") {
    usage_fail("--optimizer '", o.optimizer, "' is not one of sgd or adamw");
  }
  if (values.count("threads")) {
    if (o.threads < 1 || o.threads > kMaxThreads) {
      usage_fail("--threads must be between 1 and ", kMaxThreads, ", got ", o.threads);
    }
  } else {
    o.threads = available_cores();
  }
  if (o.max_batch && o.device == "cpu") {
    usage_fail(
        "--max-batch searches the free memory of a CUDA device; --device cpu has none "
        "(use --device cuda)");
  }
  if (o.max_batch_limit < 1) {
    usage_fail("--max-batch-limit must be at least 1, got ", o.max_batch_limit);
  }
  if (!o.max_batch && !values["max-batch-limit"].defaulted()) {
    usage_fail("--max-batch-limit needs --max-batch");
  }
  if (o.json == "" && values.count("json")) usage_fail("--json needs a file name or -");
  if (o.plot == "" && values.count("plot")) usage_fail("--plot needs a file name");
  return o;
}

void print_mem_help() {
  MemOptions o;
  po::options_description options;
  options.add(mem_options(o));
  print_help(
      "alloy mem --model M --batch-size B [options]",
      "Trains a few steps on synthetic batches at each opt level, one level after the other,\n"
      "and reports the allocator's peak bytes per memory category and in total, images/s\n"
      "(a GPT's: sequences/s and tokens/s),\n"
      "and each figure's ratio to O0. A category's figure is that category's own peak;\n"
      "peak_bytes is the peak of the sum, so it is at most the sum of the category peaks.\n"
      "--max-batch needs a CUDA device: with --device cpu it is a usage error (exit 2), and\n"
      "when --device auto finds no GPU it fails with exit 1. It doubles the batch from B while\n"
      "the steps fit in device memory, then bisects to within 1/32 of the largest that fits.",
      options);
}

std::vector<MemoryCategory> reported_categories(const std::vector<LevelReport>& reports) {
  std::vector<MemoryCategory> categories = {
      MemoryCategory::parameters,  MemoryCategory::master_parameters,
      MemoryCategory::gradients,   MemoryCategory::optimizer_state,
      MemoryCategory::activations, MemoryCategory::workspace};
  for (MemoryCategory extra : {MemoryCategory::data, MemoryCategory::communication}) {
    for (const LevelReport& report : reports) {
      if (report.bytes(extra) != 0) {
        categories.push_back(extra);
        break;
      }
    }
  }
  return categories;
}

std::string format_table(const ReportHeader& header, const std::vector<LevelReport>& reports) {
  const LevelReport* base = baseline_of(reports);
  const std::vector<MemoryCategory> categories = reported_categories(reports);
  // rows[r][0] is the label; then two cells per level (figure, ratio).
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {"peak bytes"};
  for (const LevelReport& report : reports) {
    head.push_back(column_name(report));
    const LevelReport* compared = base_of(report, reports);
    head.push_back(compared == nullptr                       ? ""
                   : compared->zero == 0 && report.zero == 1 ? "vs DDP"
                                                             : "vs O0");
  }
  rows.push_back(head);
  // smallest_base: below it O0's figure shows as zero, and a ratio to it would be a
  // meaningless 300000x (a few bytes of workspace at O0 against megabytes at O1).
  const auto add_row = [&](const std::string& label, auto figure_of, auto text_of,
                           double smallest_base = 0) {
    std::vector<std::string> row = {label};
    for (const LevelReport& report : reports) {
      const double value = figure_of(report);
      row.push_back(text_of(value));
      const LevelReport* compared = base_of(report, reports);
      const bool comparable = compared && figure_of(*compared) >= smallest_base;
      row.push_back(comparable ? ratio_text(value, figure_of(*compared)) : "");
    }
    rows.push_back(row);
  };
  const auto bytes_text = [](double v) { return mib(static_cast<std::int64_t>(v)); };
  constexpr double kShownAsZero = 0.005 * kMiB;  // "0.00 MiB"
  for (MemoryCategory c : categories) {
    add_row(
        memory_category_name(c),
        [c](const LevelReport& r) { return static_cast<double>(r.bytes(c)); }, bytes_text,
        kShownAsZero);
  }
  const std::size_t summary_rows_begin = rows.size();
  add_row(
      "sum of the above",
      [](const LevelReport& r) { return static_cast<double>(r.sum_of_category_peaks()); },
      bytes_text);
  add_row(
      "peak (total)", [](const LevelReport& r) { return static_cast<double>(r.peak_bytes); },
      bytes_text);
  // Three decimals below 1: a large model's sequences/s on the CPU would show as 0.0.
  const auto rate_text = [](double v) { return number(v, v >= 100 ? 0 : v >= 1 ? 1 : 3); };
  const double tokens_per_row = static_cast<double>(header.sequence_length);
  add_row(
      tokens_per_row > 0 ? "sequences/s" : "images/s",
      [](const LevelReport& r) { return r.images_per_second; }, rate_text);
  if (tokens_per_row > 0) {
    add_row(
        "tokens/s",
        [tokens_per_row](const LevelReport& r) { return r.images_per_second * tokens_per_row; },
        rate_text);
  }
  const std::size_t device_rows_begin = rows.size();
  if (!reports.empty() && reports.front().device_view) {
    add_row(
        "reserved by the cache",
        [](const LevelReport& r) { return static_cast<double>(r.device_view->reserved_bytes); },
        bytes_text);
    add_row(
        "device used (driver)",
        [](const LevelReport& r) { return static_cast<double>(r.device_view->driver_used_bytes); },
        bytes_text);
  }
  if (!reports.empty() && reports.front().max_batch) {
    std::vector<std::string> row = {"max batch"};
    for (const LevelReport& report : reports) {
      row.push_back(max_batch_text(*report.max_batch));
      row.push_back(base ? ratio_text(static_cast<double>(report.max_batch->largest_fitting),
                                      static_cast<double>(base->max_batch->largest_fitting))
                         : "");
    }
    rows.push_back(row);
  }

  std::vector<std::size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream out;
  out << header_line(header) << '\n';
  for (const LevelReport& report : reports) {
    out << "  " << amp::describe(report.properties) << '\n';
  }
  out << '\n';
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    std::string line = row[0] + std::string(widths[0] - row[0].size(), ' ');
    for (std::size_t i = 1; i < row.size(); ++i) {
      if (widths[i] == 0) continue;
      line += (i % 2 == 1 ? "   " : "  ") + std::string(widths[i] - row[i].size(), ' ') + row[i];
    }
    out << line << '\n';
    // Rules under the heading, above the totals and above the device's own figures.
    const std::size_t next = r + 1;
    if (r == 0 || next == summary_rows_begin || (next == device_rows_begin && next < rows.size())) {
      std::size_t total = widths[0];
      for (std::size_t i = 1; i < widths.size(); ++i) {
        if (widths[i] != 0) total += widths[i] + (i % 2 == 1 ? 3 : 2);
      }
      out << std::string(total, '-') << '\n';
    }
  }
  out << "\nEach category's figure is its own peak during the steps; peak (total) is the peak of\n"
         "the sum of all categories, which is at most the sum of the category peaks. Counted by\n"
         "the allocator (core/memory.h) after setup; "
      << (header.sequence_length > 0 ? "sequences/s and tokens/s\nover" : "images/s over")
      << " the steps after the first.\n";
  if (!reports.empty() && reports.front().device_view) {
    out << "Reserved by the cache: the blocks the level held from the driver (its peak: the\n"
           "cache gives blocks back only when an allocation fails). Device used: the driver's\n"
           "view after the steps, with the CUDA context, the libraries and other processes,\n"
           "of the device's "
        << mib(reports.front().device_view->driver_total_bytes) << ".\n";
  }
  if (!reports.empty() && reports.front().max_batch) {
    const MaxBatch& m = *reports.front().max_batch;
    out << "Max batch: the largest batch whose training step fits in the device's memory, found\n"
           "within "
        << number(100.0 * kMaxBatchTolerance, 1)
        << "% (the smallest failing batch in brackets); \">=\" means every batch up to the\n"
        << "search's limit of " << m.limit << " fitted (--max-batch-limit).\n";
  }
  for (const LevelReport& report : reports) {
    if (report.leaked_bytes != 0) {
      out << "warning: " << amp::opt_level_name(report.properties.level) << " left "
          << report.leaked_bytes << " bytes allocated after it was torn down\n";
    }
  }
  return out.str();
}

std::vector<JsonObject> json_objects(const ReportHeader& header,
                                     const std::vector<LevelReport>& reports) {
  const LevelReport* base = baseline_of(reports);
  std::vector<JsonObject> lines;
  for (const LevelReport& r : reports) {
    JsonObject object;
    object.add("opt_level", amp::opt_level_name(r.properties.level));
    if (r.world_size > 1 || r.zero != 0) {
      object.add("world_size", static_cast<std::int64_t>(r.world_size))
          .add("zero", static_cast<std::int64_t>(r.zero));
    }
    const auto category_key = [](MemoryCategory c) {
      return std::string(memory_category_name(c)) + "_bytes";
    };
    const MemoryCategory all[] = {MemoryCategory::parameters,  MemoryCategory::master_parameters,
                                  MemoryCategory::gradients,   MemoryCategory::optimizer_state,
                                  MemoryCategory::activations, MemoryCategory::workspace,
                                  MemoryCategory::data,        MemoryCategory::communication};
    for (std::size_t i = 0; i < 6; ++i)
      object.add(category_key(all[i]), r.bytes(all[i]));
    object.add("peak_bytes", r.peak_bytes);
    object.add("images_per_second", r.images_per_second);
    if (header.sequence_length > 0) {
      object.add("sequences_per_second", r.images_per_second);
      object.add("tokens_per_second",
                 r.images_per_second * static_cast<double>(header.sequence_length));
    }
    object.add("data_bytes", r.bytes(MemoryCategory::data));
    object.add("communication_bytes", r.bytes(MemoryCategory::communication));
    object.add("sum_of_category_peaks_bytes", r.sum_of_category_peaks());
    object.add("model", header.model);
    object.add("batch_size", header.batch_size);
    object.add("accumulation_steps", header.accumulation_steps);
    object.add("micro_batch_size", header.batch_size / header.accumulation_steps);
    if (header.clip_grad_norm > 0) object.add("clip_grad_norm", header.clip_grad_norm);
    object.add("recompute", header.recompute);
    if (header.ema_decay > 0) object.add("ema_decay", header.ema_decay);
    object.add("device", header.device);
    object.add("half_dtype", dtype_name(r.properties.half_dtype));
    object.add("model_dtype", dtype_name(r.properties.model_dtype));
    object.add("optimizer", header.optimizer);
    object.add("steps", r.steps);
    object.add("parameter_count", r.parameter_count);
    if (r.device_view) {
      object.add("device_reserved_bytes", r.device_view->reserved_bytes);
      object.add("driver_used_bytes", r.device_view->driver_used_bytes);
      object.add("driver_total_bytes", r.device_view->driver_total_bytes);
    }
    if (r.max_batch) {
      object.add("max_batch", r.max_batch->largest_fitting);
      object.add("max_batch_failing", r.max_batch->smallest_failing);
      object.add("max_batch_limit", r.max_batch->limit);
      object.add("max_batch_reached_limit", r.max_batch->reached_limit());
      object.add("max_batch_probes", r.max_batch->probes);
    }
    if (base) {
      const auto ratio = [](double v, double b) { return b > 0 ? v / b : 0.0; };
      for (MemoryCategory c : all) {
        if (base->bytes(c) > 0) {
          object.add(category_key(c) + "_vs_o0",
                     ratio(static_cast<double>(r.bytes(c)), static_cast<double>(base->bytes(c))));
        }
      }
      object.add("peak_bytes_vs_o0",
                 ratio(static_cast<double>(r.peak_bytes), static_cast<double>(base->peak_bytes)));
      object.add("images_per_second_vs_o0", ratio(r.images_per_second, base->images_per_second));
    }
    lines.push_back(object);
  }
  return lines;
}

std::string render_svg(const ReportHeader& header, const std::vector<LevelReport>& reports) {
  const std::vector<MemoryCategory> categories = reported_categories(reports);
  const double left = 80, top = 50, plot_h = 320, bar_w = 70, gap = 50, legend_w = 230;
  const double plot_w = gap + static_cast<double>(reports.size()) * (bar_w + gap);
  const double width = left + plot_w + legend_w, height = top + plot_h + 70;
  double highest = 1.0 / kMiB;
  for (const LevelReport& r : reports) {
    highest = std::max(highest, static_cast<double>(r.sum_of_category_peaks()) / kMiB);
  }
  const double step = nice_step(highest, 5);
  const double axis_max = std::ceil(highest / step) * step;
  const int decimals = step >= 1 ? 0 : step >= 0.1 ? 1 : step >= 0.01 ? 2 : 3;
  const auto y_of = [&](double mib_value) { return top + plot_h - mib_value / axis_max * plot_h; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
      << xml_escape(header_line(header)) << "</text>\n"
      << "<text x=\"" << left
      << "\" y=\"40\" font-size=\"11\" fill=\"#555\">each category at "
         "its own peak; the black mark is the level's peak_bytes (peak of the sum)</text>\n";
  for (double tick = 0; tick <= axis_max + step / 2; tick += step) {
    const double y = y_of(tick);
    svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y << "\" y2=\""
        << y << "\" stroke=\"#ddd\"/>\n"
        << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << number(tick, decimals) << "</text>\n";
  }
  svg << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\""
      << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << top + plot_h
      << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<text transform=\"translate(20," << top + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">MiB</text>\n";
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const LevelReport& r = reports[i];
    const double x = left + gap + static_cast<double>(i) * (bar_w + gap);
    double stacked = 0;
    for (MemoryCategory c : categories) {
      const double value = static_cast<double>(r.bytes(c)) / kMiB;
      if (value <= 0) continue;
      const double y1 = y_of(stacked + value), y0 = y_of(stacked);
      svg << "<rect x=\"" << x << "\" y=\"" << y1 << "\" width=\"" << bar_w << "\" height=\""
          << y0 - y1 << "\" fill=\"" << category_colour(c) << "\"><title>"
          << memory_category_name(c) << ": " << mib(r.bytes(c)) << "</title></rect>\n";
      stacked += value;
    }
    const double peak_y = y_of(static_cast<double>(r.peak_bytes) / kMiB);
    svg << "<line x1=\"" << x - 6 << "\" x2=\"" << x + bar_w + 6 << "\" y1=\"" << peak_y
        << "\" y2=\"" << peak_y
        << "\" stroke=\"black\" stroke-width=\"2\"><title>peak_bytes: " << mib(r.peak_bytes)
        << "</title></line>\n"
        << "<text x=\"" << x + bar_w / 2 << "\" y=\"" << y_of(stacked) - 6
        << "\" text-anchor=\"middle\" font-size=\"11\">" << mib(r.peak_bytes) << "</text>\n"
        << "<text x=\"" << x + bar_w / 2 << "\" y=\"" << top + plot_h + 18
        << "\" text-anchor=\"middle\" font-weight=\"bold\">"
        << amp::opt_level_name(r.properties.level) << "</text>\n"
        << "<text x=\"" << x + bar_w / 2 << "\" y=\"" << top + plot_h + 34
        << "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">"
        << dtype_name(r.properties.model_dtype) << " model</text>\n";
  }
  const double legend_x = left + plot_w + 30;
  for (std::size_t i = 0; i < categories.size(); ++i) {
    const double y = top + 10 + static_cast<double>(categories.size() - 1 - i) * 22;
    svg << "<rect x=\"" << legend_x << "\" y=\"" << y << "\" width=\"14\" height=\"14\" fill=\""
        << category_colour(categories[i]) << "\"/>\n"
        << "<text x=\"" << legend_x + 20 << "\" y=\"" << y + 11 << "\">"
        << memory_category_name(categories[i]) << "</text>\n";
  }
  const double mark_y = top + 10 + static_cast<double>(categories.size()) * 22 + 7;
  svg << "<line x1=\"" << legend_x - 2 << "\" x2=\"" << legend_x + 16 << "\" y1=\"" << mark_y
      << "\" y2=\"" << mark_y << "\" stroke=\"black\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << legend_x + 20 << "\" y=\"" << mark_y + 4 << "\">peak_bytes</text>\n"
      << "</svg>\n";
  return svg.str();
}

void check_writable(const char* flag, const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::access(folder.c_str(), W_OK) != 0) {
    fail(flag, " ", path, ": cannot write there: folder ", folder,
         ::access(folder.c_str(), F_OK) != 0 ? " does not exist" : " is not writable");
  }
}

void write_text_atomically(const char* flag, const std::string& path, const std::string& text) {
  try {
    checkpoint::write_file_atomically(path, {std::string_view(text)});
  } catch (const std::exception& e) {
    fail(flag, " ", path, ": ", e.what());
  }
}

}  // namespace alloy::app
