// Decoding of JPEG (TurboJPEG) and PNG (libpng) files to 8-bit RGB, chosen by the file's first
// bytes, not its name. Every failure is an alloy::Error of one line naming the file: unreadable,
// not a JPEG or PNG, corrupt or truncated, CMYK JPEG, 16-bit PNG, more than kMaxImagePixels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace alloy::data {

struct DecodedImage {
  int width = 0;  // as decoded: the file's size or, decoded scaled down, less
  int height = 0;
  int file_width = 0;  // as stored in the file
  int file_height = 0;
  std::vector<std::uint8_t> rgb;  // height rows of width R, G, B triples
};

// Given the file's width and height, the factor (>= 1) by which the caller lets the decoder
// shrink the image. Called once for every JPEG and PNG file decoded, before its pixels.
using ShrinkLimit = std::function<double(int width, int height)>;

// With a shrink limit, a JPEG is decoded at the smallest of the scales 1/2, 1/4 and 1/8 that
// shrinks it by no more than the limit, as PIL's draft mode does: the scaled inverse DCT costs a
// fraction of a full decode. PNG files are always decoded at full size.
DecodedImage decode_image(const std::string& path, const ShrinkLimit& shrink_limit = {});

// The same for a file's bytes already in memory, `path` naming them in errors (the fuzz harness,
// tools/fuzz/image_decode_fuzz.cpp, feeds it).
DecodedImage decode_image_bytes(const std::vector<unsigned char>& bytes, const std::string& path,
                                const ShrinkLimit& shrink_limit = {});

// Images of more pixels than this are refused (an Error naming the file) before any pixel
// memory is taken: a corrupt header cannot ask for gigabytes.
constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

}  // namespace alloy::data
