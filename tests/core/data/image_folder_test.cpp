// Image folders: classes and files in sorted order, JPEG and PNG decoded and resized, training
// crops and flips a function of (seed, epoch, example) alone (the same bytes with any number of
// loader threads), validation's centre crop, and a one-line error naming the file or folder for
// each kind of bad input.
#include "core/data/image_folder.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/data/image_decode.h"
#include "core/data/image_transform.h"
#include "core/data/loader.h"
#include "core/error.h"
#include "tests/support/image_files.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::data;
using namespace alloy::test;
namespace fs = std::filesystem;

namespace {

// train/{ant,bee}, val/{ant,bee}: PNGs and JPEGs of several sizes.
void write_tree(const std::string& root) {
  for (const char* split : {"train", "val"}) {
    for (const char* cls : {"bee", "ant"}) {
      fs::create_directories(fs::path(root) / split / cls);
    }
  }
  write_png(root + "/train/ant/b.png", 40, 30, pattern(40, 30, 1));
  write_bytes(root + "/train/ant/a.jpg", jpeg_bytes(50, 70, pattern(50, 70, 2)));
  write_png(root + "/train/bee/c.png", 64, 48, pattern(64, 48, 3));
  write_bytes(root + "/train/bee/d.jpg", jpeg_bytes(33, 33, pattern(33, 33, 4)));
  write_png(root + "/train/bee/e.png", 90, 60, pattern(90, 60, 5));
  write_png(root + "/val/ant/x.png", 40, 50, pattern(40, 50, 3, true));
  write_bytes(root + "/val/bee/y.jpg", jpeg_bytes(48, 48, pattern(48, 48, 6)));
}

std::vector<unsigned char> epoch_bytes(const Dataset& dataset, std::int64_t epoch, int threads) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset.size()));
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<std::int64_t>(i);
  Loader loader(dataset, order, 4, 0, epoch, threads);
  std::vector<unsigned char> bytes;
  Batch batch;
  while (loader.next(batch)) {
    const auto* p = batch.images.data<std::uint8_t>();
    bytes.insert(bytes.end(), p, p + batch.images.numel());
  }
  return bytes;
}

