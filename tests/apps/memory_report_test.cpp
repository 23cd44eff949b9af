// alloy mem's accounting (apps/train/memory_report.h) against sizes computed by hand from the layer
// shapes: parameters, master weights, gradients, optimizer state and activations of LeNet and
// the MLP at each opt level, resnet18's batch-norm exception and O1 activations, and the flags'
// usage errors.
#include "apps/cli/memory_report.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/error.h"
#include "core/models/models.h"
#include "core/random.h"

using namespace alloy;
using namespace alloy::app;

namespace {

// The loss scaler's state (one buffer of eight 4-byte words: scale, clean_steps, skipped_steps,
// at_min_streak, overflow_streak, first_overflow, unreported_overflow, found_inf) and the
// optimizer's (lr, and the step count with its block tickets): eleven 4-byte scalars in
// optimizer_state at every level.
constexpr std::int64_t kScalerBytes = 8 * 4 + 3 * 4;

LevelReport measure(const std::string& model, amp::OptLevel level, std::int64_t batch,
                    std::int64_t steps = 2) {
  MeasureConfig config;
  config.model = model;
  config.batch_size = batch;
  config.steps = steps;
  return measure_level(config, level_properties(level, std::nullopt));
}

std::int64_t mem(const LevelReport& r, MemoryCategory c) {
  return r.bytes(c);
}

// LeNet: conv 1->20 3x3 (180 + 20), conv 20->50 5x5 (25000 + 50), linear 800->128
// (102400 + 128), linear 128->10 (1280 + 10).
constexpr std::int64_t kLenetParams = 200 + 25050 + 102528 + 1290;
// MLP: linear 784->256 (200704 + 256), linear 256->10 (2560 + 10).
constexpr std::int64_t kMlpParams = 200960 + 2570;

// LeNet's activation peak in elements per image, with `half` the bytes of the compute dtype.
// The peak is in the backward of ReLU 1 and pool 1, which a Sequential runs fused (one pass
// each way, core/nn/sequential.h): alive then are conv 1's saved input (the normalized image,
// 1x28x28 = 784), ReLU 1's saved input (conv 1's output, 20x26x26 = 13520), the incoming
// gradient (pool 1's output's, 20x13x13 = 3380) and the dx it allocates (13520); everything of
// the later layers is released by their backwards already. The loss's tensors live through the
// whole backward: the logits (10, compute dtype), the logits' gradient (10, compute dtype) and
// the f32 loss (4 bytes per batch); the training step's fused loss (softmax_cross_entropy_step)
// keeps no probabilities. Every other moment holds less: the fused forward holds 784 + 13520 +
// 3380, conv 1's backward 784 + 13520. (Unfused, ReLU 1's output and pool 1's dx made it
// 784 + 3 * 13520.)
std::int64_t lenet_activation_bytes(std::int64_t batch, std::int64_t half) {
  const std::int64_t image = 784, relu1 = 20 * 26 * 26, pool1 = 20 * 13 * 13;
  return batch * ((image + 2 * relu1 + pool1) * half + 10 * half + 10 * half) + 4;
}

// The MLP's activation peak is in the first linear layer's backward. Flatten, not the linear
// layer, is the network's first module, so that layer still computes the images' gradient:
// alive are its saved input (784, a view of the normalized image), the incoming gradient from
// the ReLU (256) and the dx it allocates (784), plus the loss's tensors as for LeNet. (The ReLU
// backward before it holds 784 + 3 * 256, less.)
std::int64_t mlp_activation_bytes(std::int64_t batch, std::int64_t half) {
  return batch * ((784 + 256 + 784) * half + 10 * half + 10 * half) + 4;
}

std::int64_t model_param_count(const std::string& name) {
  Generator generator(1);
  auto model = models::make_model(name, generator, 10);
  std::int64_t count = 0;
  for (const nn::Parameter* p : model->parameters())
    count += p->value.numel();
  return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_report)

BOOST_AUTO_TEST_CASE(hand_counted_parameters_match_the_models) {
  BOOST_TEST(model_param_count("lenet") == kLenetParams);
  BOOST_TEST(model_param_count("mlp") == kMlpParams);
}

BOOST_AUTO_TEST_CASE(lenet_o0_is_fp32_throughout) {
  const std::int64_t batch = 8;
  const LevelReport r = measure("lenet", amp::OptLevel::O0, batch);
  BOOST_TEST(r.parameter_count == kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::parameters) == 4 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::master_parameters) == 0);
  BOOST_TEST(mem(r, MemoryCategory::gradients) == 4 * kLenetParams);
  // SGD momentum: one f32 buffer per parameter.
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) == 4 * kLenetParams + kScalerBytes);
  BOOST_TEST(mem(r, MemoryCategory::activations) == lenet_activation_bytes(batch, 4));
  // The synthetic batch: u8 images and i32 labels.
  BOOST_TEST(mem(r, MemoryCategory::data) == batch * 784 + batch * 4);
  BOOST_TEST(mem(r, MemoryCategory::communication) == 0);
  BOOST_TEST(r.leaked_bytes == 0);
}

