#include "core/checkpoint/checkpoint_file.h"

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/core/checkpoint/damaged_files.h"
#include "tests/core/checkpoint/sample_state.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::checkpoint;
using namespace alloy::checkpoint::test;
using alloy::test::TempDir;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_TEST_REQUIRE(out.good(), "cannot write " << path);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_file)

BOOST_AUTO_TEST_CASE(round_trip_keeps_every_field) {
  TempDir dir;
  const CheckpointState saved = sample_state(1234);
  const std::string path = dir.file("state.ckpt");
  write_checkpoint(path, saved);

  CheckpointHeader header;
  const CheckpointState loaded = read_checkpoint(path, &header);
  check_same_state(saved, loaded);
  BOOST_TEST(header.format_version == kFormatVersion);
  BOOST_TEST(header.payload_bytes + kHeaderBytes == std::filesystem::file_size(path));
  BOOST_TEST(read_bytes(path).substr(0, 8) == "ALLOYCKP");
  // Nothing but the checkpoint is left behind.
  BOOST_TEST(names_in(dir.path()) == std::vector<std::string>{"state.ckpt"});
}

BOOST_AUTO_TEST_CASE(a_second_write_replaces_the_first) {
  TempDir dir;
  const std::string path = dir.file("state.ckpt");
  write_checkpoint(path, sample_state(1));
  write_checkpoint(path, sample_state(2));
  check_same_state(read_checkpoint(path), sample_state(2));
}

BOOST_AUTO_TEST_CASE(named_tensors_copy_host_tensors_both_ways) {
  const Tensor source = Tensor::from_floats({2, 2}, {1.5f, -2.0f, 3.25f, 0.0f});
  const NamedTensor saved = make_named_tensor("fc.weight", source);
  BOOST_TEST(saved.name == "fc.weight");
  BOOST_TEST(saved.shape == Shape({2, 2}));
  BOOST_TEST(saved.data.size() == 16u);

  Tensor target = Tensor::zeros({2, 2}, DType::f32);
  restore_tensor(saved, "fc.weight", target);
  BOOST_TEST(target.to_floats() == source.to_floats());

  Tensor wrong_shape = Tensor::zeros({4}, DType::f32);
  const std::string shape_error =
      error_of([&] { restore_tensor(saved, "fc.weight", wrong_shape); });
  BOOST_TEST(contains(shape_error, "fc.weight is f32[2, 2], but this run's is f32[4]"),
             shape_error);
  Tensor wrong_dtype = Tensor::zeros({2, 2}, DType::f16);
  const std::string dtype_error =
      error_of([&] { restore_tensor(saved, "fc.weight", wrong_dtype); });
  BOOST_TEST(contains(dtype_error, "this run's is f16[2, 2]"), dtype_error);
  const std::string name_error = error_of([&] { restore_tensor(saved, "fc.bias", target); });
  BOOST_TEST(contains(name_error, "fc.weight cannot restore fc.bias"), name_error);
}

