// Data-parallel training of a GPT on the CPU (--gpus 2 over Gloo): every rank ends with the
// same weights, which train like one process with the same global batch (each rank takes rows
// r + W i of it, dropout masks follow the global row), with gradient accumulation too; a group of
// one rank is the single process bit for bit; a global batch that does not split evenly is a
// usage error.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "tests/parallel/alloy_runs.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::test;

namespace {

std::vector<std::string> gpt_args(const std::string& data_file, int port) {
  return {"train",
          "--model",
          "gpt",
          "--dataset",
          "text",
          "--data-file",
          data_file,
          "--n-layer",
          "2",
          "--n-head",
          "2",
          "--n-embd",
          "16",
          "--block-size",
          "16",
          "--batch-size",
          "8",
          "--steps",
          "12",
          "--optimizer",
          "adamw",
          "--lr",
          "3e-3",
          "--dropout",
          "0.1",
          "--device",
          "cpu",
          "--log-json",
          "-",
          "--master-port",
          std::to_string(port)};
}

std::string text_file(const TempDir& dir) {
  const std::string path = dir.file("text.txt");
  Generator generator(5);
  std::string text;
  const char* words[] = {"to ", "be ", "or ", "not ", "that ", "is ", "the ", "question\n"};
  while (text.size() < 8000)
    text += words[generator.below(8)];
  std::ofstream(path) << text;
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_ddp)

BOOST_AUTO_TEST_CASE(two_ranks_train_like_one_process_with_the_global_batch) {
  TempDir dir;
  const std::string data = text_file(dir);
  const ProcessResult single = run_alloy(with(gpt_args(data, free_port()), {"--threads", "1"}));
  BOOST_TEST_REQUIRE(single.exit_code == 0, single.errors);
  const ProcessResult ddp = run_alloy(with(gpt_args(data, free_port()), {"--gpus", "2"}));
  BOOST_TEST_REQUIRE(ddp.exit_code == 0, ddp.errors);
  check_agreeing_end_event(ddp.output);
  const double single_loss = std::stod(field(event(single.output, "end"), "val_loss"));
  const double ddp_loss = std::stod(field(event(ddp.output, "end"), "val_loss"));
  BOOST_TEST(ddp_loss == single_loss, boost::test_tools::tolerance(1e-4));

  // One rank over Gloo: the single process's bits.
  const ProcessResult one =
      run_alloy(with(gpt_args(data, free_port()), {"--dist-backend", "gloo", "--threads", "1"}));
  BOOST_TEST_REQUIRE(one.exit_code == 0, one.errors);
  BOOST_TEST(field(event(one.output, "end"), "params_digest") ==
             field(event(single.output, "end"), "params_digest"));
}

// Each rank's share as two micro-batches (one allreduce, after the second): the same windows
// and dropout masks, so the same training as one pass over the global batch.
BOOST_AUTO_TEST_CASE(two_ranks_of_two_micro_batches_train_like_one_pass) {
  TempDir dir;
  const std::string data = text_file(dir);
  const ProcessResult single = run_alloy(with(gpt_args(data, free_port()), {"--threads", "1"}));
  BOOST_TEST_REQUIRE(single.exit_code == 0, single.errors);
  const ProcessResult ddp =
      run_alloy(with(gpt_args(data, free_port()), {"--gpus", "2", "--accumulation-steps", "2"}));
  BOOST_TEST_REQUIRE(ddp.exit_code == 0, ddp.errors);
  check_agreeing_end_event(ddp.output);
  BOOST_TEST(std::stod(field(event(ddp.output, "end"), "val_loss")) ==
                 std::stod(field(event(single.output, "end"), "val_loss")),
             boost::test_tools::tolerance(1e-4));
}

BOOST_AUTO_TEST_CASE(an_uneven_global_batch_is_a_usage_error) {
  TempDir dir;
  const ProcessResult run = run_alloy(with(gpt_args(text_file(dir), free_port()), {"--gpus", "3"}));
  BOOST_TEST(run.exit_code == 2);
  BOOST_TEST(run.errors.find("--batch-size") != std::string::npos, run.errors);
}

BOOST_AUTO_TEST_SUITE_END()
