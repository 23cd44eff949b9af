// Decoding of JPEG (TurboJPEG) and PNG (libpng) files to 8-bit RGB, chosen by the file's first
// bytes, not its name. Every failure is an alloy::Error of one line naming the file: unreadable,
// not a JPEG or PNG, corrupt or truncated, CMYK JPEG, 16-bit PNG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace alloy::data {

struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;  // height rows of width R, G, B triples
};

DecodedImage decode_image(const std::string& path);

}  // namespace alloy::data
