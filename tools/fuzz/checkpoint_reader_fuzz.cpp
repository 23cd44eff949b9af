// libFuzzer harness for the checkpoint reader. Each input is tried twice: as a whole file
// image (header checks, CRC) and as a bare payload (the Boost archive decoding, which the CRC
// would otherwise shield from nearly every mutation). The contract under test: any input
// either loads or throws alloy::Error; anything else (a crash, a sanitizer report, another
// exception type, a huge allocation) is a bug.
//
// Build and run (clang only; tools/fuzz/run.sh SECONDS does all of this):
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DALLOY_CUDA=OFF \
//         -DALLOY_FUZZ=ON -DBUILD_TESTING=OFF
//   cmake --build build-fuzz --target checkpoint_reader_fuzz
//   mkdir -p /tmp/ckpt-fuzz && cp tests/data/checkpoint_corpus/* /tmp/ckpt-fuzz/
//   build-fuzz/bin/checkpoint_reader_fuzz /tmp/ckpt-fuzz -max_total_time=600 -rss_limit_mb=2048
// Add each crashing input libFuzzer saves (crash-*) to tests/data/checkpoint_corpus once fixed:
// ctest replays that directory (tests/core/checkpoint/corpus_test.cpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    alloy::checkpoint::decode_checkpoint(input, "fuzz-input");
  } catch (const alloy::Error&) {
  }
  try {
    alloy::checkpoint::deserialize_state(input);
  } catch (const alloy::Error&) {
  }
  return 0;
}