BOOST_AUTO_TEST_CASE(lenet_o1_keeps_fp32_weights_and_halves_activations) {
  const std::int64_t batch = 8;
  const LevelReport r = measure("lenet", amp::OptLevel::O1, batch);
  BOOST_TEST(mem(r, MemoryCategory::parameters) == 4 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::master_parameters) == 0);
  BOOST_TEST(mem(r, MemoryCategory::gradients) == 4 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) == 4 * kLenetParams + kScalerBytes);
  // The convolutions and linear layers save their half-cast inputs; the fp32 image is gone
  // by the backward, so the peak is O2's.
  BOOST_TEST(mem(r, MemoryCategory::activations) == lenet_activation_bytes(batch, 2));
  // The per-step half copies of the weights are workspace.
  BOOST_TEST(mem(r, MemoryCategory::workspace) >= 2 * kLenetParams);
}

BOOST_AUTO_TEST_CASE(lenet_o2_has_half_weights_and_fp32_masters) {
  const std::int64_t batch = 8;
  const LevelReport r = measure("lenet", amp::OptLevel::O2, batch);
  BOOST_TEST(mem(r, MemoryCategory::parameters) == 2 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::master_parameters) == 4 * kLenetParams);
  // The model's half gradients only: a master's gradient is its model weight's, and no fp32
  // copy of the gradients is made (6 bytes a parameter when there was one).
  BOOST_TEST(mem(r, MemoryCategory::gradients) == 2 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) == 4 * kLenetParams + kScalerBytes);
  BOOST_TEST(mem(r, MemoryCategory::activations) == lenet_activation_bytes(batch, 2));
  BOOST_TEST(r.leaked_bytes == 0);
}

BOOST_AUTO_TEST_CASE(lenet_o3_is_half_without_masters) {
  const std::int64_t batch = 8;
  const LevelReport r = measure("lenet", amp::OptLevel::O3, batch);
  BOOST_TEST(mem(r, MemoryCategory::parameters) == 2 * kLenetParams);
  BOOST_TEST(mem(r, MemoryCategory::master_parameters) == 0);
  BOOST_TEST(mem(r, MemoryCategory::gradients) == 2 * kLenetParams);
  // The momentum buffers stay f32 over the half weights.
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) == 4 * kLenetParams + kScalerBytes);
  BOOST_TEST(mem(r, MemoryCategory::activations) == lenet_activation_bytes(batch, 2));
}

BOOST_AUTO_TEST_CASE(activations_grow_linearly_with_the_batch) {
  const LevelReport small = measure("lenet", amp::OptLevel::O0, 4, 1);
  const LevelReport large = measure("lenet", amp::OptLevel::O0, 12, 1);
  BOOST_TEST(mem(large, MemoryCategory::activations) - mem(small, MemoryCategory::activations) ==
             lenet_activation_bytes(12, 4) - lenet_activation_bytes(4, 4));
}

