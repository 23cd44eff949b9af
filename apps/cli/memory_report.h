// `alloy mem`: measures one model at each opt level in turn, in one process
// (apps/train/memory_report.h), and reports each figure with its ratio to O0 as an aligned
// table, JSON lines and an SVG chart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amp/opt_level.h"
#include "apps/cli/json_log.h"
#include "apps/train/memory_report.h"
#include "apps/train/sequence_options.h"

namespace alloy::app {

struct MemOptions {
  std::string model;
  // A sequence model's shape (--model gpt...: its preset and the --n-layer ... flags); batches
  // are --batch-size windows of block_size tokens.
  SequenceOptions::Flags gpt_flags;
  models::GptConfig gpt;
  std::int64_t batch_size = 0;
  int image_size = 28;  // the synthetic batch's images: channels x image_size x image_size
  int channels = 0;     // 0: as alloy train's synthetic data (data::default_synthetic_channels)
  int num_classes = 10;
  std::string normalize = "auto";  // as alloy train --normalize (apps/train/normalization.h)
  std::string device = "auto";     // auto | cpu | cuda | cuda:N
  std::vector<amp::OptLevel> levels = {amp::OptLevel::O0, amp::OptLevel::O1, amp::OptLevel::O2,
                                       amp::OptLevel::O3};
  std::optional<DType> half_dtype;  // --half-dtype; the levels' default (fp16) when unset
  std::int64_t steps = 3;
  std::int64_t accumulation_steps = 1;  // micro-batches per step (apps/train/train_step.h)
  double clip_grad_norm = 0;            // 0: no clipping (amp/mixed_precision.h)
  std::string recompute = "none";       // none | blocks (apps/train/recompute.h)
  double ema_decay = 0;                 // 0: no weight averages (amp/mixed_precision.h)
  int threads = 0;                      // 0: every core this process may use
  std::int64_t seed = 1;
  std::string optimizer = "sgd";  // sgd (momentum 0.9) | adamw
  std::string json;               // empty: none; "-": standard output
  std::string plot;               // empty: none
  bool max_batch = false;         // needs a CUDA device
  bool allow_tf32 = false;        // fp32 GEMMs and convolutions on TF32 tensor cores (CUDA)
  // auto | alloy | cudnn: the kernel of causal attention on CUDA (core/ops/attention_kernel.h)
  std::string attention_kernel = "auto";
  std::int64_t max_batch_limit = 32768;
  // One rank of a data-parallel job, simulated (MeasureConfig::world_size); --batch-size is then
  // the global batch. zero 1 measures each level twice, plain DDP and ZeRO stage 1.
  int world_size = 1;
  int zero = 0;
};

// Parses the words after `alloy mem`. Bad flags and values are UsageErrors naming the flag:
// unknown model, --batch-size or --steps below 1, an unknown or repeated opt level, ...
MemOptions parse_mem_options(const std::vector<std::string>& args);
void print_mem_help();

// The categories the report shows: the six of the contract, then data and communication
// where some level used them.
std::vector<MemoryCategory> reported_categories(const std::vector<LevelReport>& reports);

struct ReportHeader {
  std::string model;
  std::int64_t batch_size = 0;
  std::string device;
  std::string optimizer;
  std::int64_t steps = 0;
  std::int64_t accumulation_steps = 1;  // batch_size / accumulation_steps rows per micro-batch
  double clip_grad_norm = 0;
  std::string recompute = "none";
  double ema_decay = 0;
  // A sequence model's tokens per batch row (its block size); 0 for an image model. The rows
  // are then sequences: the table says sequences/s and tokens/s instead of images/s.
  std::int64_t sequence_length = 0;
  int world_size = 1;  // > 1: the figures are one rank's
};

// The terminal table: one column per level, rows per category, the total peak and images/s,
// each with its ratio to O0 when O0 was measured, and a note on what the figures mean.
std::string format_table(const ReportHeader& header, const std::vector<LevelReport>& reports);

// One JSON object (one line, no newline) per level: the contract's keys (opt_level,
// parameters_bytes, master_parameters_bytes, gradients_bytes, optimizer_state_bytes,
// activations_bytes, workspace_bytes, peak_bytes, images_per_second), then data_bytes,
// communication_bytes, the run's settings (accumulation_steps and micro_batch_size among them),
// and "<key>_vs_o0" ratios when O0 was measured. A sequence model's lines also have
// sequences_per_second (the rows that images_per_second counts) and tokens_per_second.
std::vector<JsonObject> json_objects(const ReportHeader& header,
                                     const std::vector<LevelReport>& reports);

// A stacked bar per level, one colour per category (each category's own peak), a marker at
// the level's peak_bytes, a legend and a y axis in MiB.
std::string render_svg(const ReportHeader& header, const std::vector<LevelReport>& reports);

// Fails (alloy::Error naming the flag and the path) unless `path` can be created: its folder
// exists and is writable. Run before measuring, so a bad path fails in a second.
void check_writable(const char* flag, const std::string& path);
// Writes `text` to `path` atomically (temporary file, fsync, rename).
void write_text_atomically(const char* flag, const std::string& path, const std::string& text);

}  // namespace alloy::app
