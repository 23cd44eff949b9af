// CIFAR-10's binary batches: labels and R, G, B planes land where they belong, the five training
// batches are read in order, and a file that is not whole records, a missing file or a label
// above 9 fails naming the file.
#include "core/data/cifar10.h"

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::data;
using alloy::test::TempDir;

namespace {

// The pixel CIFAR file `file` holds at record `record`, channel `channel`, position `i`.
unsigned char pixel(int file, int record, int channel, int i) {
  return static_cast<unsigned char>((file * 31 + record * 7 + channel * 101 + i * 13) % 256);
}

// A file of `records` records, labels (file + record) % 10.
void write_batch(const std::string& path, int file, int records) {
  std::ofstream out(path, std::ios::binary);
  for (int r = 0; r < records; ++r) {
    out.put(static_cast<char>((file + r) % 10));
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 1024; ++i)
        out.put(static_cast<char>(pixel(file, r, c, i)));
    }
  }
}

void write_cifar(const std::string& dir) {
  for (int batch = 1; batch <= 5; ++batch)
    write_batch(dir + "/data_batch_" + std::to_string(batch) + ".bin", batch, batch + 1);
  write_batch(dir + "/test_batch.bin", 0, 3);
}

std::string error_of(const std::string& dir) {
  try {
    read_cifar10(dir);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cifar10)

BOOST_AUTO_TEST_CASE(reads_labels_and_planes_in_order) {
  TempDir dir;
  write_cifar(dir.path());
  const DatasetPair data = read_cifar10(dir.path());
  BOOST_TEST(data.train.size() == 2 + 3 + 4 + 5 + 6);
  BOOST_TEST(data.test.size() == 3);
  BOOST_TEST(data.train.classes == 10);
  BOOST_TEST((data.train.images.shape() == Shape{20, 3, 32, 32}));
  const std::uint8_t* images = data.train.images.data<std::uint8_t>();
  const std::int32_t* labels = data.train.labels.data<std::int32_t>();
  int example = 0;
  int wrong_pixels = 0, wrong_labels = 0;
  for (int batch = 1; batch <= 5; ++batch) {
    for (int r = 0; r < batch + 1; ++r, ++example) {
      wrong_labels += labels[example] != (batch + r) % 10;
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < 1024; ++i)
          wrong_pixels += images[(example * 3 + c) * 1024 + i] != pixel(batch, r, c, i);
      }
    }
  }
  BOOST_TEST(wrong_labels == 0);
  BOOST_TEST(wrong_pixels == 0);
  BOOST_TEST(data.test.labels.data<std::int32_t>()[2] == 2);
  BOOST_TEST(data.test.images.data<std::uint8_t>()[2 * 3072 + 1024 + 5] == pixel(0, 2, 1, 5));
}

BOOST_AUTO_TEST_CASE(the_archives_subdirectory_is_found) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("cifar-10-batches-bin"));
  write_cifar(dir.file("cifar-10-batches-bin"));
  BOOST_TEST(read_cifar10(dir.path()).test.size() == 3);
}

BOOST_AUTO_TEST_CASE(bad_files_fail_naming_them) {
  TempDir dir;
  write_cifar(dir.path());
  {
    std::ofstream out(dir.file("data_batch_3.bin"), std::ios::binary | std::ios::app);
    out.put('x');  // one byte past the last whole record
  }
  std::string message = error_of(dir.path());
  BOOST_TEST(message.find("data_batch_3.bin") != std::string::npos, message);
  BOOST_TEST(message.find("whole number") != std::string::npos, message);

  write_batch(dir.file("data_batch_3.bin"), 3, 4);
  std::filesystem::remove(dir.file("test_batch.bin"));
  message = error_of(dir.path());
  BOOST_TEST(message.find("test_batch.bin") != std::string::npos, message);

  write_batch(dir.file("test_batch.bin"), 0, 3);
  {
    std::fstream file(dir.file("data_batch_5.bin"),
                      std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(3073 * 2);
    file.put(static_cast<char>(10));  // the third record's label
  }
  message = error_of(dir.path());
  BOOST_TEST(message.find("data_batch_5.bin: record 2 has label 10") != std::string::npos, message);
  BOOST_TEST(error_of(dir.path() + "/nowhere").find("data_batch_1.bin") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(alloy_train_reads_it) {
  TempDir dir;
  write_cifar(dir.path());
  const test::ProcessResult run = test::run_alloy(
      {"train", "--model", "resnet18", "--dataset", "cifar10", "--data-dir", dir.path(),
       "--batch-size", "4", "--steps", "2", "--device", "cpu", "--threads", "1"});
  BOOST_TEST(run.exit_code == 0, run.errors);
  BOOST_TEST(run.output.find("cifar10: 20 train, 3 test, 3x32x32, 10 classes") != std::string::npos,
             run.output);
  std::ofstream(dir.file("data_batch_2.bin"), std::ios::binary | std::ios::app).put('x');
  const test::ProcessResult bad = test::run_alloy(
      {"train", "--dataset", "cifar10", "--data-dir", dir.path(), "--device", "cpu"});
  BOOST_TEST(bad.exit_code == 1);
  BOOST_TEST(bad.errors.find("data_batch_2.bin") != std::string::npos, bad.errors);
}

BOOST_AUTO_TEST_SUITE_END()