BOOST_AUTO_TEST_CASE(mlp_at_every_level) {
  const std::int64_t batch = 16, n = kMlpParams;
  const LevelReport o0 = measure("mlp", amp::OptLevel::O0, batch);
  BOOST_TEST(mem(o0, MemoryCategory::parameters) == 4 * n);
  BOOST_TEST(mem(o0, MemoryCategory::gradients) == 4 * n);
  BOOST_TEST(mem(o0, MemoryCategory::optimizer_state) == 4 * n + kScalerBytes);
  BOOST_TEST(mem(o0, MemoryCategory::activations) == mlp_activation_bytes(batch, 4));

  const LevelReport o2 = measure("mlp", amp::OptLevel::O2, batch);
  BOOST_TEST(mem(o2, MemoryCategory::parameters) == 2 * n);
  BOOST_TEST(mem(o2, MemoryCategory::master_parameters) == 4 * n);
  BOOST_TEST(mem(o2, MemoryCategory::gradients) == 2 * n);  // no fp32 master gradients
  BOOST_TEST(mem(o2, MemoryCategory::optimizer_state) == 4 * n + kScalerBytes);
  BOOST_TEST(mem(o2, MemoryCategory::activations) == mlp_activation_bytes(batch, 2));

  const LevelReport o3 = measure("mlp", amp::OptLevel::O3, batch);
  BOOST_TEST(mem(o3, MemoryCategory::parameters) == 2 * n);
  BOOST_TEST(mem(o3, MemoryCategory::master_parameters) == 0);
  BOOST_TEST(mem(o3, MemoryCategory::gradients) == 2 * n);
  BOOST_TEST(mem(o3, MemoryCategory::activations) == mlp_activation_bytes(batch, 2));
}

BOOST_AUTO_TEST_CASE(adamw_keeps_two_fp32_buffers_per_parameter) {
  MeasureConfig config;
  config.model = "mlp";
  config.batch_size = 4;
  config.steps = 1;
  config.optimizer = mem_optimizer_config("adamw");
  const LevelReport r = measure_level(config, level_properties(amp::OptLevel::O2, std::nullopt));
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) >= 8 * kMlpParams + kScalerBytes);
  BOOST_TEST(mem(r, MemoryCategory::optimizer_state) <= 8 * kMlpParams + kScalerBytes + 64);
}

// Batch-norm parameters stay fp32 under O2 (keep_batchnorm_fp32) and have no masters; O3
// rounds them (and the running statistics, which are parameter memory too) to half. The counts
// come from resnet18's own parameter and buffer lists.
BOOST_AUTO_TEST_CASE(resnet18_batch_norm_exception) {
  Generator generator(1);
  auto model = models::make_model("resnet18", generator, 10);
  std::int64_t norm = 0, other = 0, stat_elements = 0, other_buffer_bytes = 0;
  for (const nn::Parameter* p : model->parameters())
    (p->is_norm ? norm : other) += p->value.numel();
  for (const nn::Buffer* b : model->buffers()) {
    if (is_floating(b->value.dtype())) {
      stat_elements += b->value.numel();
    } else {
      other_buffer_bytes += static_cast<std::int64_t>(b->value.nbytes());
    }
  }
  BOOST_TEST(norm > 0);
  BOOST_TEST(stat_elements > 0);

  const LevelReport o2 = measure("resnet18", amp::OptLevel::O2, 2, 1);
  BOOST_TEST(mem(o2, MemoryCategory::parameters) ==
             2 * other + 4 * norm + 4 * stat_elements + other_buffer_bytes);
  BOOST_TEST(mem(o2, MemoryCategory::master_parameters) == 4 * other);
  // The model's gradients, in its dtypes: nothing for the masters.
  BOOST_TEST(mem(o2, MemoryCategory::gradients) == 2 * other + 4 * norm);
  BOOST_TEST(mem(o2, MemoryCategory::optimizer_state) == 4 * (norm + other) + kScalerBytes);

  const LevelReport o3 = measure("resnet18", amp::OptLevel::O3, 2, 1);
  BOOST_TEST(mem(o3, MemoryCategory::parameters) ==
             2 * (norm + other) + 2 * stat_elements + other_buffer_bytes);
  BOOST_TEST(mem(o3, MemoryCategory::master_parameters) == 0);
  BOOST_TEST(mem(o3, MemoryCategory::gradients) == 2 * (norm + other));
}

// Under O1 batch norm takes the half convolution outputs as they are (fp32 statistics, half
// output), so resnet18 keeps no fp32 copy of them: its activations are O2's half tensors, plus
// at most the fp32 normalized images that O1 (an fp32 model) is fed and O2 is not.
BOOST_AUTO_TEST_CASE(resnet18_o1_keeps_no_fp32_copy_of_the_convolution_outputs) {
  const std::int64_t batch = 4;
  const LevelReport o0 = measure("resnet18", amp::OptLevel::O0, batch, 1);
  const LevelReport o1 = measure("resnet18", amp::OptLevel::O1, batch, 1);
  const LevelReport o2 = measure("resnet18", amp::OptLevel::O2, batch, 1);
  const std::int64_t activations = mem(o1, MemoryCategory::activations);
  BOOST_TEST(activations >= mem(o2, MemoryCategory::activations));
  BOOST_TEST(activations <= mem(o2, MemoryCategory::activations) + batch * 784 * 4);
  BOOST_TEST(activations <= 0.6 * static_cast<double>(mem(o0, MemoryCategory::activations)));
}

