#include <limits>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/permute.h"

namespace alloy::cuda {

namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // threads per tile column: each moves kTile / kTileRows values

// Stores of the transposed tile: a copy, or an fp32 add into the output.
struct Copy {
  template <class T>
  __device__ __forceinline__ void operator()(T& out, T value) const {
    out = value;
  }
};
struct Add {
  template <class T>
  __device__ __forceinline__ void operator()(T& out, T value) const {
    out = narrow<T>(__fadd_rn(widen(out), widen(value)));
  }
};

// Each block moves 32x32 tiles of one image at a time: reads a tile's rows (consecutive
// threads, consecutive columns), writes its columns as the output's rows. The tile's rows are
// padded by one element so that reading a column touches 32 different shared-memory banks.
// The loops depend only on the block's indices, so every thread reaches each barrier.
template <class T, class Store>
__global__ void transpose_kernel(const T* in, T* out, std::int64_t images, int rows, int cols,
                                 Store store) {
  __shared__ T tile[kTile][kTile + 1];
  const std::int64_t image = std::int64_t{rows} * cols;
  for (std::int64_t i = blockIdx.z; i < images; i += gridDim.z) {
    const T* source = in + i * image;
    T* target = out + i * image;
    for (int r0 = blockIdx.y * kTile; r0 < rows; r0 += gridDim.y * kTile) {
      for (int c0 = blockIdx.x * kTile; c0 < cols; c0 += gridDim.x * kTile) {
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int r = r0 + j, c = c0 + threadIdx.x;
          if (r < rows && c < cols) tile[j][threadIdx.x] = source[std::int64_t{r} * cols + c];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int c = c0 + j, r = r0 + threadIdx.x;
          if (r < rows && c < cols) store(target[std::int64_t{c} * rows + r], tile[threadIdx.x][j]);
        }
        __syncthreads();  // the tile is refilled next
      }
    }
  }
}

template <class T, class Store>
void launch_transpose(const void* in, void* out, std::int64_t images, std::int64_t rows,
                      std::int64_t cols, Store store, const char* op, cudaStream_t stream) {
  if (images * rows * cols == 0) return;
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  ALLOY_CHECK(rows <= limit && cols <= limit, op, ": a ", rows, "x", cols,
              " image is more than the kernel indexes");
  constexpr std::int64_t kMaxGrid = 65535;  // y and z grid limits; plenty of blocks for x too
  const dim3 grid(static_cast<unsigned int>(std::min((cols + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned int>(std::min((rows + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned int>(std::min(images, kMaxGrid)));
  ALLOY_LAUNCH(transpose_kernel, grid, dim3(kTile, kTileRows), 0, stream)
  (static_cast<const T*>(in), static_cast<T*>(out), images, static_cast<int>(rows),
   static_cast<int>(cols), store);
  ALLOY_CUDA_CHECK_LAUNCH(op, " transpose_kernel over ", images, " images of ", rows, "x", cols,
                          " elements of ", sizeof(T), " bytes");
}

}  // namespace

void transpose_images(const void* in, void* out, std::size_t element_size, std::int64_t images,
                      std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr const char* op = "transpose_images";
  // Copies of the bytes: the dtype matters only through its size.
  switch (element_size) {
    case 1:
      return launch_transpose<std::uint8_t>(in, out, images, rows, cols, Copy{}, op, stream);
    case 2:
      return launch_transpose<std::uint16_t>(in, out, images, rows, cols, Copy{}, op, stream);
    case 4:
      return launch_transpose<std::uint32_t>(in, out, images, rows, cols, Copy{}, op, stream);
    default:
      fail(op, ": no kernel for ", element_size, "-byte elements");
  }
}

void transpose_images_add(const void* in, void* out, DType dtype, std::int64_t images,
                          std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  dispatch_floating(dtype, "transpose_images_add", [&](auto type) {
    using T = decltype(type);
    launch_transpose<T>(in, out, images, rows, cols, Add{}, "transpose_images_add", stream);
  });
}

}  // namespace alloy::cuda
