// `alloy mem` end to end: the table on standard output, one JSON object per level with the
// contract's keys, the SVG chart, and the exit statuses of bad flags and paths.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"

using namespace alloy::test;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

const std::vector<std::string> kContractKeys = {"\"opt_level\":",
                                                "\"parameters_bytes\":",
                                                "\"master_parameters_bytes\":",
                                                "\"gradients_bytes\":",
                                                "\"optimizer_state_bytes\":",
                                                "\"activations_bytes\":",
                                                "\"workspace_bytes\":",
                                                "\"peak_bytes\":",
                                                "\"images_per_second\":"};

std::vector<std::string> quick(std::vector<std::string> extra) {
  std::vector<std::string> args = {"mem", "--model", "lenet", "--batch-size", "8", "--device",
                                   "cpu", "--steps", "2",     "--threads",    "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

void check_usage_error(const std::vector<std::string>& args, const std::string& names) {
  const ProcessResult result = run_alloy(args);
  BOOST_TEST(result.exit_code == 2, result.errors);
  BOOST_TEST(result.errors.find(names) != std::string::npos, result.errors);
  BOOST_TEST(result.output.empty(), result.output);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mem_command)

BOOST_AUTO_TEST_CASE(table_json_and_chart_for_every_level) {
  TempDir dir;
  const ProcessResult result =
      run_alloy(quick({"--json", dir.file("mem.jsonl"), "--plot", dir.file("mem.svg")}));
  BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
  for (const char* word : {"O0", "O1", "O2", "O3", "parameters", "master_parameters", "activations",
                           "workspace", "peak (total)", "images/s", "vs O0"}) {
    BOOST_TEST(result.output.find(word) != std::string::npos, word << " not in\n" << result.output);
  }
  const std::vector<std::string> json = lines(read_file(dir.file("mem.jsonl")));
  BOOST_TEST_REQUIRE(json.size() == 4u);
  const char* levels[] = {"O0", "O1", "O2", "O3"};
  for (std::size_t i = 0; i < json.size(); ++i) {
    BOOST_TEST(json[i].front() == '{');
    BOOST_TEST(json[i].back() == '}');
    BOOST_TEST(json[i].find(std::string("\"opt_level\":\"") + levels[i] + "\"") !=
               std::string::npos);
    for (const std::string& key : kContractKeys) {
      BOOST_TEST(json[i].find(key) != std::string::npos, key << " not in " << json[i]);
    }
  }
  // LeNet's 129068 parameters: 4 bytes each at O0, 2 at O2 plus 4 of master weights.
  BOOST_TEST(json[0].find("\"parameters_bytes\":516272,") != std::string::npos, json[0]);
  BOOST_TEST(json[2].find("\"parameters_bytes\":258136,") != std::string::npos, json[2]);
  BOOST_TEST(json[2].find("\"master_parameters_bytes\":516272,") != std::string::npos, json[2]);

  const std::string svg = read_file(dir.file("mem.svg"));
  BOOST_TEST(svg.rfind("<svg", 0) == 0);
  BOOST_TEST(svg.find("</svg>") != std::string::npos);
  BOOST_TEST(svg.find(">O3</text>") != std::string::npos);
  // Written atomically: no temporary file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  BOOST_TEST(files == 2);
}

BOOST_AUTO_TEST_CASE(json_to_stdout_keeps_the_table_on_stderr) {
  const ProcessResult result = run_alloy(quick({"--opt-levels", "O2,O0", "--json", "-"}));
  BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
  const std::vector<std::string> json = lines(result.output);
  BOOST_TEST_REQUIRE(json.size() == 2u, result.output);
  BOOST_TEST(json[0].find("\"opt_level\":\"O2\"") != std::string::npos);
  BOOST_TEST(json[0].find("\"peak_bytes_vs_o0\":") != std::string::npos);
  BOOST_TEST(json[1].find("\"opt_level\":\"O0\"") != std::string::npos);
  BOOST_TEST(result.errors.find("peak (total)") != std::string::npos, result.errors);
}

// The step clips as `alloy train --clip-grad-norm` does: its norm, coefficient and tally are
// workspace the unclipped step does not have, and the header and JSON say so.
BOOST_AUTO_TEST_CASE(clip_grad_norm_measures_the_clipping_step) {
  const auto workspace = [](const std::string& json) {
    const std::string key = "\"workspace_bytes\":";
    const std::size_t at = json.find(key);
    BOOST_TEST_REQUIRE(at != std::string::npos, json);
    return std::stoll(json.substr(at + key.size()));
  };
  const ProcessResult plain = run_alloy(quick({"--opt-levels", "O2", "--json", "-"}));
  const ProcessResult clipped =
      run_alloy(quick({"--opt-levels", "O2", "--json", "-", "--clip-grad-norm", "1"}));
  BOOST_TEST_REQUIRE(plain.exit_code == 0, plain.errors);
  BOOST_TEST_REQUIRE(clipped.exit_code == 0, clipped.errors);
  BOOST_TEST(clipped.output.find("\"clip_grad_norm\":1") != std::string::npos, clipped.output);
  BOOST_TEST(plain.output.find("clip_grad_norm") == std::string::npos, plain.output);
  BOOST_TEST(clipped.errors.find(", clip_grad_norm 1,") != std::string::npos, clipped.errors);
  BOOST_TEST(workspace(clipped.output) > workspace(plain.output));
  check_usage_error(quick({"--clip-grad-norm", "-1"}), "--clip-grad-norm");
  check_usage_error(quick({"--clip-grad-norm", "1e39"}), "--clip-grad-norm");
}

BOOST_AUTO_TEST_CASE(recompute_blocks_lowers_resnet18s_activations) {
  const auto bytes = [](const std::string& json, const std::string& name) {
    const std::string key = "\"" + name + "\":";
    const std::size_t at = json.find(key);
    BOOST_TEST_REQUIRE(at != std::string::npos, json);
    return std::stoll(json.substr(at + key.size()));
  };
  const std::vector<std::string> resnet18 = {
      "mem", "--model",      "resnet18", "--batch-size", "8", "--device", "cpu", "--steps",
      "1",   "--opt-levels", "O0",       "--threads",    "1", "--json",   "-"};
  std::vector<std::string> recomputed = resnet18;
  recomputed.insert(recomputed.end(), {"--recompute", "blocks"});
  const ProcessResult kept = run_alloy(resnet18);
  const ProcessResult blocks = run_alloy(recomputed);
  BOOST_TEST_REQUIRE(kept.exit_code == 0, kept.errors);
  BOOST_TEST_REQUIRE(blocks.exit_code == 0, blocks.errors);
  BOOST_TEST(kept.output.find("\"recompute\":\"none\"") != std::string::npos, kept.output);
  BOOST_TEST(blocks.output.find("\"recompute\":\"blocks\"") != std::string::npos, blocks.output);
  BOOST_TEST(blocks.errors.find(", recompute blocks,") != std::string::npos, blocks.errors);
  // Only each block's input is kept: well under two thirds of the activations.
  BOOST_TEST(3 * bytes(blocks.output, "activations_bytes") <
             2 * bytes(kept.output, "activations_bytes"));
  BOOST_TEST(bytes(blocks.output, "peak_bytes") < bytes(kept.output, "peak_bytes"));
  // The same weights and state: only activations (and the peak) change.
  BOOST_TEST(bytes(blocks.output, "optimizer_state_bytes") ==
             bytes(kept.output, "optimizer_state_bytes"));

  check_usage_error(quick({"--recompute", "sometimes"}), "--recompute");
  const ProcessResult lenet = run_alloy(quick({"--recompute", "blocks"}));
  BOOST_TEST(lenet.exit_code == 2, lenet.errors);
  BOOST_TEST(
      lenet.errors.find("--recompute blocks: model 'lenet' has no blocks") != std::string::npos,
      lenet.errors);
  BOOST_TEST(lenet.errors.find("measuring") == std::string::npos, lenet.errors);
}

// One rank of four, simulated: ZeRO stage 1 keeps a quarter of the fp32 masters and of AdamW's
// moments (rank 0's shard: ceil(N / 4) elements), plain DDP all of them; the model's weights and
// the activations of the rank's batch of 2 are the same in both.
BOOST_AUTO_TEST_CASE(zero_1_keeps_a_quarter_of_the_masters_and_optimizer_state_per_rank) {
  const ProcessResult result =
      run_alloy(quick({"--opt-levels", "O2", "--optimizer", "adamw", "--world-size", "4", "--zero",
                       "1", "--json", "-"}));
  BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
  const std::vector<std::string> objects = lines(result.output);
  BOOST_TEST_REQUIRE(objects.size() == 2u, result.output);
  const auto bytes = [](const std::string& json, const std::string& name) {
    const std::string key = "\"" + name + "\":";
    const std::size_t at = json.find(key);
    BOOST_TEST_REQUIRE(at != std::string::npos, json);
    return std::stoll(json.substr(at + key.size()));
  };
  const std::string& ddp = objects[0];
  const std::string& zero = objects[1];
  BOOST_TEST(bytes(ddp, "zero") == 0);
  BOOST_TEST(bytes(zero, "zero") == 1);
  BOOST_TEST(bytes(zero, "world_size") == 4);
  for (const char* category : {"master_parameters_bytes", "optimizer_state_bytes"}) {
    const long long all = bytes(ddp, category), shard = bytes(zero, category);
    BOOST_TEST_CONTEXT(category << ": DDP " << all << ", ZeRO-1 " << shard) {
      BOOST_TEST(all > 0);
      // Rounded up to whole elements per shard, and the optimizer's few scalars (its rate and
      // step counts) on every rank.
      BOOST_TEST(4 * shard >= all);
      BOOST_TEST(4 * shard - all < 256);
    }
  }
  // The same weights, laid out in one buffer with each parameter 16-byte aligned.
  BOOST_TEST(std::abs(bytes(zero, "parameters_bytes") - bytes(ddp, "parameters_bytes")) < 256);
  BOOST_TEST(bytes(zero, "activations_bytes") == bytes(ddp, "activations_bytes"));
  BOOST_TEST(
      result.errors.find("one rank of 4 (rank 0, simulated), batch 2 each") != std::string::npos,
      result.errors);
  BOOST_TEST(result.errors.find("O2 ZeRO-1") != std::string::npos, result.errors);
  check_usage_error(quick({"--world-size", "0"}), "--world-size");
  check_usage_error(quick({"--zero", "2"}), "--zero");
  check_usage_error(quick({"--world-size", "3"}), "--batch-size 8 is the global batch");
  check_usage_error(quick({"--zero", "1", "--ema-decay", "0.9"}), "--zero 1 with --ema-decay");
}

BOOST_AUTO_TEST_CASE(usage_errors_exit_2_naming_the_flag) {
  check_usage_error({"mem", "--model", "vgg", "--batch-size", "8"}, "--model");
  check_usage_error({"mem", "--batch-size", "8"}, "--model");
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "0"}, "--batch-size");
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "8", "--steps", "0"}, "--steps");
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "8", "--opt-levels", "O0,O4"},
                    "--opt-levels");
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "8", "--opt-levels", "O1,O1"},
                    "--opt-levels lists O1 twice");
  check_usage_error(
      {"mem", "--model", "lenet", "--batch-size", "8", "--device", "cpu", "--max-batch"},
      "--max-batch");
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "8", "--frobnicate"}, "frobnicate");
}

BOOST_AUTO_TEST_CASE(unwritable_plot_fails_before_measuring) {
  TempDir dir;
  const std::string path = dir.file("missing/folder/mem.svg");
  const ProcessResult result = run_alloy(quick({"--plot", path}));
  BOOST_TEST(result.exit_code == 1, result.errors);
  BOOST_TEST(result.errors.find("--plot") != std::string::npos, result.errors);
  BOOST_TEST(result.errors.find(path) != std::string::npos, result.errors);
  BOOST_TEST(result.errors.find("measuring") == std::string::npos, result.errors);
}

BOOST_AUTO_TEST_CASE(help_lists_the_flags) {
  const ProcessResult result = run_alloy({"mem", "--help"});
  BOOST_TEST(result.exit_code == 0);
  for (const char* flag : {"--model", "--batch-size", "--opt-levels", "--half-dtype", "--steps",
                           "--json", "--plot", "--max-batch", "own peak"}) {
    BOOST_TEST(result.output.find(flag) != std::string::npos, flag);
  }
}

BOOST_AUTO_TEST_SUITE_END()
