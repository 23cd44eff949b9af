#include "core/data/token_data.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/philox.h"
#include "core/random.h"

namespace alloy::data {

namespace {

constexpr std::int32_t kTokenMagic = 20240520;
constexpr std::int32_t kTokenVersion = 1;
constexpr int kHeaderInts = 256;
// Philox keys of the window draws: the seed's words, the high one offset so that these draws
// share no key with dropout's masks.
constexpr std::uint32_t kWindowKeyDomain = 0x57494E44u;  // "WIND"

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("cannot read ", path);
  return bytes;
}

Tensor tokens_tensor(std::int64_t rows, std::int64_t block) {
  return Tensor::empty({rows, block}, DType::i32, Device::cpu(), MemoryCategory::data);
}

void copy_window(const TokenSplit& split, std::int64_t start, std::int64_t block,
                 std::int32_t* inputs, std::int32_t* targets) {
  for (std::int64_t t = 0; t < block; ++t) {
    inputs[t] = split.tokens[static_cast<std::size_t>(start + t)];
    targets[t] = split.tokens[static_cast<std::size_t>(start + t + 1)];
  }
}

}  // namespace

TokenCorpus load_text_corpus(const std::string& path, double val_fraction) {
  ALLOY_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "--val-fraction must be in (0, 1), got ",
              val_fraction);
  const std::string bytes = read_file(path);
  ALLOY_CHECK(!bytes.empty(), path, " is empty");
  std::array<bool, 256> seen{};
  for (const char c : bytes)
    seen[static_cast<unsigned char>(c)] = true;
  TokenCorpus corpus;
  std::array<std::uint16_t, 256> token_of{};
  for (int b = 0; b < 256; ++b) {
    if (!seen[static_cast<std::size_t>(b)]) continue;
    token_of[static_cast<std::size_t>(b)] = static_cast<std::uint16_t>(corpus.vocabulary.size());
    corpus.vocabulary.push_back(static_cast<char>(b));
  }
  corpus.vocab_size = static_cast<std::int64_t>(corpus.vocabulary.size());
  const auto train_size =
      static_cast<std::size_t>(static_cast<double>(bytes.size()) * (1.0 - val_fraction));
  corpus.train.name = path + " (train)";
  corpus.val.name = path + " (validation)";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    TokenSplit& split = i < train_size ? corpus.train : corpus.val;
    split.tokens.push_back(token_of[static_cast<unsigned char>(bytes[i])]);
  }
  return corpus;
}

TokenSplit load_token_file(const std::string& path) {
  const std::string bytes = read_file(path);
  const std::size_t header_bytes = kHeaderInts * sizeof(std::int32_t);
  ALLOY_CHECK(bytes.size() >= header_bytes, path, ": truncated: ", bytes.size(),
              " bytes, shorter than the ", header_bytes, "-byte header of a token file");
  std::int32_t header[kHeaderInts];
  std::memcpy(header, bytes.data(), header_bytes);
  ALLOY_CHECK(header[0] == kTokenMagic, path, ": bad magic ", header[0],
              " (a token file starts with ", kTokenMagic, ")");
  ALLOY_CHECK(header[1] == kTokenVersion, path, ": token file version ", header[1],
              " is not the supported ", kTokenVersion);
  const std::int64_t count = header[2];
  ALLOY_CHECK(count > 0, path, ": the header counts ", count, " tokens");
  const std::size_t expected = header_bytes + static_cast<std::size_t>(count) * 2;
  ALLOY_CHECK(bytes.size() >= expected, path, ": truncated: the header counts ", count, " tokens (",
              expected, " bytes), the file has ", bytes.size(), " bytes");
  TokenSplit split;
  split.name = path;
  split.tokens.resize(static_cast<std::size_t>(count));
  std::memcpy(split.tokens.data(), bytes.data() + header_bytes,
              static_cast<std::size_t>(count) * 2);
  return split;
}