BOOST_AUTO_TEST_CASE(each_damaged_file_names_itself_and_its_problem) {
  TempDir dir;
  for (const DamagedFile& damaged : damaged_files()) {
    BOOST_TEST_CONTEXT("file " << damaged.name) {
      BOOST_TEST(damaged.image.size() < 4096u);
      const std::string path = dir.file(damaged.name);
      write_bytes(path, damaged.image);
      const std::string message = error_of([&] { read_checkpoint(path); });
      BOOST_TEST(contains(message, "checkpoint " + path + ": "), message);
      BOOST_TEST(contains(message, damaged.reason), message << " lacks: " << damaged.reason);
      BOOST_TEST(message.find('\n') == std::string::npos, message);
      // The in-memory reader (the fuzz harness's) gives the same verdict.
      const std::string decoded = error_of([&] { decode_checkpoint(damaged.image, path); });
      BOOST_TEST(decoded == message);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_undamaged_marker_file_loads) {
  const CheckpointState state = decode_checkpoint(valid_image(), "valid");
  check_same_state(state, marker_state());
}

BOOST_AUTO_TEST_CASE(a_missing_file_or_a_directory_is_an_error) {
  TempDir dir;
  const std::string missing = dir.file("nope.ckpt");
  const std::string message = error_of([&] { read_checkpoint(missing); });
  BOOST_TEST(message == "checkpoint " + missing + ": no such file");
  const std::string directory = error_of([&] { read_checkpoint(dir.path()); });
  BOOST_TEST(directory == "checkpoint " + dir.path() + ": not a regular file");
}

BOOST_AUTO_TEST_CASE(a_failed_write_names_the_path_and_leaves_no_temporary) {
  TempDir dir;
  const std::string into_missing = dir.file("missing/step.ckpt");
  const std::string message = error_of([&] { write_checkpoint(into_missing, sample_state(1)); });
  BOOST_TEST(contains(message, into_missing + ".tmp-"), message);
  BOOST_TEST(contains(message, "No such file or directory"), message);

  // Renaming over a directory fails after the temporary was written: it must be removed.
  std::filesystem::create_directory(dir.file("occupied.ckpt"));
  const std::string over_dir =
      error_of([&] { write_checkpoint(dir.file("occupied.ckpt"), sample_state(1)); });
  BOOST_TEST(contains(over_dir, "cannot rename"), over_dir);
  BOOST_TEST(names_in(dir.path()) == std::vector<std::string>{"occupied.ckpt"});
}

BOOST_AUTO_TEST_CASE(paths_and_listing_follow_the_step) {
  TempDir dir;
  BOOST_TEST(checkpoint_path(dir.path(), 42) == dir.path() + "/step-00000042.ckpt");
  BOOST_TEST(checkpoint_path(dir.path(), 123456789012) == dir.path() + "/step-123456789012.ckpt");
  for (const std::int64_t step : {300, 5, 40}) {
    write_checkpoint(checkpoint_path(dir.path(), step), sample_state(step));
  }
  // Neither an interrupted save's temporary nor unrelated files are checkpoints.
  write_bytes(dir.file("step-00000900.ckpt.tmp-12345"), "partial");
  write_bytes(dir.file("notes.txt"), "keep me");
  write_bytes(dir.file("step-abc.ckpt"), "not a step");
  std::filesystem::create_directory(dir.file("sub"));

  const std::vector<CheckpointEntry> entries = list_checkpoints(dir.path());
  BOOST_TEST_REQUIRE(entries.size() == 3u);
  BOOST_TEST(entries[0].step == 5);
  BOOST_TEST(entries[1].step == 40);
  BOOST_TEST(entries[2].step == 300);
  BOOST_TEST(entries[2].path == checkpoint_path(dir.path(), 300));
}

BOOST_AUTO_TEST_CASE(pruning_keeps_exactly_the_newest_k) {
  TempDir dir;
  for (std::int64_t step = 10; step <= 70; step += 10) {
    write_checkpoint(checkpoint_path(dir.path(), step), sample_state(step));
  }
  write_bytes(dir.file("notes.txt"), "keep me");
  write_bytes(dir.file("step-00000001.ckpt.tmp-99"), "partial");

  const std::vector<std::string> removed = prune_checkpoints(dir.path(), 3);
  BOOST_TEST(removed.size() == 4u);
  std::vector<std::int64_t> kept;
  for (const auto& entry : list_checkpoints(dir.path()))
    kept.push_back(entry.step);
  BOOST_TEST(kept == std::vector<std::int64_t>({50, 60, 70}));
  BOOST_TEST(std::filesystem::exists(dir.file("notes.txt")));
  BOOST_TEST(std::filesystem::exists(dir.file("step-00000001.ckpt.tmp-99")));

  BOOST_TEST(prune_checkpoints(dir.path(), 5).empty());
  BOOST_TEST(list_checkpoints(dir.path()).size() == 3u);
  prune_checkpoints(dir.path(), 1);
  BOOST_TEST(list_checkpoints(dir.path()).size() == 1u);
  BOOST_TEST(list_checkpoints(dir.path())[0].step == 70);
  const std::string message = error_of([&] { prune_checkpoints(dir.path(), 0); });
  BOOST_TEST(contains(message, "at least 1"), message);
}

BOOST_AUTO_TEST_CASE(the_latest_valid_checkpoint_skips_damaged_newer_ones) {
  TempDir dir;
  for (const std::int64_t step : {100, 200, 300}) {
    write_checkpoint(checkpoint_path(dir.path(), step), sample_state(step));
  }
  const std::string newest = checkpoint_path(dir.path(), 300);
  std::string bytes = read_bytes(newest);
  bytes[bytes.size() / 2] ^= 0x40;
  write_bytes(newest, bytes);
  write_bytes(checkpoint_path(dir.path(), 400), "");

  std::vector<std::string> warnings;
  const LoadedCheckpoint found =
      find_latest_valid(dir.path(), [&](const std::string& line) { warnings.push_back(line); });
  BOOST_TEST(found.path == checkpoint_path(dir.path(), 200));
  check_same_state(found.state, sample_state(200));
  BOOST_TEST_REQUIRE(warnings.size() == 2u);
  BOOST_TEST(contains(warnings[0], checkpoint_path(dir.path(), 400) + ": empty file"), warnings[0]);
  BOOST_TEST(contains(warnings[1], newest + ": corrupt: CRC mismatch"), warnings[1]);
  BOOST_TEST(contains(warnings[1], "skipping"), warnings[1]);
}

BOOST_AUTO_TEST_CASE(a_directory_without_valid_checkpoints_is_an_error) {
  TempDir dir;
  write_bytes(dir.file("notes.txt"), "no checkpoints here");
  BOOST_TEST(error_of([&] { find_latest_valid(dir.path(), nullptr); }) ==
             "no checkpoints in " + dir.path());

  const std::string missing = dir.file("absent");
  BOOST_TEST(error_of([&] { find_latest_valid(missing, nullptr); }) ==
             "checkpoint directory " + missing + " does not exist");
  BOOST_TEST(error_of([&] { list_checkpoints(dir.file("notes.txt")); }) ==
             "checkpoint directory " + dir.file("notes.txt") + " is not a directory");

  write_bytes(checkpoint_path(dir.path(), 1), "garbage");
  int warned = 0;
  const std::string all_damaged =
      error_of([&] { find_latest_valid(dir.path(), [&](const std::string&) { ++warned; }); });
  BOOST_TEST(all_damaged == "no valid checkpoints in " + dir.path() + ": all 1 are damaged");
  BOOST_TEST(warned == 1);
}

BOOST_AUTO_TEST_CASE(compatibility_names_the_model_and_the_tensor) {
  const CheckpointState state = sample_state(7);
  const std::vector<TensorSpec> parameters = {
      {"fc.weight", {24, 4}}, {"fc.bias", {10}}, {"scalar", {}}, {"empty", {0, 3}}};
  const std::vector<TensorSpec> buffers = {{"bn.running_mean", {6}}, {"bn.num_batches", {1}}};
  check_compatible("a.ckpt", state, "lenet", parameters, buffers);

  BOOST_TEST(error_of([&] {
               check_compatible("a.ckpt", state, "resnet18", parameters, buffers);
             }) == "checkpoint a.ckpt holds model lenet, but this run builds resnet18");

  std::vector<TensorSpec> reshaped = parameters;
  reshaped[0].shape = {4, 24};
  BOOST_TEST(error_of([&] { check_compatible("a.ckpt", state, "lenet", reshaped, buffers); }) ==
             "checkpoint a.ckpt: parameter fc.weight has shape [24, 4], but this run's lenet "
             "needs [4, 24]");

  std::vector<TensorSpec> more = parameters;
  more.push_back({"fc2.weight", {3}});
  BOOST_TEST(error_of([&] { check_compatible("a.ckpt", state, "lenet", more, buffers); }) ==
             "checkpoint a.ckpt has no parameter fc2.weight, which this run's lenet needs");

  const std::vector<TensorSpec> fewer_buffers = {buffers[0]};
  BOOST_TEST(
      error_of([&] { check_compatible("a.ckpt", state, "lenet", parameters, fewer_buffers); }) ==
      "checkpoint a.ckpt holds buffer bn.num_batches, which this run's lenet does not have");
}

BOOST_AUTO_TEST_SUITE_END()
