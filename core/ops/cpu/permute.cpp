#include <cstring>

#include "core/error.h"
#include "core/ops/cpu/parallel.h"
#include "core/ops/permute.h"

namespace alloy::cpu {

namespace {

template <class T>
void transpose(const T* in, T* out, std::int64_t images, std::int64_t rows, std::int64_t cols) {
  const std::int64_t image = rows * cols;
  parallel_ranges(images, image, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const T* source = in + i * image;
      T* target = out + i * image;
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c)
          target[c * rows + r] = source[r * cols + c];
      }
    }
  });
}

}  // namespace

void transpose_images(const void* in, void* out, std::size_t element_size, std::int64_t images,
                      std::int64_t rows, std::int64_t cols) {
  // Copies of the bytes: the dtype matters only through its size.
  switch (element_size) {
    case 1:
      return transpose(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out),
                       images, rows, cols);
    case 2:
      return transpose(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(out),
                       images, rows, cols);
    case 4:
      return transpose(static_cast<const std::uint32_t*>(in), static_cast<std::uint32_t*>(out),
                       images, rows, cols);
    default:
      fail("transpose_images: no kernel for ", element_size, "-byte elements");
  }
}

}  // namespace alloy::cpu
