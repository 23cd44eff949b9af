// `alloy ckpt export --safetensors` read back by readers that are not Alloy's:
// tools/read_safetensors.py (json + numpy) sees the checkpoint's names, shapes and values bit for
// bit, and the LeNet weights loaded into the PyTorch LeNet of tools/bench give the test accuracy
// `alloy eval` gives. Without a python3 that has numpy (and torch, for the second case) the test
// exits 77 after saying why, which ctest reports as skipped.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

const std::string kSource = ALLOY_SOURCE_DIR;
const std::string kDataDir = ALLOY_TEST_DATA_DIR;

// The first of /usr/bin/python3 (Debian's, where python3-torch installs) and the python3 on
// PATH that imports every module of `modules`; "" when none does.
std::string python_with(const std::string& modules) {
  for (const std::vector<std::string>& python :
       {std::vector<std::string>{"/usr/bin/python3"}, std::vector<std::string>{"python3"}}) {
    std::vector<std::string> args = python;
    args.insert(args.end(), {"-c", "import " + modules});
    if (run_process("/usr/bin/env", args).exit_code == 0) return python[0];
  }
  return "";
}

[[noreturn]] void skip(const std::string& reason) {
  std::cerr << "SKIPPED: " << reason << std::endl;
  std::exit(77);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator))
    parts.push_back(part);
  return parts;
}

std::string shape_text(const alloy::Shape& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors_export)

BOOST_AUTO_TEST_CASE(numpy_reads_the_same_names_shapes_and_values) {
  const std::string python = python_with("numpy");
  if (python.empty()) skip("no python3 with numpy (Debian: python3-numpy)");
  TempDir dir;
  const TrainRun run = run_logged(dir, "train",
                                  quick_train_args({"--epochs", "1", "--opt-level", "O2",
                                                    "--checkpoint-dir", dir.file("run")}));
  const std::string path = ckpt::checkpoint_path(dir.file("run"), 50);
  const std::string out = dir.file("weights.safetensors");
  const ProcessResult exported = run_alloy({"ckpt", "export", path, "--safetensors", out});
  BOOST_TEST_REQUIRE(exported.exit_code == 0, exported.errors);

  const ProcessResult read =
      run_process("/usr/bin/env", {python, kSource + "/tools/read_safetensors.py", out});
  BOOST_TEST_REQUIRE(read.exit_code == 0, read.errors);
  const std::vector<std::string> lines = lines_of(read.output);
  const ckpt::CheckpointState state = ckpt::read_checkpoint(path);
  BOOST_TEST_REQUIRE(lines.size() == 1 + state.parameters.size() + state.buffers.size());
  BOOST_TEST(json_field(lines[0], "params_digest") == run.digest());  // the metadata

  for (std::size_t i = 0; i < state.parameters.size(); ++i) {
    const ckpt::NamedTensor& tensor = state.parameters[i];
    const std::vector<std::string> fields = split(lines[1 + i], '\t');
    BOOST_TEST_REQUIRE(fields.size() == 4u);
    BOOST_TEST_CONTEXT(tensor.name) {
      BOOST_TEST(fields[0] == tensor.name);
      BOOST_TEST(fields[1] == "F32");
      BOOST_TEST(fields[2] == shape_text(tensor.shape));
      const std::vector<std::string> values = split(fields[3], ',');
      BOOST_TEST_REQUIRE(static_cast<std::int64_t>(values.size()) == tensor.numel());
      std::int64_t differing = 0;
      for (std::size_t k = 0; k < values.size(); ++k) {
        float stored = 0;
        std::memcpy(&stored, tensor.data.data() + k * sizeof(float), sizeof stored);
        // Python's repr of the float32 widened to double reads back exactly.
        if (static_cast<float>(std::strtod(values[k].c_str(), nullptr)) != stored) ++differing;
      }
      BOOST_TEST(differing == 0);
    }
  }
}

namespace {

// `model` trained for 40 AdamW steps (about 0.6 test accuracy for LeNet: weights that tell the
// classes apart, so equal accuracies mean something), exported, and evaluated by `alloy eval`
// and by its PyTorch twin (tools/eval_safetensors_pytorch.py): the same accuracy, up to a
// near-tie or two that fp32 sums in another order may flip.
void check_pytorch_gets_the_accuracy_alloy_eval_gets(const std::string& model) {
  const std::string python = python_with("numpy, torch");
  if (python.empty()) skip("no python3 with torch and numpy (Debian: python3-torch)");
  if (!std::ifstream(kDataDir + "/t10k-labels-idx1-ubyte.gz") &&
      !std::ifstream(kDataDir + "/t10k-labels-idx1-ubyte")) {
    skip("no Fashion-MNIST in " + kDataDir + " (Debian: dataset-fashion-mnist)");
  }
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string log = dir.file("train.jsonl");
  {
    // The run is stopped once the step-40 checkpoint is written.
    BackgroundAlloy train(
        {"train", "--model", model, "--device", "cpu", "--threads", "2", "--optimizer", "adamw",
         "--lr", "0.002", "--data-dir", kDataDir, "--checkpoint-dir", run_dir, "--checkpoint-every",
         "40", "--log-json", log},
        dir.file("out"), dir.file("err"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (events(read_text(log), "checkpoint").empty() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    train.signal(SIGTERM);
    BOOST_TEST_REQUIRE(train.wait() == 1, read_text(dir.file("err")));
  }
  const std::string path = ckpt::checkpoint_path(run_dir, 40);
  const ProcessResult eval =
      run_alloy({"eval", "--checkpoint", path, "--device", "cpu", "--log-json", "-"});
  BOOST_TEST_REQUIRE(eval.exit_code == 0, eval.errors);
  const std::string alloy_acc = json_field(events(eval.output, "eval").at(0), "test_acc");

  const std::string out = dir.file(model + ".safetensors");
  const ProcessResult exported = run_alloy({"ckpt", "export", path, "--safetensors", out});
  BOOST_TEST_REQUIRE(exported.exit_code == 0, exported.errors);
  const ProcessResult torch =
      run_process("/usr/bin/env", {python, kSource + "/tools/eval_safetensors_pytorch.py", out,
                                   "--model", model, "--data-dir", kDataDir});
  BOOST_TEST_REQUIRE(torch.exit_code == 0, torch.errors);
  const std::string torch_acc = json_field(torch.output, "test_acc");
  BOOST_TEST_MESSAGE(model << " test accuracy: alloy eval " << alloy_acc << ", PyTorch "
                           << torch_acc);
  BOOST_TEST(std::stod(alloy_acc) > 0.3);
  // Both are counts out of 10000.
  BOOST_TEST(std::abs(std::stod(torch_acc) - std::stod(alloy_acc)) <= 0.0002);
}

}  // namespace

BOOST_AUTO_TEST_CASE(pytorch_lenet_gets_the_accuracy_alloy_eval_gets) {
  check_pytorch_gets_the_accuracy_alloy_eval_gets("lenet");
}

// Layer norm, exact GELU, residual sums and linear layers, as PyTorch's nn.LayerNorm, F.gelu
// and nn.Linear compute them (dropout is off in evaluation).
BOOST_AUTO_TEST_CASE(pytorch_ffn_gets_the_accuracy_alloy_eval_gets) {
  check_pytorch_gets_the_accuracy_alloy_eval_gets("ffn");
}

BOOST_AUTO_TEST_SUITE_END()
