#include "core/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random.h"

namespace alloy::data {

namespace {

// Templates are coarse grids scaled up, so they keep their look under a shift of a few pixels
// the way handwritten strokes do; about half the cells are dark background.
constexpr int kTemplateGrid = 7;
constexpr int kMaxShift = 2;
constexpr double kNoiseAmplitude = 60.0;  // of 255; triangular noise in +-amplitude
constexpr std::uint64_t kExampleStream = 0x6a09e667f3bcc909ull;

// FNV-1a: a platform-independent hash (std::hash is not), so names give the same examples
// everywhere.
std::uint64_t hash_name(const std::string& name) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// One template per class, intensities in [0, 1], row-major rows x cols.
std::vector<std::vector<double>> make_templates(std::uint64_t seed, int classes, int rows,
                                                int cols) {
  Generator generator(seed);
  std::vector<std::vector<double>> templates(static_cast<std::size_t>(classes));
  for (auto& pixels : templates) {
    std::vector<double> grid(kTemplateGrid * kTemplateGrid);
    for (double& cell : grid)
      cell = generator.uniform() < 0.5 ? 0.0 : 0.5 + 0.5 * generator.uniform();
    pixels.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        pixels[static_cast<std::size_t>(r * cols + c)] = grid[static_cast<std::size_t>(
            r * kTemplateGrid / rows * kTemplateGrid + c * kTemplateGrid / cols)];
      }
    }
  }
  return templates;
}

}  // namespace

Dataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed, const std::string& name,
                               int classes, int rows, int cols) {
  ALLOY_CHECK(size >= 0, "synthetic dataset ", name, ": size must be non-negative, got ", size);
  ALLOY_CHECK(classes >= 1, "synthetic dataset ", name, ": needs at least one class, got ",
              classes);
  ALLOY_CHECK(rows >= 1 && cols >= 1, "synthetic dataset ", name,
              ": images need at least one row and column, got ", rows, " x ", cols);
  const auto templates = make_templates(seed, classes, rows, cols);

  Dataset dataset;
  dataset.name = name;
  dataset.classes = classes;
  dataset.images =
      Tensor::empty({size, 1, rows, cols}, DType::u8, Device::cpu(), MemoryCategory::data);
  dataset.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  std::uint8_t* pixels = dataset.images.data<std::uint8_t>();
  std::int32_t* labels = dataset.labels.data<std::int32_t>();

  Generator generator(seed ^ hash_name(name) ^ kExampleStream);
  const auto shift_range = static_cast<std::uint64_t>(2 * kMaxShift + 1);
  for (std::int64_t example = 0; example < size; ++example) {
    const auto label = static_cast<int>(generator.below(static_cast<std::uint64_t>(classes)));
    const auto dy = static_cast<int>(generator.below(shift_range)) - kMaxShift;
    const auto dx = static_cast<int>(generator.below(shift_range)) - kMaxShift;
    const double contrast = 255.0 * (0.6 + 0.4 * generator.uniform());
    const std::vector<double>& shape = templates[static_cast<std::size_t>(label)];
    labels[example] = label;
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const int source_r = r - dy;
        const int source_c = c - dx;
        const bool inside = source_r >= 0 && source_r < rows && source_c >= 0 && source_c < cols;
        const double ink =
            inside ? contrast * shape[static_cast<std::size_t>(source_r * cols + source_c)] : 0.0;
        const double noise = (generator.uniform() + generator.uniform() - 1.0) * kNoiseAmplitude;
        *pixels++ = static_cast<std::uint8_t>(std::clamp(std::lround(ink + noise), 0l, 255l));
      }
    }
  }
  return dataset;
}

}  // namespace alloy::data