BOOST_AUTO_TEST_CASE(peaks_add_up_and_levels_do_not_leak_into_each_other) {
  const LevelReport first = measure("lenet", amp::OptLevel::O0, 4, 1);
  const LevelReport between = measure("lenet", amp::OptLevel::O2, 32, 1);
  const LevelReport again = measure("lenet", amp::OptLevel::O0, 4, 1);
  for (const LevelReport* r : {&first, &between, &again}) {
    BOOST_TEST(r->leaked_bytes == 0);
    BOOST_TEST(r->peak_bytes <= r->sum_of_category_peaks());
    for (std::int64_t bytes : r->peak)
      BOOST_TEST(r->peak_bytes >= bytes);
    // The activations alone never reach the total, which also holds the weights.
    BOOST_TEST(r->peak_bytes > r->bytes(MemoryCategory::activations));
  }
  // The larger O2 run measured in between does not show in the second O0.
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c)
    BOOST_TEST(first.peak[c] == again.peak[c]);
  BOOST_TEST(first.peak_bytes == again.peak_bytes);
  BOOST_TEST(first.images_per_second > 0);
}

// A category O0 barely uses (its figure shows as 0.00 MiB) gets no ratio: dividing by a few bytes
// would print a meaningless 300000x.
BOOST_AUTO_TEST_CASE(a_category_o0_shows_as_zero_gets_no_ratio) {
  std::vector<LevelReport> reports = {measure("lenet", amp::OptLevel::O0, 4, 1),
                                      measure("lenet", amp::OptLevel::O1, 4, 1)};
  reports[0].peak[static_cast<std::size_t>(MemoryCategory::workspace)] = 16;
  reports[1].peak[static_cast<std::size_t>(MemoryCategory::workspace)] = 5 * 1024 * 1024;
  ReportHeader header{"lenet", 4, "cpu", "sgd momentum 0.9", 1, 1};
  const std::string table = format_table(header, reports);
  std::string workspace_row;
  for (std::size_t at = 0, end; at < table.size(); at = end + 1) {
    end = std::min(table.find('\n', at), table.size());
    if (table.compare(at, 9, "workspace") == 0) workspace_row = table.substr(at, end - at);
  }
  BOOST_TEST_REQUIRE(!workspace_row.empty(), table);
  BOOST_TEST(workspace_row.find("5.00 MiB") != std::string::npos, workspace_row);
  BOOST_TEST(workspace_row.find('x') == std::string::npos, workspace_row);
  // A category with a real O0 figure keeps its ratio.
  BOOST_TEST(table.find("1.00x") != std::string::npos, table);
}

