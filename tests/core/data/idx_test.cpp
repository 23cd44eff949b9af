#include "core/data/idx.h"

#include <zlib.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::data;

namespace {

using Bytes = std::vector<std::uint8_t>;

void append_u32(Bytes& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    bytes.push_back((value >> shift) & 0xff);
}

// An IDX file's bytes: magic, dimensions, then `payload`.
Bytes idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const Bytes& payload) {
  Bytes bytes;
  append_u32(bytes, magic);
  for (const std::uint32_t dim : dims)
    append_u32(bytes, dim);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

// Distinct, recognisable payload bytes 0, 7, 14, ...
Bytes pattern(std::size_t count) {
  Bytes bytes(count);
  for (std::size_t i = 0; i < count; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 7);
  return bytes;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE(out.good());
}

class GzWriter {
 public:
  explicit GzWriter(const std::string& path) : file_(gzopen(path.c_str(), "wb")) {
    BOOST_REQUIRE(file_ != nullptr);
  }
  ~GzWriter() { gzclose(file_); }
  GzWriter(const GzWriter&) = delete;
  GzWriter& operator=(const GzWriter&) = delete;
  void write(const Bytes& bytes) {
    BOOST_REQUIRE(gzwrite(file_, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                  static_cast<int>(bytes.size()));
  }

 private:
  gzFile file_;
};

void write_gzip(const std::string& path, const Bytes& bytes) {
  GzWriter(path).write(bytes);
}

Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `action`, which must throw alloy::Error whose message holds every fragment.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& fragments) {
  try {
    action();
    BOOST_ERROR("no error thrown; expected one mentioning '" << fragments.front() << "'");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST_MESSAGE("error: " << message);
    for (const auto& fragment : fragments) {
      BOOST_TEST(message.find(fragment) != std::string::npos,
                 "message '" << message << "' lacks '" << fragment << "'");
    }
    BOOST_TEST(message.find('\n') == std::string::npos, "message is not one line: " << message);
  }
}

constexpr std::uint32_t kImages = 0x803;
constexpr std::uint32_t kLabels = 0x801;

}  // namespace

BOOST_AUTO_TEST_SUITE(idx)

BOOST_AUTO_TEST_CASE(reads_plain_and_gzipped_images) {
  test::TempDir dir;
  const Bytes pixels = pattern(3 * 2 * 5);
  write_plain(dir.file("plain"), idx_bytes(kImages, {3, 2, 5}, pixels));
  write_gzip(dir.file("zipped.gz"), idx_bytes(kImages, {3, 2, 5}, pixels));
  BOOST_TEST(read_all(dir.file("zipped.gz")).at(0) == 0x1f);  // really compressed
  for (const auto& name : {"plain", "zipped.gz"}) {
    const Tensor images = read_idx_images(dir.file(name));
    BOOST_TEST(images.shape() == (Shape{3, 1, 2, 5}), name << ": " << images.str());
    BOOST_TEST(std::string(dtype_name(images.dtype())) == "u8");
    BOOST_TEST(std::string(memory_category_name(images.category())) == "data");
    const std::uint8_t* data = images.data<std::uint8_t>();
    BOOST_TEST(Bytes(data, data + images.numel()) == pixels);
  }
}

BOOST_AUTO_TEST_CASE(reads_plain_and_gzipped_labels) {
  test::TempDir dir;
  const Bytes values = {3, 0, 9, 9, 1, 4};
  write_plain(dir.file("plain"), idx_bytes(kLabels, {6}, values));
  write_gzip(dir.file("zipped.gz"), idx_bytes(kLabels, {6}, values));
  for (const auto& name : {"plain", "zipped.gz"}) {
    const Tensor labels = read_idx_labels(dir.file(name));
    BOOST_TEST(labels.shape() == Shape{6});
    BOOST_TEST(std::string(dtype_name(labels.dtype())) == "i32");
    BOOST_TEST(std::string(memory_category_name(labels.category())) == "data");
    const std::int32_t* data = labels.data<std::int32_t>();
    BOOST_TEST(std::vector<std::int32_t>(data, data + 6) ==
                   std::vector<std::int32_t>(values.begin(), values.end()),
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(dataset_finds_plain_or_gz_files) {
  test::TempDir dir;
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(kImages, {4, 3, 3}, pattern(36)));
  write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(kLabels, {4}, {1, 2, 3, 4}));
  const Dataset dataset = read_idx_dataset(dir.path(), "train", "tiny/train");
  BOOST_TEST(dataset.name == "tiny/train");
  BOOST_TEST(dataset.size() == 4);
  BOOST_TEST(dataset.images.shape() == (Shape{4, 1, 3, 3}));
  BOOST_TEST(dataset.labels.data<std::int32_t>()[3] == 4);
}

BOOST_AUTO_TEST_CASE(a_missing_directory_says_how_to_get_the_data) {
  test::TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  expect_error([&] { read_idx_dataset(missing, "train", "x"); },
               {missing, "does not exist", "apt-get install dataset-fashion-mnist", "--data-dir",
                "--dataset synthetic"});
}

BOOST_AUTO_TEST_CASE(a_missing_file_is_named) {
  test::TempDir dir;
  write_plain(dir.file("train-images-idx3-ubyte"), idx_bytes(kImages, {1, 1, 1}, {0}));
  expect_error([&] { read_idx_dataset(dir.path(), "train", "x"); },
               {"train-labels-idx1-ubyte", "not found"});
  expect_error([&] { read_idx_images(dir.file("absent")); }, {dir.file("absent"), "cannot open"});
}

BOOST_AUTO_TEST_CASE(corrupt_gzip_data_is_reported) {
  test::TempDir dir;
  // A gzip header followed by bytes that are not a deflate stream.
  Bytes corrupt = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03};
  corrupt.insert(corrupt.end(), 64, 0xff);
  write_plain(dir.file("corrupt.gz"), corrupt);
  expect_error([&] { read_idx_images(dir.file("corrupt.gz")); },
               {"corrupt.gz: corrupt or truncated gzip data (invalid"});

  // A valid gzip file cut in half.
  write_gzip(dir.file("whole.gz"), idx_bytes(kImages, {50, 8, 8}, pattern(50 * 64)));
  Bytes cut = read_all(dir.file("whole.gz"));
  cut.resize(cut.size() / 2);
  write_plain(dir.file("cut.gz"), cut);
  expect_error([&] { read_idx_images(dir.file("cut.gz")); },
               {"cut.gz: corrupt or truncated gzip data (unexpected end of file)"});
}

