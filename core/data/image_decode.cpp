#include "core/data/image_decode.h"

#include "core/error.h"

#ifdef ALLOY_HAVE_IMAGE_FILES

#include <png.h>
#include <turbojpeg.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

namespace alloy::data {

namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, ": cannot read: ", std::strerror(errno));
  return bytes;
}

void check_pixels(const std::string& path, const char* kind, std::int64_t width,
                  std::int64_t height) {
  if (width < 1 || height < 1 || width * height > kMaxImagePixels) {
    fail(path, ": ", kind, " of ", width, "x", height, " pixels; images of 1 to ", kMaxImagePixels,
         " pixels are read");
  }
}

struct TurboJpegHandle {
  TurboJpegHandle() : handle(tjInitDecompress()) {
    ALLOY_CHECK(handle != nullptr,
                "TurboJPEG: cannot create a decompressor: ", tjGetErrorStr2(nullptr));
  }
  ~TurboJpegHandle() { tjDestroy(handle); }
  TurboJpegHandle(const TurboJpegHandle&) = delete;
  TurboJpegHandle& operator=(const TurboJpegHandle&) = delete;
  tjhandle handle;
};

// The smallest scale 1/denom of TurboJPEG's (1/2, 1/4, 1/8: those with SIMD inverse DCTs, the
// ones PIL's draft mode takes) at which the image shrinks by at most `limit`.
tjscalingfactor smallest_scale(double limit) {
  tjscalingfactor best{1, 1};
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors != nullptr && i < count; ++i) {
    const tjscalingfactor f = factors[i];
    if (f.num != 1 || f.denom > limit) continue;
    if (static_cast<double>(f.num) / f.denom < static_cast<double>(best.num) / best.denom) {
      best = f;
    }
  }
  return best;
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<unsigned char>& bytes,
                         const ShrinkLimit& shrink_limit) {
  // One decompressor per thread: the loader's threads decode at once.
  thread_local TurboJpegHandle decoder;
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(decoder.handle, bytes.data(), static_cast<unsigned long>(bytes.size()),
                          &width, &height, &subsampling, &colorspace) != 0) {
    fail(path, ": corrupt JPEG (", tjGetErrorStr2(decoder.handle), ")");
  }
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    fail(path, ": CMYK JPEG; convert it to RGB (only RGB and grayscale images are read)");
  }
  check_pixels(path, "JPEG", width, height);
  DecodedImage image;
  image.file_width = width;
  image.file_height = height;
  const tjscalingfactor scale =
      shrink_limit ? smallest_scale(shrink_limit(width, height)) : tjscalingfactor{1, 1};
  image.width = TJSCALED(width, scale);
  image.height = TJSCALED(height, scale);
  image.rgb.resize(static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height) *
                   3);
  // TJFLAG_STOPONWARNING: a truncated file is an error, not an image with a grey bottom. The
  // scaled size picks the scale.
  if (tjDecompress2(decoder.handle, bytes.data(), static_cast<unsigned long>(bytes.size()),
                    image.rgb.data(), image.width, 0, image.height, TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0) {
    fail(path, ": corrupt or truncated JPEG (", tjGetErrorStr2(decoder.handle), ")");
  }
  return image;
}

// The shrink limit is called (its caller learns the size from it) but a PNG is not scaled.
DecodedImage decode_png(const std::string& path, const std::vector<unsigned char>& bytes,
                        const ShrinkLimit& shrink_limit) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  struct Release {
    png_image* image;
    ~Release() { png_image_free(image); }
  } release{&png};
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    fail(path, ": corrupt PNG (", png.message, ")");
  }
  if (png.format & PNG_FORMAT_FLAG_LINEAR) {
    fail(path, ": 16-bit PNG; convert it to 8 bits per channel");
  }
  if (shrink_limit) shrink_limit(static_cast<int>(png.width), static_cast<int>(png.height));
  check_pixels(path, "PNG", static_cast<std::int64_t>(png.width),
               static_cast<std::int64_t>(png.height));
  png.format = PNG_FORMAT_RGB;  // gray replicated, palettes expanded, alpha composed on black
  DecodedImage image;
  image.width = image.file_width = static_cast<int>(png.width);
  image.height = image.file_height = static_cast<int>(png.height);
  image.rgb.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.rgb.data(), 0, nullptr)) {
    fail(path, ": corrupt or truncated PNG (", png.message, ")");
  }
  return image;
}

}  // namespace

DecodedImage decode_image(const std::string& path, const ShrinkLimit& shrink_limit) {
  return decode_image_bytes(read_bytes(path), path, shrink_limit);
}

DecodedImage decode_image_bytes(const std::vector<unsigned char>& bytes, const std::string& path,
                                const ShrinkLimit& shrink_limit) {
  static const unsigned char kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    return decode_jpeg(path, bytes, shrink_limit);
  }
  if (bytes.size() >= sizeof kPng && std::memcmp(bytes.data(), kPng, sizeof kPng) == 0) {
    return decode_png(path, bytes, shrink_limit);
  }
  fail(path, ": not a JPEG or PNG image");
}

}  // namespace alloy::data

#else

namespace alloy::data {

DecodedImage decode_image(const std::string& path, const ShrinkLimit& shrink_limit) {
  return decode_image_bytes({}, path, shrink_limit);
}

DecodedImage decode_image_bytes(const std::vector<unsigned char>&, const std::string& path,
                                const ShrinkLimit&) {
  fail(path,
       ": this build of Alloy reads no JPEG or PNG files (TurboJPEG and libpng were not "
       "found when it was configured; tools/setup.sh installs them)");
}

}  // namespace alloy::data

#endif
