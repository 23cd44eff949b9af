#include "core/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace alloy::data {

namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr std::uint8_t kUnsignedByte = 0x08;
// Deflate expands at most 1032:1, so a gzip file of S bytes cannot hold more than this many
// times S: a header promising more is rejected before anything is allocated.
constexpr std::uint64_t kMaxInflation = 1032;

// A file opened through zlib, which reads gzip and plain files alike.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) fail(path, ": cannot open: ", std::strerror(errno));
    gzbuffer(file_, 1 << 18);  // larger than the 8 KiB default: fewer system calls
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  const std::string& path() const { return path_; }

  // zlib prefixes its messages with the path, which ours already start with.
  std::string without_path(const std::string& message) const {
    const std::string prefix = path_ + ": ";
    return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
  }

  // Reads up to `bytes`, fewer only at the end of the data.
  std::size_t read(void* buffer, std::size_t bytes) {
    auto* out = static_cast<unsigned char*>(buffer);
    std::size_t total = 0;
    while (total < bytes) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(bytes - total, 1u << 30));
      const int got = gzread(file_, out + total, chunk);
      int code = Z_OK;
      const char* message = gzerror(file_, &code);
      if (got < 0 || code != Z_OK) {
        fail(path_, ": corrupt or truncated gzip data (", without_path(message), ")");
      }
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
    }
    return total;
  }

  // The most payload bytes this file can possibly hold.
  std::uint64_t capacity() {
    std::error_code error;
    const std::uint64_t size = fs::file_size(path_, error);
    if (error) fail(path_, ": cannot read its size: ", error.message());
    return gzdirect(file_) ? size : size * kMaxInflation;
  }

 private:
  std::string path_;
  gzFile file_;
};

std::string hex32(std::uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << value;
  return out.str();
}

std::uint32_t read_u32(GzFile& file, const char* what) {
  unsigned char bytes[4];
  const std::size_t got = file.read(bytes, sizeof bytes);
  if (got != sizeof bytes) {
    fail(file.path(), ": truncated header: the file ends inside the ", what);
  }
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

// Reads the magic number and dimensions; `kind` names the file type in messages.
std::vector<std::uint32_t> read_header(GzFile& file, std::uint32_t expected_magic,
                                       const char* kind) {
  const std::uint32_t magic = read_u32(file, "magic number");
  const std::uint32_t rank = expected_magic & 0xff;
  if ((magic >> 8) != kUnsignedByte) {
    fail(file.path(), ": bad magic number ", hex32(magic), ", expected ", hex32(expected_magic),
         " (", kind, ")");
  }
  if (magic != expected_magic) {
    fail(file.path(), ": unexpected dimensions: the header declares an array of rank ",
         magic & 0xff, ", expected rank ", rank, " (", kind, ")");
  }
  std::vector<std::uint32_t> dims;
  for (std::uint32_t axis = 0; axis < rank; ++axis)
    dims.push_back(read_u32(file, "dimensions"));
  return dims;
}

// The payload size dims[0] x ... x dims[n-1], rejected when the file cannot hold it (which
// also keeps the product from overflowing).
std::size_t payload_bytes(GzFile& file, const std::vector<std::uint32_t>& dims) {
  const std::uint64_t capacity = file.capacity();
  std::uint64_t bytes = 1;
  for (const std::uint32_t dim : dims) {
    if (dim != 0 && bytes > capacity / dim) {
      std::ostringstream shape;
      for (std::size_t i = 0; i < dims.size(); ++i)
        shape << (i ? " x " : "") << dims[i];
      fail(file.path(), ": truncated: the header promises ", shape.str(),
           " bytes of data, more than the file can hold");
    }
    bytes *= dim;
  }
  return static_cast<std::size_t>(bytes);
}

// Fills `buffer` with exactly `bytes` payload bytes and checks nothing follows them.
void read_payload(GzFile& file, void* buffer, std::size_t bytes) {
  const std::size_t got = file.read(buffer, bytes);
  if (got != bytes) {
    fail(file.path(), ": truncated: the header promises ", bytes, " bytes of data, the file has ",
         got);
  }
  unsigned char extra = 0;
  if (file.read(&extra, 1) != 0) {
    fail(file.path(), ": trailing garbage after the ", bytes, " bytes of data the header promises");
  }
}

// `directory`/`base`, or `directory`/`base`.gz when only that exists.
std::string find_file(const std::string& directory, const std::string& base) {
  const fs::path plain = fs::path(directory) / base;
  if (fs::is_regular_file(plain)) return plain.string();
  const fs::path zipped = fs::path(directory) / (base + ".gz");
  if (fs::is_regular_file(zipped)) return zipped.string();
  fail(plain.string(), ": file not found (nor ", zipped.filename().string(), ")");
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  GzFile file(path);
  const std::vector<std::uint32_t> dims = read_header(file, kImagesMagic, "idx3-ubyte images");
  if (dims[1] == 0 || dims[2] == 0) {
    fail(path, ": unexpected dimensions ", dims[0], " x ", dims[1], " x ", dims[2],
         ": images need at least one row and one column");
  }
  const std::size_t bytes = payload_bytes(file, dims);
  Tensor images =
      Tensor::empty({dims[0], 1, dims[1], dims[2]}, DType::u8, Device::cpu(), MemoryCategory::data);
  read_payload(file, images.raw(), bytes);
  return images;
}

Tensor read_idx_labels(const std::string& path, int classes) {
  ALLOY_CHECK(classes >= 1 && classes <= 256, path, ": cannot check labels against ", classes,
              " classes (must be 1 to 256)");
  GzFile file(path);
  const std::vector<std::uint32_t> dims = read_header(file, kLabelsMagic, "idx1-ubyte labels");
  std::vector<std::uint8_t> values(payload_bytes(file, dims));
  read_payload(file, values.data(), values.size());
  Tensor labels = Tensor::empty({dims[0]}, DType::i32, Device::cpu(), MemoryCategory::data);
  std::int32_t* out = labels.data<std::int32_t>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= classes) {
      fail(path, ": label ", int{values[i]}, " of example ", i, " is not below the ", classes,
           " classes");
    }
    out[i] = values[i];
  }
  return labels;
}

Dataset read_idx_dataset(const std::string& directory, const std::string& prefix,
                         const std::string& name) {
  if (fs::exists(directory) && !fs::is_directory(directory)) {
    fail("data directory ", directory, " is not a directory; pass --data-dir with the directory ",
         "that holds the IDX files");
  }
  if (!fs::is_directory(directory)) {
    fail("data directory ", directory,
         " does not exist; install Fashion-MNIST with `apt-get install dataset-fashion-mnist` "
         "(tools/setup.sh does), pass --data-dir with the directory of the IDX files, or use "
         "--dataset synthetic");
  }
  const std::string images_path = find_file(directory, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(directory, prefix + "-labels-idx1-ubyte");
  Dataset dataset;
  dataset.name = name;
  dataset.images = read_idx_images(images_path);
  dataset.labels = read_idx_labels(labels_path, dataset.classes);
  if (dataset.images.dim(0) != dataset.labels.numel()) {
    fail(labels_path, ": label count ", dataset.labels.numel(), " differs from the image count ",
         dataset.images.dim(0), " of ", images_path);
  }
  return dataset;
}

}  // namespace alloy::data
