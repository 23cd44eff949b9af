#include "core/data/image_transform.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace alloy::data {

namespace {

constexpr double kMinScale = 0.08;
constexpr double kMaxScale = 1.0;
constexpr double kMinRatio = 3.0 / 4.0;
constexpr double kMaxRatio = 4.0 / 3.0;
constexpr int kAttempts = 10;
constexpr double kCropFraction = 0.875;

// Four random words of draw `draw` of example `index` in `epoch`.
Philox4x32 words(std::uint64_t seed, std::int64_t epoch, std::int64_t index, std::uint32_t draw) {
  const auto i = static_cast<std::uint64_t>(index);
  const Philox4x32 counter{{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32),
                            static_cast<std::uint32_t>(epoch), draw}};
  return philox4x32_10(counter, static_cast<std::uint32_t>(seed),
                       static_cast<std::uint32_t>(seed >> 32));
}

double unit(std::uint32_t word) {
  return word * 0x1.0p-32;
}  // [0, 1)

// Uniform in [0, bound).
int below(std::uint32_t word, int bound) {
  return static_cast<int>((static_cast<std::uint64_t>(word) * static_cast<std::uint64_t>(bound)) >>
                          32);
}

// Per output pixel along one axis: the first source pixel and the normalised weights.
struct Taps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;  // `stride` per output pixel
  int stride = 0;
};

Taps taps(double start, double length, int source, int output) {
  const double scale = length / output;
  const double support = std::max(scale, 1.0);
  Taps t;
  t.stride = static_cast<int>(std::ceil(support)) * 2 + 2;
  t.first.resize(static_cast<std::size_t>(output));
  t.count.resize(static_cast<std::size_t>(output));
  t.weights.assign(static_cast<std::size_t>(output) * static_cast<std::size_t>(t.stride), 0.0f);
  for (int o = 0; o < output; ++o) {
    const double center = start + (o + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(std::floor(center - support)));
    const int hi = std::min(source, static_cast<int>(std::ceil(center + support)));
    double total = 0;
    int n = 0;
    float* w = &t.weights[static_cast<std::size_t>(o) * static_cast<std::size_t>(t.stride)];
    for (int x = lo; x < hi && n < t.stride; ++x, ++n) {
      const double weight = std::max(0.0, 1.0 - std::abs(x + 0.5 - center) / support);
      w[n] = static_cast<float>(weight);
      total += weight;
    }
    if (total <= 0) {  // a box narrower than a pixel: the nearest one
      const int nearest = std::clamp(static_cast<int>(center), 0, source - 1);
      t.first[static_cast<std::size_t>(o)] = nearest;
      t.count[static_cast<std::size_t>(o)] = 1;
      w[0] = 1.0f;
      continue;
    }
    for (int k = 0; k < n; ++k)
      w[k] = static_cast<float>(w[k] / total);
    t.first[static_cast<std::size_t>(o)] = lo;
    t.count[static_cast<std::size_t>(o)] = n;
  }
  return t;
}

std::uint8_t to_u8(float value) {
  return static_cast<std::uint8_t>(std::clamp(value, 0.0f, 255.0f) + 0.5f);
}

}  // namespace

CropBox random_resized_crop(int width, int height, std::uint64_t seed, std::int64_t epoch,
                            std::int64_t index) {
  const double area = static_cast<double>(width) * height;
  CropBox box;
  bool found = false;
  for (int attempt = 0; attempt < kAttempts && !found; ++attempt) {
    const Philox4x32 r = words(seed, epoch, index, static_cast<std::uint32_t>(attempt));
    const double target = area * (kMinScale + (kMaxScale - kMinScale) * unit(r.v[0]));
    const double log_ratio =
        std::log(kMinRatio) + (std::log(kMaxRatio) - std::log(kMinRatio)) * unit(r.v[1]);
    const double ratio = std::exp(log_ratio);
    const auto w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const auto h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      box = {static_cast<double>(below(r.v[3], width - w + 1)),
             static_cast<double>(below(r.v[2], height - h + 1)), static_cast<double>(w),
             static_cast<double>(h)};
      found = true;
    }
  }
  if (!found) {
    const double in_ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (in_ratio < kMinRatio) {
      h = static_cast<int>(std::lround(w / kMinRatio));
    } else if (in_ratio > kMaxRatio) {
      w = static_cast<int>(std::lround(h * kMaxRatio));
    }
    box = {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
           static_cast<double>(w), static_cast<double>(h)};
  }
  box.flip = words(seed, epoch, index, kAttempts).v[0] >> 31;
  return box;
}

