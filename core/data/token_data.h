// Token streams for language models, and the windows a training step reads from them.
//
// Sources: a text file whose bytes are the tokens (nanoGPT's shakespeare_char: the vocabulary
// is the file's distinct bytes in increasing order, token i standing for the i-th of them; the
// first 1 - val_fraction of the file trains, the rest validates); llm.c's token files (a header
// of 256 int32: magic 20240520, version 1, the token count; then that many uint16 tokens); or
// random tokens. Every error names the file and what is wrong with it.
//
// Windows: row r of a step's batch starts at a position drawn by Philox from (seed, step,
// rank, r), uniform over the starts whose T + 1 tokens fit, so a step's batch depends on
// nothing else (resume, world size and thread count leave it unchanged). Inputs are the first T
// tokens, targets the T after the first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace alloy::data {

struct TokenSplit {
  std::string name;  // for messages: "FILE (train)", ...
  std::vector<std::uint16_t> tokens;
};

struct TokenCorpus {
  TokenSplit train, val;
  // Text corpora: the byte each token stands for (vocabulary.size() tokens); empty otherwise.
  std::string vocabulary;
  // The tokens' upper bound: the vocabulary's size, or the largest token + 1.
  std::int64_t vocab_size = 0;
};

// Throws Error naming the file when it cannot be read, is empty, or val_fraction leaves a
// split too short for one window of `block_size` + 1 tokens. val_fraction in (0, 1).
TokenCorpus load_text_corpus(const std::string& path, double val_fraction);

// One llm.c token file. Throws Error naming the file for a bad magic or version, a count the
// file does not hold (truncated), or no tokens.
TokenSplit load_token_file(const std::string& path);

// `tokens` random tokens in [0, vocab), a function of the seed (synthetic data).
TokenSplit random_tokens(const std::string& name, std::int64_t tokens, std::int64_t vocab,
                         std::uint64_t seed);

// Throws Error naming the split when a token is >= vocab, or when it holds fewer than
// block_size + 1 tokens.
void check_split(const TokenSplit& split, std::int64_t vocab, std::int64_t block_size);

// A batch of windows on the host: i32 [B, T] inputs and targets.
struct TokenBatch {
  Tensor inputs, targets;
};

// The start of row `row` of step `step`'s batch on `rank`: uniform in [0, size - block - 1].
std::int64_t window_start(std::uint64_t seed, std::int64_t step, std::int64_t rank,
                          std::int64_t row, std::int64_t split_size, std::int64_t block);

// rows x block windows at window_start(seed, step, rank, first_row + row_stride * i), i < rows
// (a data-parallel rank r of W holds the global batch's rows r + W i: first_row r, stride W).
TokenBatch random_windows(const TokenSplit& split, std::uint64_t seed, std::int64_t step,
                          std::int64_t rank, std::int64_t first_row, std::int64_t rows,
                          std::int64_t block, std::int64_t row_stride = 1);

// The split's consecutive windows for a whole pass: window w starts at w * block and predicts
// tokens w * block + 1 .. (w + 1) * block, the last one shorter, so every token but the first is
// a target exactly once. Batches of up to `rows` windows of equal length (the short last window
// in a batch of its own); call with batch = 0, 1, ... until it returns false.
bool sequential_windows(const TokenSplit& split, std::int64_t rows, std::int64_t block,
                        std::int64_t batch, TokenBatch& out);

}  // namespace alloy::data
