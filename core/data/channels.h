// Channel conversion of u8 image datasets, for --channels.
#pragma once

#include "core/data/dataset.h"

namespace alloy::data {

// `dataset` with `channels` (1 or 3) channels: itself when it has them already; gray images
// replicated into R, G and B; RGB images to luma as PIL's convert("L") computes it, ITU-R
// 601-2 in 16-bit fixed point: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, which is
// R * 299/1000 + G * 587/1000 + B * 114/1000 rounded. Other channel counts are an Error naming
// the dataset.
Dataset convert_channels(const Dataset& dataset, int channels);

}  // namespace alloy::data