BOOST_AUTO_TEST_CASE(wrong_magic_is_reported) {
  test::TempDir dir;
  write_plain(dir.file("text"),
              {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '!', '!', '!', '!'});
  expect_error([&] { read_idx_images(dir.file("text")); }, {"text", "bad magic", "0x68656c6c"});
  write_plain(dir.file("floats"), idx_bytes(0x00000d03, {1, 1, 1}, {0, 0, 0, 0}));
  expect_error([&] { read_idx_images(dir.file("floats")); }, {"floats", "bad magic"});
}

BOOST_AUTO_TEST_CASE(unexpected_dimensions_are_reported) {
  test::TempDir dir;
  // A labels file where images are expected, and the other way round.
  write_plain(dir.file("labels"), idx_bytes(kLabels, {2}, {0, 1}));
  expect_error([&] { read_idx_images(dir.file("labels")); },
               {"labels", "unexpected dimensions", "rank 1, expected rank 3"});
  write_plain(dir.file("images"), idx_bytes(kImages, {1, 1, 1}, {0}));
  expect_error([&] { read_idx_labels(dir.file("images")); },
               {"images", "unexpected dimensions", "rank 3, expected rank 1"});
  // Colour images as an idx4 file.
  write_plain(dir.file("rgb"), idx_bytes(0x804, {1, 3, 2, 2}, pattern(12)));
  expect_error([&] { read_idx_images(dir.file("rgb")); }, {"rgb", "unexpected dimensions"});
  write_plain(dir.file("empty-rows"), idx_bytes(kImages, {2, 0, 28}, {}));
  expect_error([&] { read_idx_images(dir.file("empty-rows")); },
               {"empty-rows", "unexpected dimensions 2 x 0 x 28"});
}

BOOST_AUTO_TEST_CASE(truncated_files_are_reported) {
  test::TempDir dir;
  const Bytes short_images = idx_bytes(kImages, {3, 4, 4}, pattern(47));
  write_plain(dir.file("short"), short_images);
  expect_error([&] { read_idx_images(dir.file("short")); },
               {"short", "truncated", "48 bytes", "has 47"});
  write_gzip(dir.file("short.gz"), short_images);
  expect_error([&] { read_idx_images(dir.file("short.gz")); },
               {"short.gz", "truncated", "48 bytes", "has 47"});
  write_gzip(dir.file("short-labels.gz"), idx_bytes(kLabels, {5}, {1, 2}));
  expect_error([&] { read_idx_labels(dir.file("short-labels.gz")); },
               {"short-labels.gz", "truncated"});
  write_plain(dir.file("header"), {0, 0, 8, 3, 0, 0});
  expect_error([&] { read_idx_images(dir.file("header")); }, {"header", "truncated header"});
  write_plain(dir.file("empty"), {});
  expect_error([&] { read_idx_images(dir.file("empty")); }, {"empty", "truncated header"});
  // A header promising terabytes must fail without trying to allocate them.
  write_gzip(dir.file("huge.gz"), idx_bytes(kImages, {0xffffffff, 0xffff, 0xffff}, pattern(10)));
  expect_error([&] { read_idx_images(dir.file("huge.gz")); }, {"huge.gz", "truncated"});
}

BOOST_AUTO_TEST_CASE(trailing_garbage_is_reported) {
  test::TempDir dir;
  const Bytes long_images = idx_bytes(kImages, {2, 2, 2}, pattern(9));
  write_plain(dir.file("long"), long_images);
  expect_error([&] { read_idx_images(dir.file("long")); }, {"long", "trailing garbage", "8 bytes"});
  write_gzip(dir.file("long.gz"), long_images);
  expect_error([&] { read_idx_images(dir.file("long.gz")); }, {"long.gz", "trailing garbage"});
  write_plain(dir.file("long-labels"), idx_bytes(kLabels, {2}, {1, 2, 3}));
  expect_error([&] { read_idx_labels(dir.file("long-labels")); },
               {"long-labels", "trailing garbage"});
}

BOOST_AUTO_TEST_CASE(labels_out_of_range_are_reported) {
  test::TempDir dir;
  write_plain(dir.file("labels"), idx_bytes(kLabels, {4}, {0, 9, 10, 3}));
  expect_error([&] { read_idx_labels(dir.file("labels")); },
               {"labels", "label 10 of example 2", "10 classes"});
  BOOST_TEST(read_idx_labels(dir.file("labels"), 11).data<std::int32_t>()[2] == 10);
}

BOOST_AUTO_TEST_CASE(differing_counts_are_reported) {
  test::TempDir dir;
  write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(kImages, {3, 1, 2}, pattern(6)));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes(kLabels, {2}, {0, 1}));
  expect_error(
      [&] { read_idx_dataset(dir.path(), "t10k", "x"); },
      {"t10k-labels-idx1-ubyte.gz", "label count 2", "image count 3", "t10k-images-idx3-ubyte"});
}

BOOST_AUTO_TEST_SUITE_END()
