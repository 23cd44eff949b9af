// Writes the JPEG and PNG files that image-folder tests read, with the libraries that read them
// (a test including this links TurboJPEG and libpng: tests/CMakeLists.txt).
#pragma once

#include <png.h>
#include <turbojpeg.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace alloy::test {

// width x height RGB, a pattern of the seed, or one colour when solid.
inline std::vector<unsigned char> pattern(int width, int height, int seed, bool solid = false) {
  std::vector<unsigned char> rgb(static_cast<std::size_t>(width * height * 3));
  for (std::size_t i = 0; i < rgb.size(); ++i)
    rgb[i] = static_cast<unsigned char>(solid ? (seed * 40 + (i % 3) * 70) % 256
                                              : (i * 7 + seed * 29 + i / 97) % 256);
  return rgb;
}

inline void write_png(const std::string& path, int width, int height,
                      const std::vector<unsigned char>& pixels,
                      png_uint_32 format = PNG_FORMAT_RGB) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  BOOST_TEST_REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr));
}

inline std::vector<unsigned char> jpeg_bytes(int width, int height,
                                             const std::vector<unsigned char>& pixels,
                                             int format = TJPF_RGB) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int subsampling = format == TJPF_CMYK ? TJSAMP_444 : TJSAMP_420;
  BOOST_TEST_REQUIRE(tjCompress2(handle, pixels.data(), width, 0, height, format, &out, &size,
                                 subsampling, 95, 0) == 0);
  std::vector<unsigned char> bytes(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace alloy::test