TokenSplit random_tokens(const std::string& name, std::int64_t tokens, std::int64_t vocab,
                         std::uint64_t seed) {
  ALLOY_CHECK(vocab > 0 && vocab <= 65536, "synthetic tokens need a vocabulary of 1 to 65536, got ",
              vocab);
  Generator generator(seed);
  TokenSplit split;
  split.name = name;
  split.tokens.resize(static_cast<std::size_t>(tokens));
  for (auto& token : split.tokens)
    token = static_cast<std::uint16_t>(generator.below(static_cast<std::uint64_t>(vocab)));
  return split;
}

void check_split(const TokenSplit& split, std::int64_t vocab, std::int64_t block_size) {
  ALLOY_CHECK(static_cast<std::int64_t>(split.tokens.size()) >= block_size + 1, split.name,
              " holds ", split.tokens.size(), " tokens, fewer than one window of ", block_size + 1,
              " (--block-size + 1)");
  for (std::size_t i = 0; i < split.tokens.size(); ++i) {
    ALLOY_CHECK(split.tokens[i] < vocab, split.name, ": token ", split.tokens[i], " at position ",
                i, " is outside the vocabulary of ", vocab, " (--vocab-size)");
  }
}

std::int64_t window_start(std::uint64_t seed, std::int64_t step, std::int64_t rank,
                          std::int64_t row, std::int64_t split_size, std::int64_t block) {
  const auto starts = static_cast<std::uint64_t>(split_size - block);
  const Philox4x32 counter{{static_cast<std::uint32_t>(step),
                            static_cast<std::uint32_t>(static_cast<std::uint64_t>(step) >> 32),
                            static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(row)}};
  const Philox4x32 bits = philox4x32_10(counter, static_cast<std::uint32_t>(seed),
                                        static_cast<std::uint32_t>(seed >> 32) ^ kWindowKeyDomain);
  const std::uint64_t draw = (static_cast<std::uint64_t>(bits.v[0]) << 32) | bits.v[1];
  return static_cast<std::int64_t>(draw % starts);  // bias below 2^-32 for any corpus
}

TokenBatch random_windows(const TokenSplit& split, std::uint64_t seed, std::int64_t step,
                          std::int64_t rank, std::int64_t first_row, std::int64_t rows,
                          std::int64_t block, std::int64_t row_stride) {
  const auto size = static_cast<std::int64_t>(split.tokens.size());
  ALLOY_CHECK(size >= block + 1, split.name, " holds ", size, " tokens, fewer than one window of ",
              block + 1);
  TokenBatch batch{tokens_tensor(rows, block), tokens_tensor(rows, block)};
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t start =
        window_start(seed, step, rank, first_row + row_stride * r, size, block);
    copy_window(split, start, block, batch.inputs.data<std::int32_t>() + r * block,
                batch.targets.data<std::int32_t>() + r * block);
  }
  return batch;
}

bool sequential_windows(const TokenSplit& split, std::int64_t rows, std::int64_t block,
                        std::int64_t batch, TokenBatch& out) {
  const auto predicted = static_cast<std::int64_t>(split.tokens.size()) - 1;
  const std::int64_t full = predicted / block;  // full-length windows
  const std::int64_t rest = predicted - full * block;
  const std::int64_t full_batches = (full + rows - 1) / rows;
  if (batch < full_batches) {
    const std::int64_t first = batch * rows;
    const std::int64_t count = std::min(rows, full - first);
    out = TokenBatch{tokens_tensor(count, block), tokens_tensor(count, block)};
    for (std::int64_t r = 0; r < count; ++r)
      copy_window(split, (first + r) * block, block, out.inputs.data<std::int32_t>() + r * block,
                  out.targets.data<std::int32_t>() + r * block);
    return true;
  }
  if (batch == full_batches && rest > 0) {
    out = TokenBatch{tokens_tensor(1, rest), tokens_tensor(1, rest)};
    copy_window(split, full * block, rest, out.inputs.data<std::int32_t>(),
                out.targets.data<std::int32_t>());
    return true;
  }
  return false;
}

}  // namespace alloy::data
