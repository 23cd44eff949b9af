// Element types. f16 and bf16 are stored as 16-bit patterns (see core/half.h); u8 and i32
// hold images and labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace alloy {

enum class DType : std::uint8_t { f32, f16, bf16, u8, i32 };

inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
  }
  return 0;
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
  }
  return "?";
}

inline bool is_half(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16;
}
inline bool is_floating(DType dtype) {
  return dtype == DType::f32 || is_half(dtype);
}

// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16"; throws UsageError.
DType parse_dtype(const std::string& text);

}  // namespace alloy
