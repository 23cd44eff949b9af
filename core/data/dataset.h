// In-memory image classification datasets: u8 images [N, C, H, W] and i32 labels [N], both in
// host memory (category data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace alloy::data {

// Images made on demand, example by example, in the loader's threads (files decoded and
// augmented: core/data/image_folder.h), where a dataset does not hold them in memory.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  // Example `index`'s image as it is in `epoch`, u8 [channels(), size(), size()], into
  // `pixels`. A function of (index, epoch) alone; called from several threads at once.
  virtual void load(std::int64_t index, std::int64_t epoch, std::uint8_t* pixels) const = 0;
  virtual int channels() const = 0;
  virtual int size() const = 0;
};

struct Dataset {
  std::string name;  // "fashion-mnist/train", "synthetic/test", ...
  Tensor images;     // u8 [N, C, H, W]; undefined when `source` makes them
  Tensor labels;     // i32 [N]
  int classes = 10;
  std::shared_ptr<const ExampleSource> source;

  // [C, H, W] of one example.
  Shape example_shape() const {
    if (source) return {source->channels(), source->size(), source->size()};
    return {images.dim(1), images.dim(2), images.dim(3)};
  }

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

// "fashion-mnist" and "mnist" read the IDX files train-* and t10k-* from `directory`; "cifar10"
// the CIFAR-10 binary batches there (core/data/cifar10.h);
// "synthetic" makes a seeded, learnable dataset of `synthetic`'s shape without touching the
// disk. Errors name the file and the problem (missing directory or file, bad magic, truncated
// data, count mismatch); an unknown kind is a UsageError listing the choices.
DatasetPair load_datasets(const std::string& kind, const std::string& directory, std::uint64_t seed,
                          const SyntheticShape& synthetic = {});

}  // namespace alloy::data
