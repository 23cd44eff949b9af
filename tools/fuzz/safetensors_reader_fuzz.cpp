// libFuzzer harness for the safetensors reader (core/checkpoint/safetensors_read.h). Each input
// is tried twice: as a whole file, and with its 8-byte length rewritten to end the header at the
// input's last '}', since a mutation that grows or shrinks the JSON would otherwise leave the
// stored length cutting the header short, and fail before the checks after the JSON. The
// contract under test: any input either parses, with every tensor's bytes whole inside the
// file's data, or throws alloy::Error; anything else (a crash, a sanitizer report, another
// exception type, a huge allocation, a tensor reaching past the data) is a bug.
//
// tools/fuzz/run.sh builds and runs it after the checkpoint reader's harness, from the seed
// files in tests/data/safetensors_corpus (written by tools/fuzz/make_corpus.sh); ctest replays
// that directory (tests/core/checkpoint/safetensors_read_test.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/checkpoint/safetensors_read.h"
#include "core/error.h"

namespace {

void parse(std::string file) {
  try {
    const alloy::checkpoint::SafetensorsFile parsed =
        alloy::checkpoint::parse_safetensors(std::move(file), "fuzz-input");
    if (parsed.data_start > parsed.contents.size()) std::abort();
    const std::size_t data = parsed.contents.size() - parsed.data_start;
    unsigned sum = 0;
    for (const auto& [name, entry] : parsed.tensors) {
      if (entry.offset > data || entry.bytes > data - entry.offset) std::abort();
      if (entry.bytes != static_cast<std::size_t>(alloy::shape_numel(entry.shape)) *
                             alloy::dtype_size(entry.dtype)) {
        std::abort();
      }
      // Touches every byte handed out, so that AddressSanitizer sees any read past the file.
      for (const char byte : parsed.bytes_of(entry))
        sum += static_cast<unsigned char>(byte);
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const alloy::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  parse(input);
  const std::size_t close = input.rfind('}');
  if (size > 8 && close != std::string::npos && close >= 8) {
    std::string framed = input;
    const std::uint64_t header = close + 1 - 8;
    for (int i = 0; i < 8; ++i)
      framed[static_cast<std::size_t>(i)] = static_cast<char>((header >> (8 * i)) & 0xff);
    if (framed != input) parse(std::move(framed));
  }
  return 0;
}
