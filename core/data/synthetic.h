// A seeded synthetic dataset with MNIST geometry: each class is a fixed random template plus
// noise, so models learn it quickly. For tests, benchmarks and machines without the data.
#pragma once

#include <cstdint>

#include "core/data/dataset.h"

namespace alloy::data {

Dataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed, const std::string& name,
                               int classes = 10, int rows = 28, int cols = 28);

}  // namespace alloy::data