CropBox center_crop(int width, int height, int size) {
  // An image already size x size is taken whole: a zoom by 1 / 0.875 would only blur it and cut
  // its border (a 28x28 Fashion-MNIST folder loses about 0.02 of test accuracy to that zoom).
  if (width == size && height == size)
    return {0, 0, static_cast<double>(size), static_cast<double>(size)};
  // The shorter side becomes int(size / 0.875), the longer one keeps the aspect ratio.
  const auto resized = static_cast<int>(size / kCropFraction);
  const bool wide = width >= height;
  const int short_side = wide ? height : width;
  const int long_side = wide ? width : height;
  const auto resized_long = static_cast<int>(static_cast<double>(resized) * long_side / short_side);
  const int resized_w = wide ? resized_long : resized;
  const int resized_h = wide ? resized : resized_long;
  const double left = std::round((resized_w - size) / 2.0);
  const double top = std::round((resized_h - size) / 2.0);
  const double sx = static_cast<double>(width) / resized_w;
  const double sy = static_cast<double>(height) / resized_h;
  return {left * sx, top * sy, size * sx, size * sy};
}

void resample(const DecodedImage& image, const CropBox& box, int size, int channels,
              std::uint8_t* pixels) {
  ALLOY_CHECK(channels == 1 || channels == 3, "resample: 1 or 3 channels, got ", channels);
  const Taps across = taps(box.x, box.width, image.width, size);
  const Taps down = taps(box.y, box.height, image.height, size);
  // Rows the vertical taps read, resampled across first: [rows][size][3] floats.
  const int row_lo = down.first.front();
  int row_hi = row_lo;
  for (int o = 0; o < size; ++o)
    row_hi = std::max(
        row_hi, down.first[static_cast<std::size_t>(o)] + down.count[static_cast<std::size_t>(o)]);
  const std::size_t plane = static_cast<std::size_t>(size) * static_cast<std::size_t>(size);
  std::vector<float> rows(static_cast<std::size_t>(row_hi - row_lo) * size * 3);
  for (int y = row_lo; y < row_hi; ++y) {
    const std::uint8_t* source = image.rgb.data() + static_cast<std::size_t>(y) * image.width * 3;
    float* out = rows.data() + static_cast<std::size_t>(y - row_lo) * size * 3;
    for (int o = 0; o < size; ++o) {
      const int first = across.first[static_cast<std::size_t>(o)];
      const float* w = &across.weights[static_cast<std::size_t>(o) * across.stride];
      float r = 0, g = 0, b = 0;
      for (int k = 0; k < across.count[static_cast<std::size_t>(o)]; ++k) {
        const std::uint8_t* p = source + static_cast<std::size_t>(first + k) * 3;
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      const int column = box.flip ? size - 1 - o : o;
      out[column * 3 + 0] = r;
      out[column * 3 + 1] = g;
      out[column * 3 + 2] = b;
    }
  }
  for (int o = 0; o < size; ++o) {
    const int first = down.first[static_cast<std::size_t>(o)];
    const float* w = &down.weights[static_cast<std::size_t>(o) * down.stride];
    for (int x = 0; x < size; ++x) {
      float rgb[3] = {0, 0, 0};
      for (int k = 0; k < down.count[static_cast<std::size_t>(o)]; ++k) {
        const float* p =
            rows.data() + (static_cast<std::size_t>(first + k - row_lo) * size + x) * 3;
        rgb[0] += w[k] * p[0];
        rgb[1] += w[k] * p[1];
        rgb[2] += w[k] * p[2];
      }
      const std::size_t at = static_cast<std::size_t>(o) * size + x;
      if (channels == 3) {
        for (int c = 0; c < 3; ++c)
          pixels[c * plane + at] = to_u8(rgb[c]);
      } else {
        const unsigned r = to_u8(rgb[0]), g = to_u8(rgb[1]), b = to_u8(rgb[2]);
        pixels[at] =
            static_cast<std::uint8_t>((19595u * r + 38470u * g + 7471u * b + 0x8000u) >> 16);
      }
    }
  }
}

}  // namespace alloy::data
