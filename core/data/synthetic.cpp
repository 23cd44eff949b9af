#include "core/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/ops/cpu/parallel.h"
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

// Single-channel images: one generator draws every example in turn, pixel by pixel (the
// data of every earlier run of this kind, kept byte for byte).
void fill_one_channel(Dataset& dataset, std::uint64_t seed, int classes, int rows, int cols) {
  const std::string& name = dataset.name;
  const std::int64_t size = dataset.size();
  const auto templates = make_templates(seed, classes, rows, cols);
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
}

// Several channels (each with its own template per class): every example draws from its own
// generator, keyed by the example's index, so examples fill in parallel, and the noise takes
// two 32-bit uniforms from each 64-bit draw. Thousands of 224x224x3 images take seconds.
void fill_channels(Dataset& dataset, std::uint64_t seed, int classes, int channels, int rows,
                   int cols) {
  const auto templates = make_templates(seed, classes * channels, rows, cols);
  const std::uint64_t stream = seed ^ hash_name(dataset.name) ^ kExampleStream;
  // Shifts scale with the image, as a few pixels do at 28x28.
  const int max_shift = std::max(kMaxShift, kMaxShift * std::max(rows, cols) / 28);
  const auto shift_range = static_cast<std::uint64_t>(2 * max_shift + 1);
  const std::int64_t plane = static_cast<std::int64_t>(rows) * cols;
  std::uint8_t* all_pixels = dataset.images.data<std::uint8_t>();
  std::int32_t* labels = dataset.labels.data<std::int32_t>();
  constexpr double kUnit = 0x1.0p-32;
  cpu::parallel_ranges(dataset.size(), channels * plane, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t example = begin; example < end; ++example) {
      Generator generator(stream + static_cast<std::uint64_t>(example) * 0x9e3779b97f4a7c15ull);
      const auto label = static_cast<int>(generator.below(static_cast<std::uint64_t>(classes)));
      const auto dy = static_cast<int>(generator.below(shift_range)) - max_shift;
      const auto dx = static_cast<int>(generator.below(shift_range)) - max_shift;
      const double contrast = 255.0 * (0.6 + 0.4 * generator.uniform());
      labels[example] = label;
      std::uint8_t* pixels = all_pixels + example * channels * plane;
      for (int channel = 0; channel < channels; ++channel) {
        const std::vector<double>& shape =
            templates[static_cast<std::size_t>(label * channels + channel)];
        for (int r = 0; r < rows; ++r) {
          const int source_r = r - dy;
          for (int c = 0; c < cols; ++c) {
            const int source_c = c - dx;
            const bool inside =
                source_r >= 0 && source_r < rows && source_c >= 0 && source_c < cols;
            const double ink =
                inside ? contrast * shape[static_cast<std::size_t>(source_r * cols + source_c)]
                       : 0.0;
            const std::uint64_t bits = generator.next_u64();
            const double noise = (static_cast<double>(bits >> 32) * kUnit +
                                  static_cast<double>(bits & 0xffffffffu) * kUnit - 1.0) *
                                 kNoiseAmplitude;
            // Clamped, then rounded half up: lround's result for these values, without its call.
            *pixels++ = static_cast<std::uint8_t>(std::clamp(ink + noise, 0.0, 255.0) + 0.5);
          }
        }
      }
    }
  });
}

}  // namespace

Dataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed, const std::string& name,
                               int classes, int rows, int cols, int channels) {
  ALLOY_CHECK(size >= 0, "synthetic dataset ", name, ": size must be non-negative, got ", size);
  ALLOY_CHECK(classes >= 1, "synthetic dataset ", name, ": needs at least one class, got ",
              classes);
  ALLOY_CHECK(rows >= 1 && cols >= 1, "synthetic dataset ", name,
              ": images need at least one row and column, got ", rows, " x ", cols);
  ALLOY_CHECK(channels == 1 || channels == 3, "synthetic dataset ", name,
              ": images have 1 or 3 channels, got ", channels);
  Dataset dataset;
  dataset.name = name;
  dataset.classes = classes;
  dataset.images =
      Tensor::empty({size, channels, rows, cols}, DType::u8, Device::cpu(), MemoryCategory::data);
  dataset.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  if (channels == 1) {
    fill_one_channel(dataset, seed, classes, rows, cols);
  } else {
    fill_channels(dataset, seed, classes, channels, rows, cols);
  }
  return dataset;
}

}  // namespace alloy::data
