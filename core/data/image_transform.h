// The crops and the resampling that make a decoded image a model's input, as torchvision's
// ImageNet recipe does: training takes RandomResizedCrop(size, scale 0.08-1, ratio 3/4-4/3) and
// a horizontal flip with probability 1/2; evaluation Resize(size / 0.875) of the shorter side
// then CenterCrop(size). Every random draw is Philox's (core/philox.h) of (seed, epoch, example
// index), so the pixels never depend on the thread, the world size or a resume.
#pragma once

#include <cstdint>

#include "core/data/image_decode.h"

namespace alloy::data {

// A region of the source image, in pixels: columns [x, x + width), rows [y, y + height).
struct CropBox {
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
  bool flip = false;  // mirror left to right
};

// torchvision's RandomResizedCrop.get_params (10 attempts, then the central crop of the
// nearest allowed ratio) and the flip, drawn for (seed, epoch, index).
CropBox random_resized_crop(int width, int height, std::uint64_t seed, std::int64_t epoch,
                            std::int64_t index);

// The region that Resize(int(size / 0.875)) and CenterCrop(size) keep; the whole image when it
// is size x size already.
CropBox center_crop(int width, int height, int size);

// `box` of `image` resampled to size x size with an antialiased bilinear filter (PIL's
// BILINEAR: a triangle filter stretched by the scale when shrinking), into `pixels` as
// `channels` planes: 3 (R, G, B) or 1 (luma, as core/data/channels.h computes it).
void resample(const DecodedImage& image, const CropBox& box, int size, int channels,
              std::uint8_t* pixels);

}  // namespace alloy::data
