#include "core/checkpoint/sharded_checkpoint.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/random.h"
#include "tests/core/checkpoint/sample_state.h"
#include "tests/core/checkpoint/sharded_files.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::checkpoint;
using namespace alloy::checkpoint::test;
using alloy::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Parameters of 20, 2, 1 and 0 elements (N = 23), each with AdamW's two state kinds, and a
// weight average that stays in the shared state.
CheckpointState adam_state(std::int64_t step) {
  CheckpointState state = sample_state(step);
  Generator random(static_cast<std::uint64_t>(step) + 5);
  state.parameters = {sample_tensor("a.weight", DType::f32, {5, 4}, random),
                      sample_tensor("a.bias", DType::f32, {2}, random),
                      sample_tensor("scalar", DType::f32, {}, random),
                      sample_tensor("empty", DType::f32, {0, 3}, random)};
  state.optimizer_state.clear();
  for (const NamedTensor& p : state.parameters) {
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      state.optimizer_state.push_back(
          sample_tensor(p.name + "." + kind, DType::f32, p.shape, random));
    }
  }
  state.optimizer_state.push_back(sample_tensor("ema.a.weight", DType::f32, {5, 4}, random));
  return state;
}

// Kind `kind` of `state` as one flat array of floats (the reference for range reads).
std::vector<float> flat_of(const CheckpointState& state, const std::string& kind) {
  std::vector<float> flat;
  for (const NamedTensor& p : state.parameters) {
    const NamedTensor* tensor =
        kind == kParamKind ? &p : find_tensor(state.optimizer_state, p.name + "." + kind);
    BOOST_TEST_REQUIRE(tensor != nullptr);
    const std::size_t first = flat.size();
    flat.resize(first + static_cast<std::size_t>(tensor->numel()));
    if (tensor->numel() > 0) std::memcpy(&flat[first], tensor->data.data(), tensor->data.size());
  }
  return flat;
}

std::vector<float> as_floats(const std::vector<unsigned char>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(&byte, 1);
  BOOST_TEST_REQUIRE(file.good(), "cannot damage " << path);
}

