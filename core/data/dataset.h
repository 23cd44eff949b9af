// In-memory image classification datasets: u8 images [N, C, H, W] and i32 labels [N], both in
// host memory (category data).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace alloy::data {

struct Dataset {
  std::string name;  // "fashion-mnist/train", "synthetic/test", ...
  Tensor images;     // u8 [N, C, H, W]
  Tensor labels;     // i32 [N]
  int classes = 10;

  std::int64_t size() const { return labels.defined() ? labels.numel() : 0; }
};

struct DatasetPair {
  Dataset train;
  Dataset test;
};

// Sizes of the "synthetic" kind: a tenth of MNIST's 60000/10000 keeps tests and smoke runs
// fast while one epoch of LeNet still learns it well above chance.
constexpr std::int64_t kSyntheticTrainSize = 12800;
constexpr std::int64_t kSyntheticTestSize = 2560;

// Synthetic images of at least this size default to 3 channels (the RGB of ImageNet-sized
// data), smaller ones to 1 (MNIST's gray).
constexpr int kSyntheticRgbMinSize = 64;
inline int default_synthetic_channels(int image_size) {
  return image_size >= kSyntheticRgbMinSize ? 3 : 1;
}

// The shape of the "synthetic" kind: its test set has a fifth as many examples as its training
// set (at least one), as the defaults do.
struct SyntheticShape {
  std::int64_t train_size = kSyntheticTrainSize;
  int image_size = 28;
  int channels = 1;
  int classes = 10;
};

// "fashion-mnist" and "mnist" read the IDX files train-* and t10k-* from `directory`;
// "synthetic" makes a seeded, learnable dataset of `synthetic`'s shape without touching the
// disk. Errors name the file and the problem (missing directory or file, bad magic, truncated
// data, count mismatch); an unknown kind is a UsageError listing the choices.
DatasetPair load_datasets(const std::string& kind, const std::string& directory, std::uint64_t seed,
                          const SyntheticShape& synthetic = {});

}  // namespace alloy::data
