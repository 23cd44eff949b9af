// alloy train on bad input: each kind of bad image folder or CIFAR-10 file ends the run with exit
// 1 and one line on stderr, `alloy: error: `, naming the file or folder and what is wrong with it.
// CMYK JPEGs and 16-bit PNGs are refused, not converted; an image smaller than the crop is scaled
// up and trains (docs/command_line.md, --loader-threads).
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/image_files.h"
#include "tests/support/process.h"

using namespace alloy::test;
namespace fs = std::filesystem;

namespace {

// train/{ant,bee} and val/{ant,bee}, a JPEG and a PNG in each training class: 4 training images,
// one batch, so that one step decodes them all; the cut epoch's evaluation decodes val's.
void write_tree(const std::string& root) {
  for (const char* split : {"train", "val"}) {
    for (const char* cls : {"ant", "bee"}) {
      fs::create_directories(fs::path(root) / split / cls);
    }
  }
  write_bytes(root + "/train/ant/a.jpg", jpeg_bytes(32, 32, pattern(32, 32, 1)));
  write_png(root + "/train/ant/b.png", 32, 32, pattern(32, 32, 2));
  write_bytes(root + "/train/bee/c.jpg", jpeg_bytes(32, 32, pattern(32, 32, 3)));
  write_png(root + "/train/bee/d.png", 32, 32, pattern(32, 32, 4));
  write_png(root + "/val/ant/x.png", 32, 32, pattern(32, 32, 5));
  write_bytes(root + "/val/bee/y.jpg", jpeg_bytes(32, 32, pattern(32, 32, 6)));
}

ProcessResult train_on(const std::string& root) {
  return run_alloy({"train", "--model",      "mlp", "--dataset",        "folder", "--data-dir",
                    root,    "--image-size", "28",  "--channels",       "1",      "--batch-size",
                    "4",     "--steps",      "1",   "--loader-threads", "1",      "--device",
                    "cpu",   "--threads",    "1"});
}

// Exit 1 and one error line, `alloy: error: ` naming `names` and saying `says`, the last of
// stderr; before it stderr holds only the command's notice of the device it chose.
void check_fails(const ProcessResult& run, const std::string& names, const std::string& says) {
  BOOST_TEST(run.exit_code == 1, run.errors);
  const std::string notice = "alloy: device cpu\n";
  const std::string error = run.errors.compare(0, notice.size(), notice) == 0
                                ? run.errors.substr(notice.size())
                                : run.errors;
  const std::string prefix = "alloy: error: ";
  BOOST_TEST(error.compare(0, prefix.size(), prefix) == 0, run.errors);
  BOOST_TEST(error.find('\n') == error.size() - 1, run.errors);
  BOOST_TEST(error.find(names) != std::string::npos, run.errors);
  BOOST_TEST(error.find(says) != std::string::npos, run.errors);
}

// A tree whose `file` is `bytes` fails naming the file and saying `says`.
void check_file_fails(const std::string& file, const std::vector<unsigned char>& bytes,
                      const std::string& says) {
  TempDir dir;
  write_tree(dir.path());
  write_bytes(dir.file(file), bytes);
  check_fails(train_on(dir.path()), dir.file(file), says);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(image_folder_errors)

BOOST_AUTO_TEST_CASE(the_unspoiled_tree_trains) {
  TempDir dir;
  write_tree(dir.path());
  const ProcessResult run = train_on(dir.path());
  BOOST_TEST(run.exit_code == 0, run.errors);
  BOOST_TEST(run.output.find("folder: 4 train, 2 test, 1x28x28, 2 classes") != std::string::npos,
             run.output);
}

BOOST_AUTO_TEST_CASE(a_truncated_jpeg) {
  std::vector<unsigned char> bytes = jpeg_bytes(32, 32, pattern(32, 32, 7));
  bytes.resize(bytes.size() / 2);  // within the scan: the header still reads
  check_file_fails("train/bee/c.jpg", bytes, "truncated JPEG");
}

BOOST_AUTO_TEST_CASE(a_truncated_png) {
  TempDir dir;
  const std::string whole = dir.file("whole.png");
  write_png(whole, 32, 32, pattern(32, 32, 8));
  std::vector<unsigned char> bytes = read_all(whole);
  bytes.resize(bytes.size() / 2);  // within the image data: the header still reads
  check_file_fails("train/ant/b.png", bytes, "truncated PNG");
}

BOOST_AUTO_TEST_CASE(a_corrupt_jpeg) {
  // Eight bytes of the entropy-coded data (after the start-of-scan header) inverted: TurboJPEG
  // reads a corrupt scan, a warning the reader takes as an error.
  std::vector<unsigned char> bytes = jpeg_bytes(32, 32, pattern(32, 32, 9));
  std::size_t sos = 0;
  while (sos + 3 < bytes.size() && !(bytes[sos] == 0xff && bytes[sos + 1] == 0xda))
    ++sos;
  BOOST_TEST_REQUIRE(sos + 3 < bytes.size());
  const std::size_t scan =
      sos + 2 + (static_cast<std::size_t>(bytes[sos + 2]) << 8 | bytes[sos + 3]);
  const std::size_t middle = scan + (bytes.size() - 2 - scan) / 2;
  BOOST_TEST_REQUIRE(middle + 8 < bytes.size() - 2);
  for (std::size_t i = middle; i < middle + 8; ++i)
    bytes[i] ^= 0xff;
  check_file_fails("train/ant/a.jpg", bytes, "corrupt or truncated JPEG");
}

BOOST_AUTO_TEST_CASE(a_text_file_named_jpg) {
  const std::string text = "not an image\n";
  check_file_fails("train/bee/c.jpg", {text.begin(), text.end()}, "not a JPEG or PNG image");
}

BOOST_AUTO_TEST_CASE(an_empty_class_folder) {
  TempDir dir;
  write_tree(dir.path());
  fs::create_directories(dir.file("train/cow"));
  check_fails(train_on(dir.path()), dir.file("train/cow"), "empty class folder");
}

BOOST_AUTO_TEST_CASE(a_class_of_val_that_train_lacks) {
  TempDir dir;
  write_tree(dir.path());
  fs::create_directories(dir.file("val/cow"));
  write_png(dir.file("val/cow/z.png"), 32, 32, pattern(32, 32, 10));
  check_fails(train_on(dir.path()), dir.file("val/cow"), "not among train's classes");
}

BOOST_AUTO_TEST_CASE(a_cmyk_jpeg_is_refused) {
  // Refused, not converted: the reader says so and how to fix it. In val, so reached by the cut
  // epoch's evaluation.
  check_file_fails("val/bee/y.jpg",
                   jpeg_bytes(32, 32, std::vector<unsigned char>(32 * 32 * 4, 90), TJPF_CMYK),
                   "CMYK JPEG; convert it to RGB");
}

BOOST_AUTO_TEST_CASE(a_16_bit_png_is_refused) {
  TempDir dir;
  write_tree(dir.path());
  write_png(dir.file("train/bee/d.png"), 32, 32, std::vector<unsigned char>(32 * 32 * 2, 7),
            PNG_FORMAT_LINEAR_Y);
  check_fails(train_on(dir.path()), dir.file("train/bee/d.png"), "16-bit PNG; convert it");
}

BOOST_AUTO_TEST_CASE(an_image_smaller_than_the_crop_is_scaled_up) {
  // 5x4 and 3x3 images at --image-size 28: the random crop in train, the centre crop in val.
  TempDir dir;
  write_tree(dir.path());
  write_png(dir.file("train/ant/b.png"), 5, 4, pattern(5, 4, 11));
  write_bytes(dir.file("train/bee/c.jpg"), jpeg_bytes(3, 3, pattern(3, 3, 12)));
  write_png(dir.file("val/ant/x.png"), 5, 4, pattern(5, 4, 13));
  const ProcessResult run = train_on(dir.path());
  BOOST_TEST(run.exit_code == 0, run.errors);
  BOOST_TEST(run.output.find("folder: 4 train, 2 test, 1x28x28, 2 classes") != std::string::npos,
             run.output);
}

BOOST_AUTO_TEST_CASE(a_cifar10_batch_of_the_wrong_size) {
  TempDir dir;
  const std::vector<unsigned char> record(3073, 1);  // label 1, 3x32x32 pixels
  for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                           "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}) {
    std::vector<unsigned char> bytes;
    for (int r = 0; r < 2; ++r)
      bytes.insert(bytes.end(), record.begin(), record.end());
    write_bytes(dir.file(name), bytes);
  }
  std::vector<unsigned char> bytes = read_all(dir.file("data_batch_3.bin"));
  bytes.resize(bytes.size() - 100);  // the second record cut short
  write_bytes(dir.file("data_batch_3.bin"), bytes);
  const ProcessResult run =
      run_alloy({"train", "--model", "resnet18", "--dataset", "cifar10", "--data-dir", dir.path(),
                 "--batch-size", "2", "--steps", "1", "--device", "cpu", "--threads", "1"});
  check_fails(run, dir.file("data_batch_3.bin"),
              "6046 bytes is not a whole number of CIFAR-10 records");
}

BOOST_AUTO_TEST_SUITE_END()
