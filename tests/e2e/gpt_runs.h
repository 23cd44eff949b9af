// Helpers of the GPT end-to-end tests: a small generated text and the flags of a tiny GPT that
// trains on it in milliseconds a step.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "tests/support/process.h"

namespace alloy::test {

// Words from a small lexicon in random order: something a model can learn in a few steps.
inline std::string generated_text(std::size_t bytes) {
  const std::vector<std::string> words = {"the ",  "king ",    "and ",   "queen ",
                                          "of ",   "hearts\n", "shall ", "speak ",
                                          "now, ", "my ",      "lord. "};
  Generator generator(11);
  std::string text;
  while (text.size() < bytes)
    text += words[generator.below(words.size())];
  return text;
}

struct Corpus {
  TempDir dir;
  std::string path = dir.file("text.txt");
  Corpus() { std::ofstream(path) << generated_text(20000); }
};

inline std::vector<std::string> tiny_gpt(const std::string& data_file,
                                         const std::string& layers = "2",
                                         const std::string& heads = "2") {
  return {"train",   "--model",       "gpt",    "--dataset",      "text", "--data-file",
          data_file, "--n-layer",     layers,   "--n-head",       heads,  "--n-embd",
          "16",      "--block-size",  "16",     "--batch-size",   "4",    "--optimizer",
          "adamw",   "--lr",          "3e-3",   "--weight-decay", "0.1",  "--threads",
          "2",       "--lr-schedule", "cosine", "--warmup-steps", "2"};
}

inline std::vector<std::string> with(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace alloy::test
