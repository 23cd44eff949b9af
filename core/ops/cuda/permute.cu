#include <algorithm>
#include <limits>
#include <type_traits>

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

// The narrow side up to which an image goes to narrow_transpose_kernel: a convolution filter's
// taps (R*S = 9 or 1 for ResNets) against its channels. Wider images fill 32x32 tiles.
constexpr int kMaxNarrow = 32;
constexpr int kNarrowThreads = 256;
constexpr int kSlabBytes = 16 * 1024;  // a block's shared slab, whatever the element size

// Images of [long, narrow] (kNarrowIn: the input's columns are narrow) or [narrow, long]
// (otherwise) transposed, `narrow` <= kMaxNarrow. Each block moves blockDim.x consecutive long
// indices at a time, counted across the images (u = image * long + l), so small images share
// a block. Their [blockDim.x, narrow] slab is contiguous on the narrow-major side and is moved
// there by consecutive threads; on the other side each thread owns one long index and moves
// its `narrow` elements, consecutive threads writing (or reading) consecutive addresses. The
// slab's rows are padded to an odd pitch, so that a thread's column walk hits distinct banks.
// The loops depend only on the block's indices, so every thread reaches each barrier.
template <class T, class Store, bool kNarrowIn>
__global__ void narrow_transpose_kernel(const T* in, T* out, std::int64_t images, int narrow,
                                        int length, Store store,
                                        std::bool_constant<kNarrowIn> /*narrow_in*/) {
  __shared__ T slab[kSlabBytes / sizeof(T)];
  const int pitch = narrow | 1;
  const int threads = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  const std::int64_t total = images * length, image = std::int64_t{narrow} * length;
  for (std::int64_t u0 = std::int64_t{blockIdx.x} * threads; u0 < total;
       u0 += std::int64_t{gridDim.x} * threads) {
    const int count = total - u0 < threads ? static_cast<int>(total - u0) : threads;
    const std::int64_t u = u0 + t, i = u / length;
    // Where this thread's long index starts in the long-major image: its narrow elements
    // follow it `length` apart.
    const std::int64_t spread = i * image + (u - i * length);
    if constexpr (kNarrowIn) {
      for (int j = t; j < count * narrow; j += threads) {
        const int l = j / narrow;
        slab[l * pitch + j - l * narrow] = in[u0 * narrow + j];
      }
    } else if (t < count) {
      for (int p = 0; p < narrow; ++p)
        slab[t * pitch + p] = in[spread + std::int64_t{p} * length];
    }
    __syncthreads();
    if constexpr (!kNarrowIn) {
      for (int j = t; j < count * narrow; j += threads) {
        const int l = j / narrow;
        store(out[u0 * narrow + j], slab[l * pitch + j - l * narrow]);
      }
    } else if (t < count) {
      for (int p = 0; p < narrow; ++p)
        store(out[spread + std::int64_t{p} * length], slab[t * pitch + p]);
    }
    __syncthreads();  // the slab is refilled next
  }
}

template <class T, class Store>
void launch_transpose(const void* in, void* out, std::int64_t images, std::int64_t rows,
                      std::int64_t cols, Store store, const char* op, cudaStream_t stream) {
  if (images * rows * cols == 0) return;
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  ALLOY_CHECK(rows <= limit && cols <= limit, op, ": a ", rows, "x", cols,
              " image is more than the kernel indexes");
  if constexpr (std::is_same_v<Store, Copy>) {
    // A [1, n] or [n, 1] image is its own transpose: the images are one contiguous copy.
    if (rows == 1 || cols == 1) {
      ALLOY_CUDA_CHECK(
          cudaMemcpyAsync(out, in, static_cast<std::size_t>(images * rows * cols) * sizeof(T),
                          cudaMemcpyDeviceToDevice, stream),
          op, ": copying ", images, " images of ", rows, "x", cols, " elements of ", sizeof(T),
          " bytes");
      return;
    }
  }
  const T* source = static_cast<const T*>(in);
  T* target = static_cast<T*>(out);
  const std::int64_t narrow = std::min(rows, cols);
  if (narrow <= kMaxNarrow) {
    // Threads a block: as many long indices as the slab holds, whole warps, at most 256.
    const int pitch = static_cast<int>(narrow) | 1;
    const int threads =
        std::min(kNarrowThreads, static_cast<int>(kSlabBytes / sizeof(T)) / pitch / 32 * 32);
    const std::int64_t length = std::max(rows, cols);
    constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // the loop strides beyond
    const dim3 grid(
        static_cast<unsigned int>(std::min((images * length + threads - 1) / threads, kMaxBlocks)));
    const int n = static_cast<int>(narrow), l = static_cast<int>(length);
    const auto launch = [&](auto narrow_in) {
      ALLOY_LAUNCH(narrow_transpose_kernel, grid, dim3(threads), 0, stream)
      (source, target, images, n, l, store, narrow_in);
    };
    if (cols == narrow)
      launch(std::true_type{});
    else
      launch(std::false_type{});
    ALLOY_CUDA_CHECK_LAUNCH(op, " narrow_transpose_kernel over ", images, " images of ", rows, "x",
                            cols, " elements of ", sizeof(T), " bytes");
    return;
  }
  constexpr std::int64_t kMaxGrid = 65535;  // y and z grid limits; plenty of blocks for x too
  const dim3 grid(static_cast<unsigned int>(std::min((cols + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned int>(std::min((rows + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned int>(std::min(images, kMaxGrid)));
  ALLOY_LAUNCH(transpose_kernel, grid, dim3(kTile, kTileRows), 0, stream)
  (source, target, images, static_cast<int>(rows), static_cast<int>(cols), store);
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