// A sequence model's rows are sequences of sequence_length tokens: no images/s.
BOOST_AUTO_TEST_CASE(a_sequence_model_reports_sequences_and_tokens_per_second) {
  std::vector<LevelReport> reports = {measure("lenet", amp::OptLevel::O0, 4, 1)};
  reports[0].images_per_second = 12.5;
  ReportHeader header{"gpt", 4, "cpu", "adamw", 1, 1};
  header.sequence_length = 64;
  const std::string table = format_table(header, reports);
  BOOST_TEST(table.find("images/s") == std::string::npos, table);
  BOOST_TEST(table.find("sequences/s") != std::string::npos, table);
  BOOST_TEST(table.find("tokens/s") != std::string::npos, table);
  BOOST_TEST(table.find(" 800 ") != std::string::npos, table);  // 12.5 x 64 tokens/s
  const std::string json = json_objects(header, reports)[0].str();
  BOOST_TEST(json.find("\"sequences_per_second\":12.5") != std::string::npos, json);
  BOOST_TEST(json.find("\"tokens_per_second\":800") != std::string::npos, json);
  // Under one sequence a second still shows a figure.
  reports[0].images_per_second = 0.007;
  header.sequence_length = 4096;
  BOOST_TEST(format_table(header, reports).find("0.007") != std::string::npos);
  // An image model's lines have neither.
  header.sequence_length = 0;
  BOOST_TEST(json_objects(header, reports)[0].str().find("tokens_per_second") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(table_json_and_chart_carry_every_level) {
  std::vector<LevelReport> reports = {measure("lenet", amp::OptLevel::O0, 4, 1),
                                      measure("lenet", amp::OptLevel::O2, 4, 1)};
  ReportHeader header{"lenet", 4, "cpu", "sgd momentum 0.9", 1, 1};
  const std::string table = format_table(header, reports);
  for (const char* word : {"O0", "O2", "parameters", "master_parameters", "gradients",
                           "optimizer_state", "activations", "workspace", "data", "peak (total)",
                           "images/s", "0.50x", "own peak", "peak of"}) {
    BOOST_TEST(table.find(word) != std::string::npos, "table lacks " << word << ":\n" << table);
  }
  const auto objects = json_objects(header, reports);
  BOOST_TEST_REQUIRE(objects.size() == 2u);
  for (const char* key :
       {"\"opt_level\":\"O2\"",
        "\"parameters_bytes\":", "\"master_parameters_bytes\":", "\"gradients_bytes\":",
        "\"optimizer_state_bytes\":", "\"activations_bytes\":", "\"workspace_bytes\":",
        "\"peak_bytes\":", "\"images_per_second\":", "\"peak_bytes_vs_o0\":"}) {
    BOOST_TEST(objects[1].str().find(key) != std::string::npos, key << " in " << objects[1].str());
  }
  BOOST_TEST(objects[1].str().find("\"parameters_bytes\":" + std::to_string(2 * kLenetParams)) !=
             std::string::npos);
  BOOST_TEST(objects[1].str().find("\"parameters_bytes_vs_o0\":0.5,") != std::string::npos);

  const std::string svg = render_svg(header, reports);
  BOOST_TEST(svg.rfind("<svg", 0) == 0);
  BOOST_TEST(svg.find("</svg>") != std::string::npos);
  BOOST_TEST(svg.find(">MiB<") != std::string::npos);
  // One bar segment per nonzero category and level, each named in its tooltip, and a legend.
  std::size_t segments = 0;
  for (std::size_t at = svg.find("<title>"); at != std::string::npos;
       at = svg.find("<title>", at + 1)) {
    ++segments;
  }
  std::size_t expected = 0;
  for (const LevelReport& r : reports) {
    for (std::int64_t bytes : r.peak)
      expected += bytes > 0 ? 1 : 0;
    ++expected;  // the peak_bytes mark
  }
  BOOST_TEST(segments == expected);
  BOOST_TEST(svg.find(">master_parameters</text>") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(no_ratios_without_o0) {
  std::vector<LevelReport> reports = {measure("mlp", amp::OptLevel::O3, 2, 1)};
  ReportHeader header{"mlp", 2, "cpu", "sgd momentum 0.9", 1, 1};
  BOOST_TEST(format_table(header, reports).find("vs O0") == std::string::npos);
  BOOST_TEST(json_objects(header, reports)[0].str().find("_vs_o0") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(usage_errors_name_the_flag) {
  const auto fails_naming = [](std::vector<std::string> args, const std::string& flag) {
    try {
      parse_mem_options(args);
    } catch (const UsageError& e) {
      BOOST_TEST(std::string(e.what()).find(flag) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("no usage error for " << flag);
  };
  fails_naming({"--model", "vgg", "--batch-size", "4"}, "--model");
  fails_naming({"--model", "lenet", "--batch-size", "0"}, "--batch-size");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--steps", "0"}, "--steps");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--opt-levels", "O0,O5"}, "--opt-levels");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--opt-levels", "O2,O0,O2"}, "twice");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--opt-levels", "O0,,O1"}, "--opt-levels");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--half-dtype", "fp8"}, "--half-dtype");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--device", "tpu"}, "--device");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--device", "cpu", "--max-batch"},
               "--max-batch");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--max-batch-limit", "64"},
               "--max-batch-limit needs --max-batch");
  fails_naming({"--model", "lenet", "--batch-size", "4", "--max-batch", "--max-batch-limit", "0"},
               "--max-batch-limit");

  const MemOptions ok = parse_mem_options(
      {"--model", "mlp", "--batch-size", "4", "--opt-levels", "O3,O0", "--half-dtype", "bf16"});
  BOOST_TEST(ok.levels.size() == 2u);
  BOOST_TEST((ok.levels[0] == amp::OptLevel::O3 && ok.levels[1] == amp::OptLevel::O0));
  BOOST_TEST((ok.half_dtype == DType::bf16));
  BOOST_TEST(ok.steps == 3);
  BOOST_TEST(ok.threads >= 1);
}

