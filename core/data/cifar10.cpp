#include "core/data/cifar10.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace alloy::data {

namespace {

namespace fs = std::filesystem;

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

std::int64_t record_count(const std::string& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    fail(path, ": no such CIFAR-10 file (get the binary version, cifar-10-binary.tar.gz, and ",
         "give its directory as --data-dir)");
  }
  const auto bytes = static_cast<std::int64_t>(fs::file_size(path, error));
  if (error) fail(path, ": cannot read its size: ", error.message());
  if (bytes == 0 || bytes % kCifar10RecordBytes != 0) {
    fail(path, ": ", bytes, " bytes is not a whole number of CIFAR-10 records of ",
         kCifar10RecordBytes, " bytes (1 label byte and 3x32x32 pixels)");
  }
  return bytes / kCifar10RecordBytes;
}

}  // namespace

Dataset read_cifar10_files(const std::vector<std::string>& files, const std::string& name) {
  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (const std::string& path : files) {
    counts.push_back(record_count(path));
    total += counts.back();
  }
  Dataset dataset;
  dataset.name = name;
  dataset.classes = kCifar10Classes;
  dataset.images = Tensor::empty({total, 3, kCifar10Size, kCifar10Size}, DType::u8, Device::cpu(),
                                 MemoryCategory::data);
  dataset.labels = Tensor::empty({total}, DType::i32, Device::cpu(), MemoryCategory::data);
  std::uint8_t* pixels = dataset.images.data<std::uint8_t>();
  std::int32_t* labels = dataset.labels.data<std::int32_t>();
  constexpr std::size_t kImageBytes = kCifar10RecordBytes - 1;
  std::vector<unsigned char> record(kCifar10RecordBytes);
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string& path = files[f];
    const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
    if (!file) fail(path, ": cannot open: ", std::strerror(errno));
    for (std::int64_t r = 0; r < counts[f]; ++r) {
      if (std::fread(record.data(), 1, record.size(), file.get()) != record.size()) {
        fail(path, ": cannot read record ", r, " (", std::strerror(errno), ")");
      }
      if (record[0] >= kCifar10Classes) {
        fail(path, ": record ", r, " has label ", static_cast<int>(record[0]),
             "; CIFAR-10 labels are 0 to 9");
      }
      *labels++ = record[0];
      std::memcpy(pixels, record.data() + 1, kImageBytes);
      pixels += kImageBytes;
    }
  }
  return dataset;
}

DatasetPair read_cifar10(const std::string& directory) {
  std::error_code error;
  std::string dir = directory;
  const fs::path nested = fs::path(directory) / "cifar-10-batches-bin";
  if (!fs::exists(fs::path(directory) / "test_batch.bin", error) &&
      fs::is_directory(nested, error)) {
    dir = nested.string();
  }
  std::vector<std::string> train;
  for (int batch = 1; batch <= 5; ++batch)
    train.push_back((fs::path(dir) / ("data_batch_" + std::to_string(batch) + ".bin")).string());
  DatasetPair pair;
  pair.train = read_cifar10_files(train, "cifar10/train");
  pair.test = read_cifar10_files({(fs::path(dir) / "test_batch.bin").string()}, "cifar10/test");
  return pair;
}

}  // namespace alloy::data
