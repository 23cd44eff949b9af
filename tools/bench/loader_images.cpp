// Times Alloy's image loader alone: an image folder's training images decoded, cropped with
// RandomResizedCrop and flipped by the loader's worker pool, batch after batch, no model. The
// Alloy side of tools/bench/loader_vs_torchvision.sh. A measurement tool, not a test.
//
//   loader_images DIR [--size N] [--threads N] [--batch-size N] [--epochs N]
//
// DIR holds DIR/train/CLASS/* and DIR/val/CLASS/*. Prints one JSON line: images, seconds and
// images_per_second over the epochs after the first (which warms the page cache and the pool).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/data/image_folder.h"
#include "core/data/loader.h"
#include "core/data/sampler.h"
#include "core/error.h"

namespace {

int integer(const char* text, const char* flag) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 1000000) {
    std::fprintf(stderr, "loader_images: %s must be a positive integer, not '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: loader_images DIR [--size N] [--threads N] [--batch-size N] "
                 "[--epochs N]\n");
    return 2;
  }
  const std::string directory = argv[1];
  int size = 224, threads = 2, batch_size = 64, epochs = 2;
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loader_images: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!std::strcmp(argv[i], "--size")) {
      size = integer(argv[i + 1], "--size");
    } else if (!std::strcmp(argv[i], "--threads")) {
      threads = integer(argv[i + 1], "--threads");
    } else if (!std::strcmp(argv[i], "--batch-size")) {
      batch_size = integer(argv[i + 1], "--batch-size");
    } else if (!std::strcmp(argv[i], "--epochs")) {
      epochs = integer(argv[i + 1], "--epochs");
    } else {
      std::fprintf(stderr, "loader_images: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  try {
    alloy::data::ImageFolderOptions options;
    options.size = size;
    options.seed = 1;
    const alloy::data::DatasetPair data = alloy::data::read_image_folder(directory, options);
    const std::int64_t examples = data.train.size();
    alloy::data::Sampler sampler(examples, 1, true);
    using Clock = std::chrono::steady_clock;
    Clock::time_point start;
    std::int64_t images = 0;
    unsigned checksum = 0;  // keeps the pixels live
    for (int epoch = 0; epoch <= epochs; ++epoch) {
      if (epoch == 1) {
        start = Clock::now();
        images = 0;
      }
      alloy::data::Loader loader(data.train, sampler.epoch_indices(epoch), batch_size, 0, epoch,
                                 threads);
      alloy::data::Batch batch;
      while (loader.next(batch)) {
        images += batch.images.dim(0);
        checksum += batch.images.data<std::uint8_t>()[0];
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf(
        "{\"framework\":\"alloy\",\"images\":%lld,\"seconds\":%.4f,\"images_per_second\":%.2f,"
        "\"threads\":%d,\"batch_size\":%d,\"size\":%d,\"epochs\":%d,\"checksum\":%u}\n",
        static_cast<long long>(images), seconds, images / seconds, threads, batch_size, size,
        epochs, checksum);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loader_images: %s\n", error.what());
    return 1;
  }
  return 0;
}
