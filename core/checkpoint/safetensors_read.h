// Reading a safetensors file (the format export_safetensors writes, and Hugging Face's): an
// 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to {"dtype",
// "shape", "data_offsets": [begin, end]} (byte offsets into the data after the header), with
// string metadata under "__metadata__", then the tensor bytes, little-endian.
//
// The reader trusts nothing in the file: the header's JSON is parsed strictly (objects,
// strings with their escapes, arrays of non-negative integers), and every tensor's dtype,
// shape and offsets are checked against the data before any byte is handed out. Any fault is an
// Error naming the file and what is wrong with it.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace alloy::checkpoint {

struct SafetensorsFile {
  struct Entry {
    DType dtype = DType::f32;  // F32, F16, BF16, U8 or I32
    Shape shape;
    std::size_t offset = 0;  // into the data after the header
    std::size_t bytes = 0;   // numel * dtype size
  };
  std::string contents;        // the whole file
  std::size_t data_start = 0;  // where the bytes after the header begin in it
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;

  std::string_view bytes_of(const Entry& entry) const {
    return std::string_view(contents).substr(data_start + entry.offset, entry.bytes);
  }
};

// The largest header this reader takes: the format's own bound.
inline constexpr std::size_t kMaxSafetensorsHeader = std::size_t{100} << 20;

// Parses a whole file's bytes, which the result keeps; `name` is for messages.
SafetensorsFile parse_safetensors(std::string file, const std::string& name);
// Reads and parses the file at `path`.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace alloy::checkpoint