// PNG's chunk CRC (ISO 3309), to forge a well-formed header.
std::uint32_t crc32(const unsigned char* p, std::size_t n) {
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_u32(std::vector<unsigned char>& bytes, std::size_t at, std::uint32_t value) {
  for (int k = 0; k < 4; ++k)
    bytes[at + static_cast<std::size_t>(k)] = static_cast<unsigned char>(value >> (24 - 8 * k));
}

std::string error_of(const std::string& root, bool load) {
  try {
    ImageFolderOptions options;
    options.size = 16;
    const DatasetPair data = read_image_folder(root, options);
    if (load) {
      epoch_bytes(data.train, 0, 2);
      epoch_bytes(data.test, 0, 1);
    }
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(image_folder)

BOOST_AUTO_TEST_CASE(classes_files_and_labels_in_sorted_order) {
  TempDir dir;
  write_tree(dir.path());
  ImageFolderOptions options;
  options.size = 24;
  const DatasetPair data = read_image_folder(dir.path(), options);
  BOOST_TEST(data.train.classes == 2);
  BOOST_TEST(data.train.size() == 5);
  BOOST_TEST(data.test.size() == 2);
  const std::vector<std::int32_t> labels(data.train.labels.data<std::int32_t>(),
                                         data.train.labels.data<std::int32_t>() + 5);
  BOOST_TEST(labels == (std::vector<std::int32_t>{0, 0, 1, 1, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(data.train.example_shape() == (Shape{3, 24, 24}));
  BOOST_TEST(!data.train.images.defined());
}

BOOST_AUTO_TEST_CASE(training_crops_follow_seed_epoch_and_example_not_threads) {
  TempDir dir;
  write_tree(dir.path());
  ImageFolderOptions options;
  options.size = 20;
  options.seed = 3;
  const DatasetPair data = read_image_folder(dir.path(), options);
  const auto one = epoch_bytes(data.train, 0, 1);
  BOOST_TEST(one.size() == 5u * 3 * 20 * 20);
  BOOST_TEST((epoch_bytes(data.train, 0, 3) == one));
  BOOST_TEST((epoch_bytes(data.train, 1, 2) != one));  // another epoch, other crops
  options.seed = 4;
  BOOST_TEST((epoch_bytes(read_image_folder(dir.path(), options).train, 0, 1) != one));
  // Without augmentation the training images are cropped as validation's: every epoch alike.
  options.augment = false;
  const DatasetPair plain = read_image_folder(dir.path(), options);
  BOOST_TEST((epoch_bytes(plain.train, 0, 1) == epoch_bytes(plain.train, 5, 2)));
}

BOOST_AUTO_TEST_CASE(validation_images_are_resized_and_centre_cropped) {
  TempDir dir;
  write_tree(dir.path());
  ImageFolderOptions options;
  options.size = 8;
  const DatasetPair data = read_image_folder(dir.path(), options);
  const auto bytes = epoch_bytes(data.test, 0, 1);
  // The solid PNG keeps its colour through the filter, in R, G and B planes.
  const std::vector<unsigned char> solid = pattern(1, 1, 3, true);
  int wrong = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 64; ++i)
      wrong += bytes[static_cast<std::size_t>(c * 64 + i)] != solid[static_cast<std::size_t>(c)];
  }
  BOOST_TEST(wrong == 0);
  // One channel: the same image's luma.
  options.channels = 1;
  const auto gray = epoch_bytes(read_image_folder(dir.path(), options).test, 0, 1);
  const unsigned luma = (19595u * solid[0] + 38470u * solid[1] + 7471u * solid[2] + 0x8000u) >> 16;
  BOOST_TEST(gray.size() == 2u * 64);
  BOOST_TEST(gray[10] == luma);
}

BOOST_AUTO_TEST_CASE(bad_input_fails_naming_the_file_or_folder) {
  const auto check = [](const std::function<void(const std::string&)>& spoil, bool load,
                        const std::string& names, const std::string& says) {
    TempDir dir;
    write_tree(dir.path());
    spoil(dir.path());
    const std::string message = error_of(dir.path(), load);
    BOOST_TEST(message.find(names) != std::string::npos, message);
    BOOST_TEST(message.find(says) != std::string::npos, message);
    BOOST_TEST(message.find('\n') == std::string::npos, message);
  };
  check(
      [](const std::string& root) {
        write_bytes(root + "/train/bee/d.jpg", {0xff, 0xd8, 0xff, 1, 2});
      },
      true, "d.jpg", "JPEG");
  check(
      [](const std::string& root) {
        auto bytes = jpeg_bytes(60, 60, pattern(60, 60, 9));
        bytes.resize(bytes.size() / 2);
        write_bytes(root + "/train/ant/a.jpg", bytes);
      },
      true, "a.jpg", "truncated");
  check(
      [](const std::string& root) {
        std::vector<unsigned char> bytes;
        std::ifstream in(root + "/train/bee/c.png", std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
        bytes.resize(bytes.size() - 40);
        write_bytes(root + "/train/bee/c.png", bytes);
      },
      true, "c.png", "PNG");
  check(
      [](const std::string& root) {
        // A byte of the compressed data changed: the IDAT chunk's CRC no longer matches.
        std::vector<unsigned char> bytes = read_all(root + "/train/bee/e.png");
        bytes[bytes.size() / 2] ^= 0x5a;
        write_bytes(root + "/train/bee/e.png", bytes);
      },
      true, "e.png", "corrupt");
  check(
      [](const std::string& root) {
        // IHDR (bytes 16-23: width, height) claims 30000 x 30000, its CRC made to match.
        std::vector<unsigned char> bytes = read_all(root + "/train/ant/b.png");
        put_u32(bytes, 16, 30000);
        put_u32(bytes, 20, 30000);
        put_u32(bytes, 29, crc32(bytes.data() + 12, 17));
        write_bytes(root + "/train/ant/b.png", bytes);
      },
      true, "b.png", "pixels");
  check([](const std::string& root) { std::ofstream(root + "/train/bee/notes.txt") << "hello"; },
        true, "notes.txt", "not a JPEG or PNG");
  check(
      [](const std::string& root) {
        write_bytes(root + "/val/bee/y.jpg",
                    jpeg_bytes(16, 16, std::vector<unsigned char>(16 * 16 * 4, 90), TJPF_CMYK));
      },
      true, "y.jpg", "CMYK");
  check(
      [](const std::string& root) {
        write_png(root + "/train/ant/b.png", 4, 4, std::vector<unsigned char>(4 * 4 * 2, 7),
                  PNG_FORMAT_LINEAR_Y);
      },
      true, "b.png", "16-bit");
  check([](const std::string& root) { fs::create_directories(root + "/train/cow"); }, false, "cow",
        "empty class folder");
  check([](const std::string& root) { fs::create_directories(root + "/val/cow"); }, false, "cow",
        "not among train's classes");
  check([](const std::string& root) { fs::remove_all(root + "/val"); }, false, "val",
        "no such folder");
}

BOOST_AUTO_TEST_CASE(an_image_of_the_output_size_is_taken_unchanged_without_augmentation) {
  TempDir dir;
  write_tree(dir.path());
  const std::vector<unsigned char> rgb = pattern(16, 16, 7);
  write_png(dir.file("train/ant/0.png"), 16, 16, rgb);  // the first example
  ImageFolderOptions options;
  options.size = 16;
  options.augment = false;
  const auto bytes = epoch_bytes(read_image_folder(dir.path(), options).train, 0, 1);
  int wrong = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 256; ++i)
      wrong +=
          bytes[static_cast<std::size_t>(c * 256 + i)] != rgb[static_cast<std::size_t>(i * 3 + c)];
  }
  BOOST_TEST(wrong == 0);
}

BOOST_AUTO_TEST_CASE(an_image_smaller_than_the_crop_is_scaled_up) {
  // A 5x4 image read at 16x16: the crop is drawn on the image as it is and resampled up, as
  // torchvision's RandomResizedCrop and Resize do; a solid colour stays that colour.
  TempDir dir;
  write_tree(dir.path());
  write_png(dir.file("train/ant/0.png"), 5, 4, pattern(5, 4, 8, true));  // the first example
  for (const bool augment : {true, false}) {
    ImageFolderOptions options;
    options.size = 16;
    options.augment = augment;
    const auto bytes = epoch_bytes(read_image_folder(dir.path(), options).train, 2, 2);
    const std::vector<unsigned char> solid = pattern(1, 1, 8, true);
    int wrong = 0;
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 256; ++i)  // 0.png's planes
        wrong += bytes[static_cast<std::size_t>(c * 256 + i)] != solid[static_cast<std::size_t>(c)];
    }
    BOOST_TEST(wrong == 0, "augment " << augment);
  }
}

BOOST_AUTO_TEST_CASE(a_large_jpeg_is_decoded_scaled_down_as_far_as_the_crop_allows) {
  TempDir dir;
  const std::string path = dir.file("big.jpg");
  write_bytes(path, jpeg_bytes(200, 120, pattern(200, 120, 5)));
  const DecodedImage full = decode_image(path);
  BOOST_TEST(full.width == 200);
  BOOST_TEST(full.height == 120);
  const DecodedImage quarter = decode_image(path, [](int w, int h) {
    BOOST_TEST(w == 200);
    BOOST_TEST(h == 120);
    return 5.5;  // 1/4 is the smallest scale of 1/2, 1/4, 1/8 within it
  });
  BOOST_TEST(quarter.width == 50);
  BOOST_TEST(quarter.height == 30);
  BOOST_TEST(quarter.file_width == 200);
  BOOST_TEST(quarter.file_height == 120);
  BOOST_TEST(quarter.rgb.size() == 50u * 30 * 3);
  BOOST_TEST(decode_image(path, [](int, int) { return 1.9; }).width == 200);
  // A PNG is not scaled.
  write_png(dir.file("big.png"), 200, 120, pattern(200, 120, 5));
  BOOST_TEST(decode_image(dir.file("big.png"), [](int, int) { return 8.0; }).width == 200);
  // Through the folder: a smooth 400x400 picture (R across, G down) decoded at 1/8 scale gives
  // the centre crop's picture, within a few levels of the full-size decode's.
  std::vector<unsigned char> smooth(400u * 400 * 3);
  for (std::size_t i = 0; i < smooth.size(); i += 3) {
    smooth[i] = static_cast<unsigned char>(i / 3 % 400 * 255 / 399);
    smooth[i + 1] = static_cast<unsigned char>(i / 3 / 400 * 255 / 399);
    smooth[i + 2] = 128;
  }
  fs::create_directories(dir.file("tree/train/a"));
  fs::create_directories(dir.file("tree/val/a"));
  write_bytes(dir.file("tree/train/a/big.jpg"), jpeg_bytes(400, 400, smooth));
  write_bytes(dir.file("tree/val/a/big.jpg"), jpeg_bytes(400, 400, smooth));
  ImageFolderOptions options;
  options.size = 24;
  options.augment = false;
  const auto bytes = epoch_bytes(read_image_folder(dir.file("tree"), options).train, 0, 1);
  const DecodedImage whole = decode_image(dir.file("tree/train/a/big.jpg"));
  std::vector<std::uint8_t> expected(3u * 24 * 24);
  resample(whole, center_crop(400, 400, 24), 24, 3, expected.data());
  double difference = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    difference += std::abs(bytes[i] - expected[i]);
  BOOST_TEST(difference / static_cast<double>(expected.size()) < 3.0);
}

BOOST_AUTO_TEST_CASE(alloy_train_reads_a_folder) {
  TempDir dir;
  write_tree(dir.path());
  const test::ProcessResult run =
      test::run_alloy({"train", "--model", "resnet18", "--dataset", "folder", "--data-dir",
                       dir.path(), "--image-size", "32", "--batch-size", "2", "--steps", "3",
                       "--loader-threads", "2", "--device", "cpu", "--threads", "1"});
  BOOST_TEST(run.exit_code == 0, run.errors);
  BOOST_TEST(run.output.find("folder: 5 train, 2 test, 3x32x32, 2 classes") != std::string::npos,
             run.output);
  write_bytes(dir.file("train/ant/a.jpg"), {0xff, 0xd8, 0xff, 0, 0});
  const test::ProcessResult bad = test::run_alloy(
      {"train", "--model", "resnet18", "--dataset", "folder", "--data-dir", dir.path(),
       "--image-size", "32", "--batch-size", "5", "--steps", "1", "--device", "cpu"});
  BOOST_TEST(bad.exit_code == 1);
  BOOST_TEST(bad.errors.find("a.jpg") != std::string::npos, bad.errors);
  // More kinds of bad input through the command: each exit 1, naming the file or folder.
  const auto fails_naming = [](const std::function<void(const std::string&)>& spoil,
                               const std::string& name) {
    TempDir tree;
    write_tree(tree.path());
    spoil(tree.path());
    const test::ProcessResult run = test::run_alloy(
        {"train", "--model", "resnet18", "--dataset", "folder", "--data-dir", tree.path(),
         "--image-size", "32", "--batch-size", "5", "--steps", "1", "--device", "cpu"});
    BOOST_TEST(run.exit_code == 1, name);
    BOOST_TEST(run.errors.find(name) != std::string::npos, run.errors);
  };
  fails_naming(
      [](const std::string& root) {
        write_bytes(root + "/train/bee/c.png", {0x89, 'P'});
      },
      "c.png");
  fails_naming(
      [](const std::string& root) { std::ofstream(root + "/train/ant/notes.txt") << "hi"; },
      "notes.txt");
  fails_naming([](const std::string& root) { fs::create_directories(root + "/train/cow"); }, "cow");
  fails_naming([](const std::string& root) { fs::create_directories(root + "/val/cow"); }, "cow");
}

BOOST_AUTO_TEST_SUITE_END()
