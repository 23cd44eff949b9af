// --normalize: how u8 pixels become the model's input, on the training device.
//   none      pixels / 255, as every run before per-channel normalisation (the bits of
//             normalize_images, core/ops/elementwise.h)
//   imagenet  (pixels / 255 - mean) / std with torchvision's ImageNet statistics, mean
//             0.485,0.456,0.406 and std 0.229,0.224,0.225 (3 channels)
//   M1,../S1,..  the same with one mean and one std per channel
//   auto      imagenet for 3-channel images, none for 1-channel ones
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace alloy::app {

struct Normalization {
  std::vector<float> mean;  // empty: none
  std::vector<float> std;
};

// A UsageError naming --normalize when `text` is none of the forms above.
void check_normalize_flag(const std::string& text);

// The normalisation of `text` for images of `channels` channels; a UsageError when the
// statistics do not have one value per channel.
Normalization parse_normalization(const std::string& text, int channels);

// The device table of core/ops/normalize_channels.h, or an undefined tensor for none.
Tensor normalization_table(const Normalization& normalization, Device device);

// images (u8 [N, C, H, W]) -> `dtype`: normalize_channels with `table`, or normalize_images
// when `table` is undefined.
Tensor normalize_batch(const Tensor& images, const Tensor& table, DType dtype);

}  // namespace alloy::app
