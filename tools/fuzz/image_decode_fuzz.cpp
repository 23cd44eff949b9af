// libFuzzer harness for the image decoders of --dataset folder (core/data/image_decode.h:
// TurboJPEG and libpng behind Alloy's checks). Each input is decoded at full size and with a
// shrink limit of 8 (the scaled JPEG path), then cropped and resampled as a training image is.
// The contract under test: any input either decodes or throws alloy::Error; anything else (a
// crash, a sanitizer report, another exception type, a huge allocation) is a bug.
//
// tools/fuzz/run.sh builds and runs it after the checkpoint reader's harness, from the seed
// files in tests/data/image_corpus (written by tools/fuzz/make_image_corpus.py).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/data/image_decode.h"
#include "core/data/image_transform.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<unsigned char> bytes(data, data + size);
  for (const double limit : {1.0, 8.0}) {
    try {
      const alloy::data::DecodedImage image =
          alloy::data::decode_image_bytes(bytes, "fuzz-input", [limit](int, int) { return limit; });
      constexpr int kSize = 8;
      std::uint8_t pixels[3 * kSize * kSize];
      const alloy::data::CropBox box =
          alloy::data::random_resized_crop(image.width, image.height, 1, 0, 0);
      alloy::data::resample(image, box, kSize, 3, pixels);
    } catch (const alloy::Error&) {
    }
  }
  return 0;
}
