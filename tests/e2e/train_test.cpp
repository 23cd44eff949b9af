// `alloy train` end to end on real Fashion-MNIST: LeNet learns well above chance in one epoch, the
// JSON log carries the contract's events and keys, and two identical runs end with the same
// params_digest (bitwise-equal weights) while another seed does not.
//
// To stay well under two minutes on two shared cores the runs use the first 6400 training and
// 2000 test images of the real data set (written as raw IDX files into a temporary directory
// with the library's own reader), AdamW and batch 64 (100 steps). The reference recipe itself
// (plain SGD, lr 0.2, weights N(0, 0.01)) sits at chance for its whole first epoch before it
// takes off - PyTorch's does too - so one epoch of it could not show learning.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/idx.h"
#include "core/ops/gemm.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::test;

namespace {

constexpr std::int64_t kTrainImages = 6400;
constexpr std::int64_t kTestImages = 2000;

// The raw text of `key`'s value in a one-line JSON object (strings without their quotes);
// "" when absent. The values of interest hold no commas or braces.
std::string json_field(const std::string& line, const std::string& key) {
  const std::string marker = "\"" + key + "\":";
  const std::size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  const std::size_t begin = at + marker.size();
  std::string value = line.substr(begin, line.find_first_of(",}", begin) - begin);
  if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
  return value;
}

std::vector<std::string> events(const std::string& log, const std::string& kind) {
  std::vector<std::string> found;
  for (const std::string& line : lines_of(log)) {
    if (json_field(line, "event") == kind) found.push_back(line);
  }
  return found;
}

void write_u32(std::ofstream& out, std::uint32_t value) {
  const char bytes[4] = {static_cast<char>(value >> 24), static_cast<char>(value >> 16),
                         static_cast<char>(value >> 8), static_cast<char>(value)};
  out.write(bytes, 4);
}

// The first `count` examples of `prefix` (train or t10k) from `from`, as raw IDX files in `to`.
void write_subset(const std::string& from, const std::string& to, const std::string& prefix,
                  std::int64_t count) {
  const data::Dataset full = data::read_idx_dataset(from, prefix, prefix);
  BOOST_REQUIRE(full.size() >= count);
  const auto n = static_cast<std::uint32_t>(count);
  {
    std::ofstream out(to + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
    write_u32(out, 0x00000803);
    write_u32(out, n);
    write_u32(out, 28);
    write_u32(out, 28);
    out.write(static_cast<const char*>(full.images.raw()), count * 28 * 28);
    BOOST_REQUIRE(out.good());
  }
  std::ofstream out(to + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
  write_u32(out, 0x00000801);
  write_u32(out, n);
  const std::int32_t* labels = full.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < count; ++i)
    out.put(static_cast<char>(labels[i]));
  BOOST_REQUIRE(out.good());
}

struct Subset {
  TempDir dir;
  Subset() {
    const char* source = ALLOY_TEST_DATA_DIR;
    BOOST_REQUIRE_MESSAGE(std::filesystem::is_directory(source),
                          source << " is missing: install dataset-fashion-mnist "
                                    "(tools/setup.sh does)");
    write_subset(source, dir.path(), "train", kTrainImages);
    write_subset(source, dir.path(), "t10k", kTestImages);
  }
};

struct Run {
  ProcessResult process;
  std::string start, end;
  std::vector<std::string> epochs;
};

Run train_lenet(const Subset& data, const std::string& seed) {
  Run run;
  run.process = run_alloy({"train",    "--model",      "lenet",     "--data-dir",  data.dir.path(),
                           "--device", "cpu",          "--threads", "2",           "--epochs",
                           "1",        "--batch-size", "64",        "--optimizer", "adamw",
                           "--lr",     "0.002",        "--seed",    seed,          "--log-json",
                           "-"});
  BOOST_TEST_REQUIRE(run.process.exit_code == 0, run.process.errors);
  const auto starts = events(run.process.output, "start");
  const auto ends = events(run.process.output, "end");
  run.epochs = events(run.process.output, "epoch");
  BOOST_TEST_REQUIRE(starts.size() == 1u, run.process.output);
  BOOST_TEST_REQUIRE(ends.size() == 1u, run.process.output);
  run.start = starts.front();
  run.end = ends.front();
  return run;
}

}  // namespace

BOOST_AUTO_TEST_CASE(lenet_learns_in_one_epoch_and_runs_repeat_bit_for_bit) {
  const Subset data;
  const Run first = train_lenet(data, "7");

  // The log follows the contract.
  for (const char* key : {"model", "opt_level", "device", "world_size"}) {
    BOOST_TEST(!json_field(first.start, key).empty(), "start event lacks " << key);
  }
  BOOST_TEST(json_field(first.start, "model") == "lenet");
  BOOST_TEST(json_field(first.start, "opt_level") == "O0");
  BOOST_TEST(json_field(first.start, "device") == "cpu");
  BOOST_TEST(json_field(first.start, "cpu_gemm") == cpu::gemm_kernels());
  BOOST_TEST_REQUIRE(first.epochs.size() == 1u, first.process.output);
  const std::string& epoch = first.epochs.front();
  for (const char* key :
       {"epoch", "step", "train_loss", "train_acc", "test_acc", "epoch_seconds",
        "images_per_second", "loss_scale", "skipped_steps", "peak_memory_bytes"}) {
    BOOST_TEST(!json_field(epoch, key).empty(), "epoch event lacks " << key);
  }
  BOOST_TEST(json_field(epoch, "step") == std::to_string(kTrainImages / 64));
  BOOST_TEST(json_field(first.end, "step") == std::to_string(kTrainImages / 64));
  BOOST_TEST(std::atof(json_field(epoch, "peak_memory_bytes").c_str()) > 0);

  // Learning: chance is 0.1 on ten balanced classes.
  const double test_acc = std::atof(json_field(first.end, "test_acc").c_str());
  const double train_loss = std::atof(json_field(epoch, "train_loss").c_str());
  BOOST_TEST_MESSAGE("one epoch on " << kTrainImages << " images: test_acc " << test_acc
                                     << ", train_loss " << train_loss);
  BOOST_TEST(test_acc > 0.5, "test_acc " << test_acc << " is not well above chance");
  BOOST_TEST(train_loss < 2.0, "train_loss " << train_loss);  // log(10) = 2.30 at the start

  // The human summary line says the same.
  BOOST_TEST(first.process.output.find("test_acc") != std::string::npos);

  // Determinism: the same command gives the same weights; another seed other weights.
  const std::string digest = json_field(first.end, "params_digest");
  BOOST_TEST_REQUIRE(digest.size() >= 16u, first.end);
  const Run second = train_lenet(data, "7");
  BOOST_TEST(json_field(second.end, "params_digest") == digest);
  BOOST_TEST(json_field(second.end, "test_acc") == json_field(first.end, "test_acc"));
  const Run other = train_lenet(data, "8");
  BOOST_TEST(json_field(other.end, "params_digest") != digest);
}