BOOST_AUTO_TEST_CASE(bf16_halves_like_fp16) {
  MeasureConfig config;
  config.model = "mlp";
  config.batch_size = 4;
  config.steps = 1;
  const LevelReport r = measure_level(config, level_properties(amp::OptLevel::O2, DType::bf16));
  BOOST_TEST((r.properties.model_dtype == DType::bf16));
  BOOST_TEST(mem(r, MemoryCategory::parameters) == 2 * kMlpParams);
  BOOST_TEST(mem(r, MemoryCategory::activations) == mlp_activation_bytes(4, 2));
}

// The CUDA rows, from hand-made reports (a CPU run has neither): the cache's reservation and
// the driver's view per level, and --max-batch's answer with its failing batch, or ">=" at the
// search's limit.
BOOST_AUTO_TEST_CASE(device_rows_and_max_batch_in_the_table_and_json) {
  constexpr std::int64_t kMiB = 1 << 20;
  std::vector<LevelReport> reports(2);
  reports[0].properties = level_properties(amp::OptLevel::O0, std::nullopt);
  reports[1].properties = level_properties(amp::OptLevel::O2, std::nullopt);
  reports[0].peak_bytes = 300 * kMiB;
  reports[1].peak_bytes = 150 * kMiB;
  reports[0].device_view = DeviceView{400 * kMiB, 900 * kMiB, 80 * 1024 * kMiB};
  reports[1].device_view = DeviceView{200 * kMiB, 700 * kMiB, 80 * 1024 * kMiB};
  reports[0].max_batch = MaxBatch{1234, 1270, 32768, 12};
  reports[1].max_batch = MaxBatch{32768, 0, 32768, 9};
  ReportHeader header;
  header.model = "resnet18";
  header.batch_size = 128;
  header.device = "cuda:0";
  header.steps = 2;

  const std::string table = format_table(header, reports);
  BOOST_TEST_MESSAGE(table);
  const auto line_with = [&](const std::string& label) {
    const std::size_t at = table.find(label);
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no row " << label);
    return table.substr(at, table.find('\n', at) - at);
  };
  const std::string reserved = line_with("reserved by the cache");
  BOOST_TEST(reserved.find("400.00 MiB") != std::string::npos, reserved);
  BOOST_TEST(reserved.find("0.50x") != std::string::npos, reserved);
  BOOST_TEST(line_with("device used (driver)").find("700.00 MiB") != std::string::npos);
  const std::string max_batch = line_with("max batch");
  BOOST_TEST(max_batch.find("1234 (1270)") != std::string::npos, max_batch);
  BOOST_TEST(max_batch.find(">= 32768") != std::string::npos, max_batch);
  BOOST_TEST(max_batch.find("26.55x") != std::string::npos, max_batch);
  BOOST_TEST(table.find("81920.00 MiB") != std::string::npos);  // the device's total
  BOOST_TEST(table.find("within 3.1% (the smallest failing batch") != std::string::npos);

  const std::vector<JsonObject> objects = json_objects(header, reports);
  const std::string o0 = objects[0].str(), o2 = objects[1].str();
  BOOST_TEST(o0.find("\"device_reserved_bytes\":419430400") != std::string::npos, o0);
  BOOST_TEST(o0.find("\"driver_used_bytes\":943718400") != std::string::npos, o0);
  BOOST_TEST(o0.find("\"max_batch\":1234,\"max_batch_failing\":1270") != std::string::npos, o0);
  BOOST_TEST(o0.find("\"max_batch_reached_limit\":false") != std::string::npos, o0);
  BOOST_TEST(o2.find("\"max_batch_reached_limit\":true") != std::string::npos, o2);

  reports[0].device_view.reset();
  reports[1].device_view.reset();
  reports[0].max_batch.reset();
  reports[1].max_batch.reset();
  const std::string cpu_table = format_table(header, reports);
  BOOST_TEST(cpu_table.find("reserved by the cache") == std::string::npos);
  BOOST_TEST(cpu_table.find("max batch") == std::string::npos);
  BOOST_TEST(json_objects(header, reports)[0].str().find("max_batch") == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
