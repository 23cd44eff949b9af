// Token data: the text corpus's vocabulary and split, llm.c token files (good, bad magic,
// other version, truncated), the vocabulary check, Philox windows (in range, a function of
// (seed, step, rank, row) only, targets one token on), and the sequential pass over a split.
#include "core/data/token_data.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::data;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string token_file(std::int32_t magic, std::int32_t version, std::int32_t count,
                       const std::vector<std::uint16_t>& tokens) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

// Whether `what` throws an Error whose message contains `part`.
template <class F>
bool fails_with(const F& what, const std::string& part) {
  try {
    what();
  } catch (const Error& error) {
    return std::string(error.what()).find(part) != std::string::npos;
  }
  return false;
}

TokenSplit split_of(std::int64_t size) {
  TokenSplit split;
  split.name = "test";
  for (std::int64_t i = 0; i < size; ++i)
    split.tokens.push_back(static_cast<std::uint16_t>(i % 1000));
  return split;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(token_data)

BOOST_AUTO_TEST_CASE(text_tokens_are_the_sorted_distinct_bytes_and_the_end_validates) {
  test::TempDir dir;
  const std::string path = dir.file("text.txt");
  write_bytes(path, "hello world\nhold");  // 16 bytes
  const TokenCorpus corpus = load_text_corpus(path, 0.25);
  BOOST_TEST(corpus.vocabulary == std::string("\n dehlorw"));
  BOOST_TEST(corpus.vocab_size == 9);
  BOOST_TEST(corpus.train.tokens.size() == 12u);
  BOOST_TEST(corpus.val.tokens.size() == 4u);
  // "h" is the vocabulary's 5th byte (index 4), "o" its 7th (index 6).
  BOOST_TEST(corpus.train.tokens[0] == 4);
  BOOST_TEST(corpus.val.tokens[1] == 6);
  BOOST_TEST(fails_with([&] { load_text_corpus(dir.file("missing.txt"), 0.1); }, "missing.txt"));
  write_bytes(dir.file("empty.txt"), "");
  BOOST_TEST(fails_with([&] { load_text_corpus(dir.file("empty.txt"), 0.1); }, "empty"));
}

BOOST_AUTO_TEST_CASE(token_files_load_and_bad_ones_name_the_file_and_the_fault) {
  test::TempDir dir;
  const std::vector<std::uint16_t> tokens = {5, 0, 65535, 7};
  write_bytes(dir.file("good.bin"), token_file(20240520, 1, 4, tokens));
  BOOST_TEST(load_token_file(dir.file("good.bin")).tokens == tokens);
  write_bytes(dir.file("magic.bin"), token_file(20240521, 1, 4, tokens));
  BOOST_TEST(fails_with([&] { load_token_file(dir.file("magic.bin")); }, "magic.bin: bad magic"));
  write_bytes(dir.file("version.bin"), token_file(20240520, 2, 4, tokens));
  BOOST_TEST(fails_with([&] { load_token_file(dir.file("version.bin")); }, "version 2"));
  write_bytes(dir.file("short.bin"), token_file(20240520, 1, 5, tokens));
  BOOST_TEST(fails_with([&] { load_token_file(dir.file("short.bin")); }, "short.bin: truncated"));
  write_bytes(dir.file("header.bin"), std::string(100, '\0'));
  BOOST_TEST(fails_with([&] { load_token_file(dir.file("header.bin")); }, "truncated"));
  // Tokens at or above the vocabulary are caught before training.
  const TokenSplit split = load_token_file(dir.file("good.bin"));
  BOOST_TEST(fails_with([&] { check_split(split, 50257, 2); }, "token 65535 at position 2"));
  BOOST_TEST(fails_with([&] { check_split(split, 65536, 4); }, "fewer than one window"));
  check_split(split, 65536, 3);
}

BOOST_AUTO_TEST_CASE(windows_are_a_function_of_seed_step_rank_and_row) {
  const TokenSplit split = split_of(500);
  const std::int64_t block = 16;
  std::set<std::int64_t> starts;
  for (std::int64_t row = 0; row < 200; ++row) {
    const std::int64_t start = window_start(7, 3, 0, row, 500, block);
    BOOST_TEST((start >= 0 && start <= 500 - block - 1));
    starts.insert(start);
  }
  BOOST_TEST(starts.size() > 150u);  // spread over the split, not one place
  BOOST_TEST(window_start(7, 3, 0, 5, 500, block) == window_start(7, 3, 0, 5, 500, block));
  BOOST_TEST(window_start(7, 3, 0, 5, 500, block) != window_start(7, 4, 0, 5, 500, block));
  BOOST_TEST(window_start(7, 3, 0, 5, 500, block) != window_start(8, 3, 0, 5, 500, block));
  BOOST_TEST(window_start(7, 3, 0, 5, 500, block) != window_start(7, 3, 1, 5, 500, block));
  // A batch's rows are the windows of their global row, however the batch is split.
  const TokenBatch whole = random_windows(split, 7, 3, 0, 0, 6, block);
  const TokenBatch tail = random_windows(split, 7, 3, 0, 4, 2, block);
  const std::int32_t* w = whole.inputs.data<std::int32_t>();
  const std::int32_t* t = tail.inputs.data<std::int32_t>();
  BOOST_TEST(std::vector<std::int32_t>(w + 4 * block, w + 6 * block) ==
             std::vector<std::int32_t>(t, t + 2 * block));
  // Targets are the inputs one token on.
  const std::int32_t* targets = whole.targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < 6; ++r)
    for (std::int64_t i = 0; i + 1 < block; ++i)
      BOOST_TEST(targets[r * block + i] == w[r * block + i + 1]);
}

BOOST_AUTO_TEST_CASE(the_sequential_pass_predicts_every_token_but_the_first_once) {
  const TokenSplit split = split_of(103);
  std::vector<int> predicted(103, 0);
  TokenBatch batch;
  std::int64_t batches = 0;
  for (std::int64_t b = 0; sequential_windows(split, 4, 10, b, batch); ++b) {
    ++batches;
    const std::int64_t rows = batch.targets.dim(0), block = batch.targets.dim(1);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < block; ++i) {
        const std::int32_t target = batch.targets.data<std::int32_t>()[r * block + i];
        BOOST_TEST(batch.inputs.data<std::int32_t>()[r * block + i] == target - 1);
        ++predicted[static_cast<std::size_t>(target)];
      }
  }
  BOOST_TEST(batches == 4);  // 10 windows of 10 in batches of 4, 4, 2; then one of 2
  BOOST_TEST(predicted[0] == 0);
  for (std::size_t i = 1; i < predicted.size(); ++i)
    BOOST_TEST(predicted[i] == 1, "token " << i);
}

BOOST_AUTO_TEST_SUITE_END()
