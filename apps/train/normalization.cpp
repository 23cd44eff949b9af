#include "apps/train/normalization.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/normalize_channels.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {

const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};

std::vector<float> parse_floats(const std::string& text, const std::string& whole) {
  std::vector<float> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string word = text.substr(start, comma == std::string::npos ? comma : comma - start);
    char* end = nullptr;
    const float value = std::strtof(word.c_str(), &end);
    if (word.empty() || end != word.c_str() + word.size() || !std::isfinite(value)) {
      setting_fail("{normalize} '", whole,
                   "' is not one of auto, none, imagenet or MEAN,../STD,.. ('", word,
                   "' is not a number)");
    }
    values.push_back(value);
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

Normalization parse_statistics(const std::string& text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) {
    setting_fail("{normalize} '", text, "' is not one of auto, none, imagenet or MEAN,../STD,..");
  }
  Normalization normalization{parse_floats(text.substr(0, slash), text),
                              parse_floats(text.substr(slash + 1), text)};
  if (normalization.mean.size() != normalization.std.size()) {
    setting_fail("{normalize} '", text, "' has ", normalization.mean.size(), " means and ",
                 normalization.std.size(), " standard deviations");
  }
  for (const float s : normalization.std) {
    if (!(s > 0.0f)) setting_fail("{normalize} '", text, "': standard deviations must be positive");
  }
  return normalization;
}

}  // namespace

void check_normalize_flag(const std::string& text) {
  if (text == "auto" || text == "none" || text == "imagenet") return;
  parse_statistics(text);
}

Normalization parse_normalization(const std::string& text, int channels) {
  if (text == "none" || (text == "auto" && channels != 3)) return {};
  Normalization normalization = text == "imagenet" || text == "auto"
                                    ? Normalization{kImageNetMean, kImageNetStd}
                                    : parse_statistics(text);
  if (static_cast<int>(normalization.mean.size()) != channels) {
    setting_fail("{normalize} ", text, " has ", normalization.mean.size(),
                 " value(s) per statistic, but the images have ", channels, " channel(s)");
  }
  return normalization;
}

Tensor normalization_table(const Normalization& normalization, Device device) {
  if (normalization.mean.empty()) return Tensor();
  return alloy::normalization_table(normalization.mean, normalization.std, device);
}

Tensor normalize_batch(const Tensor& images, const Tensor& table, DType dtype) {
  return table.defined() ? normalize_channels(images, table, dtype)
                         : normalize_images(images, dtype);
}

}  // namespace alloy::app
