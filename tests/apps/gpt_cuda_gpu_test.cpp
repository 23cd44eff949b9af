// alloy train --model gpt on a GPU (the emulator in CI), end to end: a few steps at O0, O2 bf16
// and O2 fp16 end at the CPU's validation loss (the half levels within what their rounding
// allows: the tensor-core attention rounds its probabilities, the CPU keeps them fp32), and with
// attention dropout and gradient accumulation on, steps replayed from a captured CUDA graph give
// the eager steps' weights bit for bit.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/gpu.h"
#include "tests/support/process.h"

using namespace alloy::test;

namespace {

// A text a model learns in a few steps: one line, over and over.
struct Corpus {
  TempDir dir;
  std::string path = dir.file("text.txt");
  Corpus() {
    std::ofstream out(path);
    for (int i = 0; i < 400; ++i)
      out << "the king and queen of hearts shall speak now, my lord.\n";
  }
};

std::vector<std::string> tiny_gpt(const Corpus& corpus, const std::string& device,
                                  const std::string& level, const std::string& half) {
  return {"train",     "--model",      "gpt",  "--dataset",    "text", "--data-file",
          corpus.path, "--n-layer",    "2",    "--n-head",     "2",    "--n-embd",
          "64",        "--block-size", "64",   "--batch-size", "2",    "--optimizer",
          "adamw",     "--lr",         "3e-3", "--threads",    "2",    "--device",
          device,      "--opt-level",  level,  "--half-dtype", half,   "--log-json",
          "-"};
}

// The end event's field of a run that must succeed.
std::string end_field(std::vector<std::string> args, const std::vector<std::string>& more,
                      const std::string& key) {
  args.insert(args.end(), more.begin(), more.end());
  const ProcessResult run = run_alloy(args);
  BOOST_TEST_REQUIRE(run.exit_code == 0, run.errors);
  const std::string value = json_event_field(run.output, "end", key);
  BOOST_TEST_REQUIRE(!value.empty(), "no " << key << " in\n" << run.output);
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_cuda)

BOOST_AUTO_TEST_CASE(trains_to_the_cpus_validation_loss) {
  struct Case {
    std::string level, half;
    double tolerance;
  };
  const Corpus corpus;
  const std::vector<std::string> steps = {"--steps", "8"};
  for (const Case& c :
       {Case{"O0", "fp16", 1e-3}, Case{"O2", "bf16", 0.02}, Case{"O2", "fp16", 0.005}}) {
    const double cpu =
        std::stod(end_field(tiny_gpt(corpus, "cpu", c.level, c.half), steps, "val_loss"));
    const double gpu =
        std::stod(end_field(tiny_gpt(corpus, "cuda", c.level, c.half), steps, "val_loss"));
    BOOST_TEST_MESSAGE(c.level << " " << c.half << ": cpu " << cpu << ", cuda " << gpu);
    BOOST_TEST(std::isfinite(gpu));
    BOOST_TEST(std::fabs(gpu - cpu) <= c.tolerance,
               c.level << " " << c.half << ": cuda " << gpu << " against the cpu's " << cpu);
  }
}

// Six steps of two micro-batches each: three eager warm-up steps, the captured one, two
// replays; the start event says the step is captured.
BOOST_AUTO_TEST_CASE(graph_replays_give_the_eager_weights_with_attention_dropout) {
  const Corpus corpus;
  std::vector<std::string> args = tiny_gpt(corpus, "cuda", "O2", "bf16");
  for (const char* more : {"--dropout", "0.1", "--steps", "6", "--accumulation-steps", "2"})
    args.push_back(more);
  const std::string eager = end_field(args, {"--cuda-graph", "off"}, "params_digest");
  args.insert(args.end(), {"--cuda-graph", "on"});
  const ProcessResult replayed = run_alloy(args);
  BOOST_TEST_REQUIRE(replayed.exit_code == 0, replayed.errors);
  BOOST_TEST(json_event_field(replayed.output, "start", "cuda_graph") == "true");
  BOOST_TEST(json_event_field(replayed.output, "end", "params_digest") == eager);
}

BOOST_AUTO_TEST_SUITE_END()
