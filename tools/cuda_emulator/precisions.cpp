#include "tools/cuda_emulator/precisions.h"

#include <mutex>

namespace alloy::emulator {

namespace {

struct Record {
  std::mutex mutex;
  Fp32Precisions counts;
};

Record& record() {
  static Record r;
  return r;
}

}  // namespace

Fp32Precisions fp32_precisions() {
  std::lock_guard<std::mutex> lock(record().mutex);
  return record().counts;
}

void reset_fp32_precisions() {
  std::lock_guard<std::mutex> lock(record().mutex);
  record().counts = {};
}

void note_fp32_gemm(int compute_type) {
  std::lock_guard<std::mutex> lock(record().mutex);
  ++record().counts.gemm_compute_types[compute_type];
}

void note_fp32_convolution(int math_type) {
  std::lock_guard<std::mutex> lock(record().mutex);
  ++record().counts.conv_math_types[math_type];
}

}  // namespace alloy::emulator