// Every range [b, e) of every kind read through the manifest equals the plain state's.
void check_every_range(const Manifest& m, const std::string& step_dir,
                       const CheckpointState& state) {
  for (const FlatKind& kind : m.kinds) {
    const std::vector<float> flat = flat_of(state, kind.name);
    BOOST_TEST_REQUIRE(static_cast<std::int64_t>(flat.size()) == m.total);
    for (std::int64_t b = 0; b <= m.total; ++b) {
      for (std::int64_t e = b; e <= m.total; ++e) {
        const std::vector<float> got = as_floats(read_flat_range(m, step_dir, kind.name, b, e));
        const std::vector<float> want(flat.begin() + b, flat.begin() + e);
        BOOST_TEST((got == want), kind.name << " [" << b << ", " << e << ") differs");
        const std::vector<float> reverse =
            as_floats(flat_range_of_state(state, m.parameters, kind.name, b, e));
        BOOST_TEST((reverse == want), kind.name << " [" << b << ", " << e << ") of the state");
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_checkpoint)

BOOST_AUTO_TEST_CASE(manifest_round_trip_keeps_every_field) {
  TempDir dir;
  const std::string step_dir = sharded_checkpoint_dir(dir.path(), 42);
  BOOST_TEST(step_dir == dir.file("step-00000042"));
  const Manifest written = write_sharded_state(step_dir, adam_state(42), 4, 3);
  const Manifest read = read_manifest(step_dir);
  BOOST_TEST(read.step == 42);
  BOOST_TEST(read.world_size == 4);
  BOOST_TEST(read.total == 23);
  BOOST_TEST(read.chunk_elements == 3);
  BOOST_TEST_REQUIRE(read.kinds.size() == 3u);
  BOOST_TEST(read.kinds[1].name == "exp_avg");
  BOOST_TEST_REQUIRE(read.parameters.size() == 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(read.parameters[i].name == written.parameters[i].name);
    BOOST_TEST(read.parameters[i].shape == written.parameters[i].shape);
    BOOST_TEST(read.parameters[i].offset == written.parameters[i].offset);
    BOOST_TEST(read.parameters[i].numel == written.parameters[i].numel);
  }
  BOOST_TEST(read.parameters[2].shape.empty());  // the scalar
  BOOST_TEST_REQUIRE(read.shards.size() == 4u);
  const std::vector<std::int64_t> ends{6, 12, 18, 23};
  for (std::size_t r = 0; r < 4; ++r) {
    const ShardEntry& a = read.shards[r];
    const ShardEntry& b = written.shards[r];
    BOOST_TEST(a.end == ends[r]);
    BOOST_TEST(a.file == shard_file_name(static_cast<std::int64_t>(r)));
    BOOST_TEST(a.bytes == fs::file_size(fs::path(step_dir) / a.file));
    BOOST_TEST(a.crc == b.crc);
    BOOST_TEST(a.state_crc == b.state_crc);
    BOOST_TEST_REQUIRE(a.sections.size() == 3u);
    BOOST_TEST(a.sections[2].crcs == b.sections[2].crcs);
    BOOST_TEST(a.sections[2].crcs.size() == 2u);  // 6, 6, 6 and 5 elements in chunks of 3
  }
  // The manifest path itself names the checkpoint too.
  BOOST_TEST(read_manifest(step_dir + "/manifest").total == 23);
  BOOST_TEST(is_sharded_checkpoint(step_dir));
  BOOST_TEST(is_sharded_checkpoint(step_dir + "/manifest"));
  verify_sharded_checkpoint(read, step_dir);
}

BOOST_AUTO_TEST_CASE(every_range_reads_across_shard_and_chunk_boundaries) {
  // Shards [0,6) [6,12) [12,18) [18,23) in chunks of 4: [5, 13) spans 3 shards.
  TempDir dir;
  const CheckpointState state = adam_state(7);
  const Manifest m = write_sharded_state(dir.file("s"), state, 4, 4);
  check_every_range(m, dir.file("s"), state);
  const std::vector<float> flat = flat_of(state, "exp_avg_sq");
  BOOST_TEST((as_floats(read_flat_range(m, dir.file("s"), "exp_avg_sq", 5, 13)) ==
              std::vector<float>(flat.begin() + 5, flat.begin() + 13)));
}

BOOST_AUTO_TEST_CASE(more_ranks_than_elements_leave_empty_shards) {
  TempDir dir;
  CheckpointState state = adam_state(3);
  state.parameters.resize(2);  // 1 + 2 elements over 5 ranks: s = 1, ranks 3 and 4 empty
  state.parameters[0].shape = {1};
  state.parameters[0].data.resize(4);
  std::vector<NamedTensor> optimizer_state;
  for (const NamedTensor& p : state.parameters) {
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      NamedTensor t = *find_tensor(state.optimizer_state, p.name + "." + kind);
      t.shape = p.shape;
      t.data.resize(p.data.size());
      optimizer_state.push_back(t);
    }
  }
  state.optimizer_state = optimizer_state;
  state.world_size = 5;
  const Manifest m = write_sharded_state(dir.file("s"), state, 5, 2);  // N = 3 < W = 5
  BOOST_TEST(m.total == 3);
  BOOST_TEST(read_manifest(dir.file("s")).shards[4].begin == 3);
  BOOST_TEST(read_manifest(dir.file("s")).shards[4].end == 3);
  check_every_range(m, dir.file("s"), state);
  verify_sharded_checkpoint(m, dir.file("s"));
  check_same_state(state, gather_sharded_state(m, dir.file("s")));
}

BOOST_AUTO_TEST_CASE(gathering_gives_back_the_plain_state_and_the_directory_lists_it) {
  TempDir dir;
  CheckpointState state = adam_state(40);
  state.world_size = 3;  // as the run that saved it
  write_checkpoint(checkpoint_path(dir.path(), 30), adam_state(30));
  write_sharded_state(sharded_checkpoint_dir(dir.path(), 40), state, 3, 5);
  // An incomplete save: shards, no manifest.
  write_sharded_state(sharded_checkpoint_dir(dir.path(), 50), adam_state(50), 3);
  fs::remove(fs::path(sharded_checkpoint_dir(dir.path(), 50)) / kManifestName);

  const std::vector<CheckpointEntry> entries = list_checkpoints(dir.path());
  BOOST_TEST_REQUIRE(entries.size() == 2u);
  BOOST_TEST(!entries[0].sharded);
  BOOST_TEST(entries[1].sharded);
  BOOST_TEST(entries[1].step == 40);
  BOOST_TEST(list_incomplete_sharded(dir.path()).size() == 1u);

  const LoadedCheckpoint latest = find_latest_valid(dir.path(), nullptr);
  BOOST_TEST(latest.path == sharded_checkpoint_dir(dir.path(), 40));
  check_same_state(state, latest.state);
  check_same_state(state, read_any_checkpoint(latest.path + "/manifest"));

  BOOST_TEST(prune_checkpoints(dir.path(), 1) ==
             std::vector<std::string>{checkpoint_path(dir.path(), 30)});
  BOOST_TEST(prune_checkpoints(dir.path(), 1).empty());
  remove_checkpoint(list_checkpoints(dir.path())[0]);
  BOOST_TEST(!fs::exists(sharded_checkpoint_dir(dir.path(), 40)));
}

BOOST_AUTO_TEST_CASE(a_damaged_chunk_fails_the_reads_that_touch_it_and_names_the_shard) {
  TempDir dir;
  const std::string step_dir = sharded_checkpoint_dir(dir.path(), 9);
  const Manifest m = write_sharded_state(step_dir, adam_state(9), 4, 2);
  // Rank 1 holds [6, 12): its exp_avg element 9 is in chunk 1 ([8, 10)).
  const std::string shard = step_dir + "/rank-00001.ckpt";
  flip_byte(shard, m.shards[1].sections[1].offset + 3 * sizeof(float) + 1);
  std::string message = error_of([&] { read_flat_range(m, step_dir, "exp_avg", 0, 23); });
  BOOST_TEST(contains(message, shard), message);
  BOOST_TEST(contains(message, "CRC mismatch in exp_avg chunk 1"), message);
  // Ranges outside the damaged chunk still read, and other kinds are untouched.
  BOOST_TEST(read_flat_range(m, step_dir, "exp_avg", 0, 8).size() == 8 * sizeof(float));
  BOOST_TEST(read_flat_range(m, step_dir, "exp_avg", 10, 23).size() == 13 * sizeof(float));
  BOOST_TEST(read_flat_range(m, step_dir, "param", 0, 23).size() == 23 * sizeof(float));
  const std::string verified = error_of([&] { verify_sharded_checkpoint(m, step_dir); });
  BOOST_TEST(contains(verified, shard + ": corrupt: CRC mismatch"), verified);
  // Resuming from the directory reads every range: the damaged checkpoint is skipped.
  message = error_of([&] { find_latest_valid(dir.path(), nullptr); });
  BOOST_TEST(contains(message, "all 1 are damaged"), message);
}

BOOST_AUTO_TEST_CASE(a_truncated_or_missing_shard_is_an_error_naming_it) {
  TempDir dir;
  const Manifest m = write_sharded_state(dir.file("s"), adam_state(9), 3);
  const std::string shard = dir.file("s/rank-00002.ckpt");
  fs::resize_file(shard, m.shards[2].bytes - 5);
  std::string message = error_of([&] { read_flat_range(m, dir.file("s"), "param", 20, 21); });
  BOOST_TEST(contains(message, shard + ": truncated: "), message);
  message =
      error_of([&] { verify_sharded_checkpoint(read_manifest(dir.file("s")), dir.file("s")); });
  BOOST_TEST(contains(message, shard + ": truncated: "), message);
  fs::remove(shard);
  message = error_of([&] { gather_sharded_state(m, dir.file("s")); });
  BOOST_TEST(contains(message, shard + ": missing shard of rank 2"), message);
  // Rank 0's shard alone serves a range inside it.
  BOOST_TEST(read_flat_range(m, dir.file("s"), "param", 0, 8).size() == 8 * sizeof(float));
}

BOOST_AUTO_TEST_CASE(a_missing_or_damaged_manifest_is_no_checkpoint) {
  TempDir dir;
  const std::string step_dir = sharded_checkpoint_dir(dir.path(), 5);
  write_sharded_state(step_dir, adam_state(5), 2);
  const std::string manifest = step_dir + "/manifest";
  const std::string text = [&] {
    std::ifstream in(manifest, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  const auto rewrite = [&](const std::string& bytes) {
    std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
    out << bytes;
  };

  rewrite(text.substr(0, text.size() - 20));
  std::string message = error_of([&] { read_manifest(step_dir); });
  BOOST_TEST(contains(message, manifest + ": truncated manifest"), message);

  std::string flipped = text;
  flipped[text.find("total 23") + 6] = '4';
  rewrite(flipped);
  message = error_of([&] { read_manifest(step_dir); });
  BOOST_TEST(contains(message, manifest + ": corrupt manifest: CRC mismatch"), message);

  fs::remove(manifest);
  message = error_of([&] { read_manifest(step_dir); });
  BOOST_TEST(contains(message, manifest + ": no manifest"), message);
  BOOST_TEST(!is_sharded_checkpoint(step_dir));
  BOOST_TEST(list_checkpoints(dir.path()).empty());
  message = error_of([&] { find_latest_valid(dir.path(), nullptr); });
  BOOST_TEST(contains(message, "no checkpoints in " + dir.path()), message);
}

BOOST_AUTO_TEST_CASE(an_inconsistent_manifest_is_refused_when_written_and_read) {
  TempDir dir;
  Manifest m = write_sharded_state(dir.file("s"), adam_state(5), 3);
  Manifest gap = m;
  gap.shards[1].begin += 1;  // [0,8) [9,16) [16,23)
  std::string message = error_of([&] { check_manifest(gap, "M"); });
  BOOST_TEST(contains(message, "checkpoint M: corrupt manifest: shard 1 holds [9, 16)"), message);
  message = error_of([&] { write_manifest(dir.file("s"), gap); });
  BOOST_TEST(contains(message, "shard 1 holds [9, 16)"), message);
  Manifest missing = m;
  missing.shards.pop_back();
  message = error_of([&] { check_manifest(missing, "M"); });
  BOOST_TEST(contains(message, "2 shards for world size 3"), message);
  Manifest table = m;
  table.parameters[1].offset = 21;
  message = error_of([&] { check_manifest(table, "M"); });
  BOOST_TEST(contains(message, "parameter a.bias[2] at offset 21"), message);
  Manifest chunks = m;
  chunks.shards[0].sections[0].crcs.pop_back();
  message = error_of([&] { check_manifest(chunks, "M"); });
  BOOST_TEST(contains(message, "shard 0's section 0 is param"), message);
  // The files on disk still read: nothing above was written.
  verify_sharded_checkpoint(read_manifest(dir.file("s")), dir.file("s"));
}

BOOST_AUTO_TEST_CASE(crafted_manifests_with_a_valid_crc_are_corrupt_not_crashes) {
  TempDir dir;
  const std::string step_dir = dir.file("s");
  write_sharded_state(step_dir, adam_state(5), 2);
  const std::string manifest = step_dir + "/manifest";
  std::ifstream in(manifest, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string body = text.substr(0, text.rfind("crc "));
  // `body` with `from` replaced by `to`, and a CRC line that matches it.
  const auto craft = [&](const std::string& from, const std::string& to) {
    std::string crafted = body;
    const std::size_t at = crafted.find(from);
    BOOST_TEST_REQUIRE(at != std::string::npos, from);
    crafted.replace(at, from.size(), to);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32_of(crafted));
    std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
    out << crafted << "crc " << crc << "\n";
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"total 23", "total 99999999999999999999", "is not a number"},
      {"total 23", "total 281474976710657", "corrupt manifest: step 5"},
      {"a.weight f32 5,4", "a.weight f32 4294967296,4294967296", "impossible shape"},
      {"kind param f32", "kind param f99", "unknown dtype 'f99'"},
      {"step 5", "steps 5", "unexpected 'steps'"},
      {"world_size 2", "world_size 2 2", "'world_size' has 2 fields, not 1"},
      {"alloy-sharded-checkpoint 1", "alloy-sharded-checkpoint 9",
       "newer Alloy: manifest version 9"},
      {"shard 1 12", "shard 1 11", "shard 1 holds [11, 23)"},
      {"section 1 param 24 ", "section 1 param 28 ", "shard 1's section 0 is param at byte 28"},
      {"shard 0 ", "shard 7 ", "a section of rank 0 before its shard line"},
  };
  for (const auto& [from, to, reason] : cases) {
    craft(from, to);
    const std::string message = error_of([&] { read_manifest(step_dir); });
    BOOST_TEST(contains(message, manifest + ": "), message);
    BOOST_TEST(contains(message, reason), to << ": " << message);
  }
}

BOOST_AUTO_TEST_SUITE_END()
