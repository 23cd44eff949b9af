// A seeded synthetic dataset of any image size, 1 or 3 channels (MNIST's geometry by default):
// each class is a fixed random template plus noise and a small random shift, so models learn it
// quickly. For tests, benchmarks and machines without the data.
#pragma once

#include <cstdint>
#include <string>

#include "core/data/dataset.h"

namespace alloy::data {

// The class templates depend only on `seed`, so a train and a test set made with one seed
// share them; the examples depend on `seed` and `name` as well, so those sets differ.
// The same arguments always give the same bytes.
Dataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed, const std::string& name,
                               int classes = 10, int rows = 28, int cols = 28, int channels = 1);

}  // namespace alloy::data
