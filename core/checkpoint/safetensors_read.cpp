#include "core/checkpoint/safetensors_read.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "core/checkpoint/posix_file.h"
#include "core/error.h"

namespace alloy::checkpoint {

namespace {

// A strict reader of the header's JSON: the subset safetensors uses, every fault thrown with
// the byte where it was found.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  [[noreturn]] void fault(const std::string& what) const {
    fail("safetensors file ", name_, ": bad header at byte ", at_, ": ", what);
  }

  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  bool peek(char c) {
    skip_space();
    return at_ < text_.size() && text_[at_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fault(std::string("expected '") + c + "'");
    ++at_;
  }
  bool at_end() {
    skip_space();
    return at_ == text_.size();
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fault("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fault("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fault("unterminated escape");
      const char e = text_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, code_point());
          break;
        default:
          fault(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  // A non-negative integer that fits in `limit`.
  std::uint64_t integer(std::uint64_t limit) {
    skip_space();
    const std::size_t start = at_;
    std::uint64_t value = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[at_] - '0');
      // digit > limit first: limit - digit would wrap and let a bound under 10 pass anything.
      if (digit > limit || value > (limit - digit) / 10) fault("integer out of range");
      value = value * 10 + digit;
      ++at_;
    }
    if (at_ == start) fault("expected a non-negative integer");
    if (text_[start] == '0' && at_ - start > 1) fault("integer with a leading zero");
    return value;
  }

  std::vector<std::uint64_t> integers(std::uint64_t limit) {
    std::vector<std::uint64_t> values;
    expect('[');
    if (peek(']')) {
      ++at_;
      return values;
    }
    do {
      values.push_back(integer(limit));
    } while (comma());
    expect(']');
    return values;
  }

  // After an element: true when a comma follows (and is taken).
  bool comma() {
    if (!peek(',')) return false;
    ++at_;
    return true;
  }

 private:
  std::uint32_t hex4() {
    if (text_.size() - at_ < 4) fault("short \\u escape");
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_++];
      value <<= 4;
      if (h >= '0' && h <= '9') {
        value |= static_cast<std::uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        value |= static_cast<std::uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        value |= static_cast<std::uint32_t>(h - 'A' + 10);
      } else {
        fault("bad hex digit in a \\u escape");
      }
    }
    return value;
  }

  std::uint32_t code_point() {
    const std::uint32_t high = hex4();
    if (high < 0xD800 || high > 0xDFFF) return high;
    if (high > 0xDBFF) fault("lone low surrogate");
    if (text_.size() - at_ < 2 || text_[at_] != '\\' || text_[at_ + 1] != 'u') {
      fault("high surrogate without its low one");
    }
    at_ += 2;
    const std::uint32_t low = hex4();
    if (low < 0xDC00 || low > 0xDFFF) fault("high surrogate without its low one");
    return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
  }

  static void append_utf8(std::string& out, std::uint32_t c) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }

  std::string_view text_;
  const std::string& name_;
  std::size_t at_ = 0;
};

DType dtype_named(const std::string& text, HeaderParser& parser) {
  if (text == "F32") return DType::f32;
  if (text == "F16") return DType::f16;
  if (text == "BF16") return DType::bf16;
  if (text == "U8") return DType::u8;
  if (text == "I32") return DType::i32;
  parser.fault("dtype '" + text + "' is not one of F32, F16, BF16, U8, I32");
}

