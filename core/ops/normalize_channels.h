// Per-channel normalisation of u8 images on the training device, through a lookup table: each
// channel maps its 256 pixel values to (value / 255 - mean) / std, computed once on the host in
// fp32 (torchvision's ToTensor then Normalize, value for value), so the CPU and CUDA kernels
// give the same bits: they only look values up and round them once to the output's dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace alloy {

// The f32 [C, 256] table of `mean` and `std` (C entries each, every std positive), on `device`:
// table[c][v] = (float(v) / 255 - mean[c]) / std[c] in fp32.
Tensor normalization_table(const std::vector<float>& mean, const std::vector<float>& std,
                           Device device);

// images u8 [N, C, H, W] -> `dtype` (f32, f16 or bf16): y[n, c, h, w] = table[c][images[n, c,
// h, w]], with table f32 [C, 256] on the images' device.
Tensor normalize_channels(const Tensor& images, const Tensor& table, DType dtype);

namespace cpu {
// images: count = batch * channels * plane bytes, channel planes of `plane` pixels each.
void normalize_channels(const std::uint8_t* images, const float* table, void* y, DType dtype,
                        std::int64_t batch, std::int64_t channels, std::int64_t plane);
}  // namespace cpu

}  // namespace alloy