// One tensor's {"dtype", "shape", "data_offsets"}, checked against `data_bytes`.
SafetensorsFile::Entry parse_entry(HeaderParser& parser, const std::string& tensor,
                                   std::size_t data_bytes) {
  SafetensorsFile::Entry entry;
  bool dtype = false, shape = false, offsets = false;
  std::vector<std::uint64_t> range;
  parser.expect('{');
  do {
    const std::string key = parser.string();
    parser.expect(':');
    if (key == "dtype" && !dtype) {
      entry.dtype = dtype_named(parser.string(), parser);
      dtype = true;
    } else if (key == "shape" && !shape) {
      for (const std::uint64_t d : parser.integers(std::numeric_limits<std::int64_t>::max()))
        entry.shape.push_back(static_cast<std::int64_t>(d));
      shape = true;
    } else if (key == "data_offsets" && !offsets) {
      range = parser.integers(data_bytes);
      offsets = true;
    } else {
      parser.fault("tensor " + tensor + ": unexpected or repeated key '" + key + "'");
    }
  } while (parser.comma());
  parser.expect('}');
  if (!dtype || !shape || !offsets) {
    parser.fault("tensor " + tensor + " lacks dtype, shape or data_offsets");
  }
  if (range.size() != 2 || range[0] > range[1]) {
    parser.fault("tensor " + tensor + ": data_offsets is not [begin, end] with begin <= end");
  }
  // The element count, bounded by the data it must fit in.
  std::uint64_t elements = 1;
  const std::uint64_t size = dtype_size(entry.dtype);
  for (const std::int64_t d : entry.shape) {
    const auto extent = static_cast<std::uint64_t>(d);
    if (extent != 0 && elements > data_bytes / size / extent) {
      parser.fault("tensor " + tensor + ": shape " + shape_str(entry.shape) +
                   " is larger than the file's data");
    }
    elements *= extent;
  }
  if (elements * size != range[1] - range[0]) {
    parser.fault("tensor " + tensor + ": " + std::to_string(range[1] - range[0]) +
                 " bytes for shape " + shape_str(entry.shape) + " of " +
                 std::string(dtype_name(entry.dtype)));
  }
  entry.offset = static_cast<std::size_t>(range[0]);
  entry.bytes = static_cast<std::size_t>(range[1] - range[0]);
  return entry;
}

}  // namespace

SafetensorsFile parse_safetensors(std::string file, const std::string& name) {
  if (file.size() < 8) {
    fail("safetensors file ", name, ": ", file.size(), " bytes, too short for the header length");
  }
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i)
    header = (header << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  if (header > kMaxSafetensorsHeader || header > file.size() - 8) {
    fail("safetensors file ", name, ": header of ", header, " bytes in a file of ", file.size());
  }
  SafetensorsFile out;
  out.data_start = 8 + static_cast<std::size_t>(header);
  const std::size_t data_bytes = file.size() - out.data_start;
  HeaderParser parser(std::string_view(file).substr(8, static_cast<std::size_t>(header)), name);
  bool metadata = false;  // not out.metadata.empty(): a first "__metadata__" may be {}
  parser.expect('{');
  if (!parser.peek('}')) {
    do {
      const std::string key = parser.string();
      parser.expect(':');
      if (key == "__metadata__") {
        if (metadata) parser.fault("repeated __metadata__");
        metadata = true;
        parser.expect('{');
        if (!parser.peek('}')) {
          do {
            const std::string field = parser.string();
            parser.expect(':');
            if (out.metadata.count(field) != 0) {
              parser.fault("metadata field " + field + " appears twice");
            }
            out.metadata[field] = parser.string();
          } while (parser.comma());
        }
        parser.expect('}');
      } else {
        if (out.tensors.count(key) != 0) parser.fault("tensor " + key + " appears twice");
        out.tensors[key] = parse_entry(parser, key, data_bytes);
      }
    } while (parser.comma());
  }
  parser.expect('}');
  if (!parser.at_end()) parser.fault("text after the header's object");
  out.contents = std::move(file);
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const FileDescriptor file = open_or_fail(path, O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) {
    fail("cannot stat safetensors file ", path, ": ", std::strerror(errno));
  }
  std::string bytes(static_cast<std::size_t>(info.st_size), '\0');
  bytes.resize(file.read_up_to(bytes.data(), bytes.size()));
  return parse_safetensors(std::move(bytes), path);
}

}  // namespace alloy::checkpoint
