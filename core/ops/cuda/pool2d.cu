#include <type_traits>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/cuda/int_divider.h"
#include "core/ops/cuda/pool2d.h"

namespace alloy::cuda {

namespace {

// Index arithmetic in 32 bits with fast dividers (the host cuts tensors of 2^31 elements or more
// into pieces of whole planes): splitting a flat index into (plane, row, column) took three
// 64-bit divisions per element.
struct Geometry {
  int height, width, out_height, out_width;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  unsigned int in_plane, out_plane;  // elements
  IntDivider in_planes, in_columns, out_planes, out_columns, stride_h_divider, stride_w_divider;
};

// A divider by `value`, or by 1 for an empty plane, whose indices are never divided (padding
// gives an empty input outputs).
IntDivider divider(int value) {
  return IntDivider(static_cast<std::uint32_t>(std::max(value, 1)));
}

Geometry device_geometry(const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  const int in_plane = g.height * g.width;  // both under 2^31 (for_each_plane_piece)
  const int out_plane = g.out_height * g.out_width;
  return {g.height,
          g.width,
          g.out_height,
          g.out_width,
          p.kernel_h,
          p.kernel_w,
          p.stride_h,
          p.stride_w,
          p.pad_h,
          p.pad_w,
          static_cast<unsigned int>(in_plane),
          static_cast<unsigned int>(out_plane),
          divider(in_plane),
          divider(g.width),
          divider(out_plane),
          divider(g.out_width),
          divider(p.stride_h),
          divider(p.stride_w)};
}

// Calls launch(first plane, planes) over pieces of whole planes, each under 2^31 inputs and
// outputs.
template <class Launch>
void for_each_plane_piece(const Pool2dGeometry& g, const char* op, Launch&& launch) {
  const std::int64_t in_plane = std::int64_t{g.height} * g.width;
  const std::int64_t out_plane = std::int64_t{g.out_height} * g.out_width;
  for_each_piece(g.planes, std::max(in_plane, out_plane), op, launch);
}

// (plane, row, column) of a flat index into planes of rows of `columns`.
struct PlaneIndex {
  unsigned int plane;
  int row, column;
};
__device__ __forceinline__ PlaneIndex split_index(unsigned int index, const IntDivider& plane,
                                                  const IntDivider& columns) {
  const IntDivider::QuotientRemainder p = plane.divmod(index);
  const IntDivider::QuotientRemainder rc = columns.divmod(p.remainder);
  return {p.quotient, static_cast<int>(rc.quotient), static_cast<int>(rc.remainder)};
}

// Output element o's window, clipped to the input: rows [h0, h1), columns [w0, w1).
struct Window {
  int h0, h1, w0, w1;
};

__device__ __forceinline__ Window window_of(const Geometry& g, const PlaneIndex& o) {
  return {max(o.row * g.stride_h - g.pad_h, 0),
          min(o.row * g.stride_h - g.pad_h + g.kernel_h, g.height),
          max(o.column * g.stride_w - g.pad_w, 0),
          min(o.column * g.stride_w - g.pad_w + g.kernel_w, g.width)};
}

// The inputs of a halving pool (pool2d_halves) as 2x2 cells: cell (i, j) of a plane holds its
// rows 2i, 2i + 1 and columns 2j, 2j + 1, those inside the plane: output (i, j)'s window, or,
// past an odd last row or column, inputs that no window covers. The backward kernels take a
// thread per cell, so that a thread has its 4 inputs' loads in flight at once: a thread per
// input, with a single 4-byte load, left the memory system idle between loads (LeNet's fused
// ReLU-and-pool backward ran at 3x its memory floor).
struct Cells {
  IntDivider per_plane, per_row;
  unsigned int count;  // in the launch's planes
};

Cells cells_of(const Pool2dGeometry& g, std::int64_t planes) {
  const int rows = (g.height + 1) / 2, columns = (g.width + 1) / 2;
  return {divider(rows * columns), divider(columns),
          static_cast<unsigned int>(planes * rows * columns)};
}

// Whether a halving pool's kernels can move a cell's row as one pair of values: an even width
// (a pair never straddles two rows) and every tensor of the input's shape aligned to a pair.
template <class... T>
bool moves_pairs(const Pool2dGeometry& g, const T*... input_shaped) {
  return g.width % 2 == 0 &&
         ((reinterpret_cast<std::uintptr_t>(input_shaped) % (2 * sizeof(T)) == 0) && ...);
}

struct Cell {
  unsigned int top_left;  // flat input index of its first value
  bool right, bottom;     // whether its second column and second row are inside the plane
  unsigned int window;    // flat output index of the window over it, if right && bottom
};

__device__ __forceinline__ Cell cell_at(unsigned int index, const Geometry& g, const Cells& cells) {
  const PlaneIndex c = split_index(index, cells.per_plane, cells.per_row);
  const int row = 2 * c.row, column = 2 * c.column;
  return {c.plane * g.in_plane + row * g.width + column, column + 1 < g.width, row + 1 < g.height,
          c.plane * g.out_plane + c.row * g.out_width + c.column};
}

// Output o's window as a cell.
__device__ __forceinline__ Cell window_cell(const Geometry& g, const PlaneIndex& o) {
  return {o.plane * g.in_plane + 2 * o.row * g.width + 2 * o.column, true, true, 0};
}

// Cell c's values in row-major order, widened; those outside the plane read as 0. kPairs
// (moves_pairs): each row by one access.
template <bool kPairs, class T>
__device__ __forceinline__ void load_cell(const T* data, const Geometry& g, const Cell& c,
                                          float (&v)[4]) {
  if (kPairs) {
    const Pack<T, 2> top = *reinterpret_cast<const Pack<T, 2>*>(data + c.top_left);
    v[0] = widen(top.v[0]);
    v[1] = widen(top.v[1]);
    if (c.bottom) {
      const Pack<T, 2> bottom = *reinterpret_cast<const Pack<T, 2>*>(data + c.top_left + g.width);
      v[2] = widen(bottom.v[0]);
      v[3] = widen(bottom.v[1]);
    } else {
      v[2] = v[3] = 0.0f;
    }
    return;
  }
  v[0] = widen(data[c.top_left]);
  v[1] = c.right ? widen(data[c.top_left + 1]) : 0.0f;
  v[2] = c.bottom ? widen(data[c.top_left + g.width]) : 0.0f;
  v[3] = c.right && c.bottom ? widen(data[c.top_left + g.width + 1]) : 0.0f;
}

// Rounds cell c's values (row-major) to T and stores those inside the plane.
template <bool kPairs, class T>
__device__ __forceinline__ void store_cell(T* data, const Geometry& g, const Cell& c,
                                           const float (&v)[4]) {
  if (kPairs) {
    *reinterpret_cast<Pack<T, 2>*>(data + c.top_left) = {{narrow<T>(v[0]), narrow<T>(v[1])}};
    if (c.bottom) {
      *reinterpret_cast<Pack<T, 2>*>(data + c.top_left +
                                     g.width) = {{narrow<T>(v[2]), narrow<T>(v[3])}};
    }
    return;
  }
  data[c.top_left] = narrow<T>(v[0]);
  if (c.right) data[c.top_left + 1] = narrow<T>(v[1]);
  if (c.bottom) data[c.top_left + g.width] = narrow<T>(v[2]);
  if (c.right && c.bottom) data[c.top_left + g.width + 1] = narrow<T>(v[3]);
}

// Output o's 2x2 window at stride 2 in x (pool2d_halves), each value widened and passed through
// `value_of`, summed from 0 in row-major order and divided by 4 (exactly a multiplication), as
// the CPU kernel does.
template <bool kPairs, class T, class ValueOf>
__device__ __forceinline__ float halving_average(const T* x, const Geometry& g, const PlaneIndex& o,
                                                 ValueOf value_of) {
  float v[4];
  load_cell<kPairs>(x, g, window_cell(g, o), v);
  float sum = 0.0f;
  for (const float value : v)
    sum += value_of(value);
  return sum / 4.0f;
}

// The share of cell c's window's gradient that each of its inputs gets, as the CPU assigns it
// for tiling windows (a -0 share stays -0), or 0 for a cell no window covers.
template <class T>
__device__ __forceinline__ float halving_share(const T* dy, const Cell& c) {
  return c.right && c.bottom ? widen(dy[c.window]) / 4.0f : 0.0f;
}

// One thread per output element; the window clipped to the input, summed in row-major order
// like the CPU kernel, divided by the full window (count_include_pad).
template <class T>
__global__ void avg_forward_kernel(const T* x, T* y, Geometry g, unsigned int count) {
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE_32(index, count) {
    const PlaneIndex o = split_index(index, g.out_planes, g.out_columns);
    const T* in = x + o.plane * g.in_plane;
    float sum = 0.0f;
    const Window win = window_of(g, o);
    for (int h = win.h0; h < win.h1; ++h) {
      for (int w = win.w0; w < win.w1; ++w)
        sum += widen(in[h * g.width + w]);
    }
    y[index] = narrow<T>(sum / divisor);
  }
}

// The same for halving windows (LeNet's pools): every window lies inside and the division is by
// the constant 4 (a multiplication, exactly), so the same sums and bits without the loops and
// the division, which made the generic kernel twice the memory floor on LeNet's first pool.
template <class T, bool kPairs>
__global__ void avg_forward_halving_kernel(const T* x, T* y, Geometry g, unsigned int count,
                                           std::bool_constant<kPairs>) {
  ALLOY_GRID_STRIDE_32(index, count) {
    const PlaneIndex o = split_index(index, g.out_planes, g.out_columns);
    y[index] = narrow<T>(halving_average<kPairs>(x, g, o, [](float value) { return value; }));
  }
}

// One thread per input element gathers the shares of the windows covering it, in the (oh, ow)
// order in which the CPU kernel scatters them: the same fp32 sums.
template <class T>
__global__ void avg_backward_kernel(const T* dy, T* dx, Geometry g, unsigned int count) {
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE_32(index, count) {
    const PlaneIndex i = split_index(index, g.in_planes, g.in_columns);
    // Windows oh with oh*stride - pad <= h < oh*stride - pad + kernel. A negative numerator
    // gives a first window of 0 either way, so it is clamped before the unsigned division.
    const int oh_begin = static_cast<int>(
        g.stride_h_divider.divide(max(0, i.row + g.pad_h - g.kernel_h + g.stride_h)));
    const int oh_end =
        min(g.out_height - 1, static_cast<int>(g.stride_h_divider.divide(i.row + g.pad_h)));
    const int ow_begin = static_cast<int>(
        g.stride_w_divider.divide(max(0, i.column + g.pad_w - g.kernel_w + g.stride_w)));
    const int ow_end =
        min(g.out_width - 1, static_cast<int>(g.stride_w_divider.divide(i.column + g.pad_w)));
    const T* grad = dy + i.plane * g.out_plane;
    float sum = 0.0f;
    for (int oh = oh_begin; oh <= oh_end; ++oh) {
      for (int ow = ow_begin; ow <= ow_end; ++ow) {
        sum += widen(grad[oh * g.out_width + ow]) / divisor;
      }
    }
    dx[index] = narrow<T>(sum);
  }
}

// The same for halving windows: at most one window covers an input (none past an odd last row
// or column), so a thread per cell gives its inputs that window's share.
template <class T, bool kPairs>
__global__ void avg_backward_halving_kernel(const T* dy, T* dx, Geometry g, Cells cells,
                                            std::bool_constant<kPairs>) {
  ALLOY_GRID_STRIDE_32(index, cells.count) {
    const Cell c = cell_at(index, g, cells);
    const float share = halving_share(dy, c);
    store_cell<kPairs>(dx, g, c, {share, share, share, share});
  }
}

// relu_avg_pool2d_forward: the halving average of ReLU'd values, widened first (exactly), each
// negative or -0 made +0 and NaN kept, as relu_forward does to the stored values.
template <class T, bool kPairs>
__global__ void relu_avg_forward_kernel(const T* x, T* y, Geometry g, unsigned int count,
                                        std::bool_constant<kPairs>) {
  ALLOY_GRID_STRIDE_32(index, count) {
    const PlaneIndex o = split_index(index, g.out_planes, g.out_columns);
    y[index] = narrow<T>(
        halving_average<kPairs>(x, g, o, [](float value) { return value <= 0.0f ? 0.0f : value; }));
  }
}

// relu_avg_pool2d_backward: the pool's share where ReLU's input is positive, else +0; a thread
// per cell.
template <class X, class D, bool kPairs>
__global__ void relu_avg_backward_kernel(const X* x, const D* dy, D* dx, Geometry g, Cells cells,
                                         std::bool_constant<kPairs>) {
  ALLOY_GRID_STRIDE_32(index, cells.count) {
    const Cell c = cell_at(index, g, cells);
    const float share = halving_share(dy, c);
    float v[4];
    load_cell<kPairs>(x, g, c, v);
    for (float& value : v)
      value = value > 0.0f ? share : 0.0f;
    store_cell<kPairs>(dx, g, c, v);
  }
}

template <class T>
__global__ void max_forward_kernel(const T* x, T* y, std::int32_t* argmax, Geometry g,
                                   unsigned int count) {
  ALLOY_GRID_STRIDE_32(index, count) {
    const PlaneIndex o = split_index(index, g.out_planes, g.out_columns);
    const Window win = window_of(g, o);
    const T* in = x + o.plane * g.in_plane;
    int best_index = win.h0 * g.width + win.w0;
    float best = widen(in[best_index]);
    for (int h = win.h0; h < win.h1; ++h) {
      for (int w = win.w0; w < win.w1; ++w) {
        const float value = widen(in[h * g.width + w]);
        // Strictly greater keeps the first maximum; the first NaN replaces any number.
        if (value > best || (value != value && best == best)) {
          best = value;
          best_index = h * g.width + w;
        }
      }
    }
    y[index] = in[best_index];  // the stored value itself: exact
    argmax[index] = best_index;
  }
}

__global__ void max_backward_scatter_kernel(const void* dy, DType dtype, const std::int32_t* argmax,
                                            float* result, Geometry g, unsigned int count) {
  const auto in_plane = static_cast<std::int32_t>(g.in_plane);
  ALLOY_GRID_STRIDE_32(index, count) {
    const std::int32_t target = argmax[index];
    if (target < 0 || target >= in_plane) continue;
    // Overlapping windows may send two gradients to one input: fp32 atomics, so with overlap
    // the order of those additions (not their set) can vary between runs.
    atomicAdd(result + g.out_planes.divide(index) * g.in_plane + target,
              load_any(dy, dtype, index));
  }
}

// Channels-last: images of [rows, columns, channels]; a flat index splits into (image, row,
// column, channel) with three dividers. Consecutive threads take consecutive channels of one
// pixel, so every load and store of a warp is coalesced.
struct RowsGeometry {
  Geometry g;  // its planes are the image's H x W pixels
  unsigned int channels;
  IntDivider channel_divider, in_rows, out_rows;
};

RowsGeometry rows_geometry(const Pool2dGeometry& geometry, std::int64_t channels) {
  return {device_geometry(geometry), static_cast<unsigned int>(channels),
          divider(static_cast<int>(channels)), divider(geometry.height),
          divider(geometry.out_height)};
}

// (image, row, column, channel) of a flat channels-last index.
struct PixelIndex {
  unsigned int image;
  int row, column;
  unsigned int channel;
};
__device__ __forceinline__ PixelIndex split_pixel(unsigned int index, const IntDivider& channels,
                                                  const IntDivider& columns,
                                                  const IntDivider& rows) {
  const IntDivider::QuotientRemainder c = channels.divmod(index);
  const IntDivider::QuotientRemainder w = columns.divmod(c.quotient);
  const IntDivider::QuotientRemainder h = rows.divmod(w.quotient);
  return {h.quotient, static_cast<int>(h.remainder), static_cast<int>(w.remainder), c.remainder};
}

// The NCHW kernels' sums, in their order, over channels-last tensors: the same bits.
template <class T>
__global__ void avg_forward_rows_kernel(const T* x, T* y, RowsGeometry r, unsigned int count) {
  const Geometry& g = r.g;
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE_32(index, count) {
    const PixelIndex o = split_pixel(index, r.channel_divider, g.out_columns, r.out_rows);
    const Window win = window_of(g, {o.image, o.row, o.column});
    const T* in = x + o.image * g.in_plane * r.channels + o.channel;
    float sum = 0.0f;
    for (int h = win.h0; h < win.h1; ++h) {
      for (int w = win.w0; w < win.w1; ++w)
        sum += widen(in[(h * g.width + w) * r.channels]);
    }
    y[index] = narrow<T>(sum / divisor);
  }
}

template <class T>
__global__ void avg_backward_rows_kernel(const T* dy, T* dx, RowsGeometry r, unsigned int count) {
  const Geometry& g = r.g;
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE_32(index, count) {
    const PixelIndex i = split_pixel(index, r.channel_divider, g.in_columns, r.in_rows);
    // The windows covering (row, column), as in avg_backward_kernel.
    const int oh_begin = static_cast<int>(
        g.stride_h_divider.divide(max(0, i.row + g.pad_h - g.kernel_h + g.stride_h)));
    const int oh_end =
        min(g.out_height - 1, static_cast<int>(g.stride_h_divider.divide(i.row + g.pad_h)));
    const int ow_begin = static_cast<int>(
        g.stride_w_divider.divide(max(0, i.column + g.pad_w - g.kernel_w + g.stride_w)));
    const int ow_end =
        min(g.out_width - 1, static_cast<int>(g.stride_w_divider.divide(i.column + g.pad_w)));
    const T* grad = dy + i.image * g.out_plane * r.channels + i.channel;
    float sum = 0.0f;
    for (int oh = oh_begin; oh <= oh_end; ++oh) {
      for (int ow = ow_begin; ow <= ow_end; ++ow) {
        sum += widen(grad[(oh * g.out_width + ow) * r.channels]) / divisor;
      }
    }
    dx[index] = narrow<T>(sum);
  }
}

template <class T>
__global__ void max_forward_rows_kernel(const T* x, T* y, std::int32_t* argmax, RowsGeometry r,
                                        unsigned int count) {
  const Geometry& g = r.g;
  ALLOY_GRID_STRIDE_32(index, count) {
    const PixelIndex o = split_pixel(index, r.channel_divider, g.out_columns, r.out_rows);
    const Window win = window_of(g, {o.image, o.row, o.column});
    const T* in = x + o.image * g.in_plane * r.channels + o.channel;
    int best_index = win.h0 * g.width + win.w0;
    float best = widen(in[best_index * r.channels]);
    for (int h = win.h0; h < win.h1; ++h) {
      for (int w = win.w0; w < win.w1; ++w) {
        const float value = widen(in[(h * g.width + w) * r.channels]);
        if (value > best || (value != value && best == best)) {
          best = value;
          best_index = h * g.width + w;
        }
      }
    }
    y[index] = in[best_index * r.channels];
    argmax[index] = best_index;  // within the (image, channel) plane, as for NCHW
  }
}

// One thread per (image, channel) adds its outputs' gradients in output order into the fp32
// `result`: the CPU's sums in the CPU's order, without atomics (overlapping windows may send
// several gradients to one input).
__global__ void max_backward_rows_kernel(const void* dy, DType dtype, const std::int32_t* argmax,
                                         float* result, RowsGeometry r, unsigned int count) {
  const Geometry& g = r.g;
  const auto in_plane = static_cast<std::int32_t>(g.in_plane);
  ALLOY_GRID_STRIDE_32(index, count) {
    const IntDivider::QuotientRemainder ic = r.channel_divider.divmod(index);
    const unsigned int out_first = ic.quotient * g.out_plane * r.channels + ic.remainder;
    float* out = result + ic.quotient * g.in_plane * r.channels + ic.remainder;
    for (unsigned int o = 0; o < g.out_plane; ++o) {
      const unsigned int at = out_first + o * r.channels;
      const std::int32_t target = argmax[at];
      if (target < 0 || target >= in_plane) continue;
      out[static_cast<unsigned int>(target) * r.channels] += load_any(dy, dtype, at);
    }
  }
}

// Calls launch(first image, images) over pieces of whole images, each under 2^31 inputs and
// outputs.
template <class Launch>
void for_each_image_piece(const Pool2dGeometry& g, std::int64_t channels, const char* op,
                          Launch&& launch) {
  const std::int64_t in_image = std::int64_t{g.height} * g.width * channels;
  const std::int64_t out_image = std::int64_t{g.out_height} * g.out_width * channels;
  for_each_piece(g.planes / channels, std::max(in_image, out_image), op, launch);
}

}  // namespace

void avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry,
                        cudaStream_t stream) {
  if (geometry.planes * geometry.out_height * geometry.out_width == 0) return;
  dispatch_floating(dtype, "avg_pool2d_forward", [&](auto type) {
    using T = decltype(type);
    for_each_plane_piece(
        geometry, "avg_pool2d_forward", [&](std::int64_t first, std::int64_t planes) {
          const Geometry g = device_geometry(geometry);
          const std::int64_t count = planes * g.out_plane;
          const T* in = static_cast<const T*>(x) + first * g.in_plane;
          T* out = static_cast<T*>(y) + first * g.out_plane;
          const auto halving = [&](auto pairs) {
            ALLOY_LAUNCH(avg_forward_halving_kernel, grid_for(count), kThreads, 0, stream)
            (in, out, g, static_cast<unsigned int>(count), pairs);
          };
          if (!pool2d_halves(geometry.params)) {
            ALLOY_LAUNCH(avg_forward_kernel, grid_for(count), kThreads, 0, stream)
            (in, out, g, static_cast<unsigned int>(count));
          } else if (moves_pairs(geometry, in)) {
            halving(std::true_type{});
          } else {
            halving(std::false_type{});
          }
          ALLOY_CUDA_CHECK_LAUNCH("avg_pool2d_forward's kernel on ", count, " outputs");
        });
  });
}

void avg_pool2d_backward(const void* dy, void* dx, DType dtype, const Pool2dGeometry& geometry,
                         cudaStream_t stream) {
  if (geometry.planes * geometry.height * geometry.width == 0) return;
  dispatch_floating(dtype, "avg_pool2d_backward", [&](auto type) {
    using T = decltype(type);
    for_each_plane_piece(
        geometry, "avg_pool2d_backward", [&](std::int64_t first, std::int64_t planes) {
          const Geometry g = device_geometry(geometry);
          const T* grad = static_cast<const T*>(dy) + first * g.out_plane;
          T* out = static_cast<T*>(dx) + first * g.in_plane;
          if (!pool2d_halves(geometry.params)) {
            const std::int64_t count = planes * g.in_plane;
            ALLOY_LAUNCH(avg_backward_kernel, grid_for(count), kThreads, 0, stream)
            (grad, out, g, static_cast<unsigned int>(count));
            ALLOY_CUDA_CHECK_LAUNCH("avg_backward_kernel on ", count, " inputs");
            return;
          }
          const Cells cells = cells_of(geometry, planes);
          const auto halving = [&](auto pairs) {
            ALLOY_LAUNCH(avg_backward_halving_kernel, grid_for(cells.count), kThreads, 0, stream)
            (grad, out, g, cells, pairs);
          };
          moves_pairs(geometry, out) ? halving(std::true_type{}) : halving(std::false_type{});
          ALLOY_CUDA_CHECK_LAUNCH("avg_backward_halving_kernel on ", cells.count, " cells");
        });
  });
}

void relu_avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry,
                             cudaStream_t stream) {
  if (geometry.planes * geometry.out_height * geometry.out_width == 0) return;
  dispatch_floating(dtype, "relu_avg_pool2d_forward", [&](auto type) {
    using T = decltype(type);
    for_each_plane_piece(
        geometry, "relu_avg_pool2d_forward", [&](std::int64_t first, std::int64_t planes) {
          const Geometry g = device_geometry(geometry);
          const std::int64_t count = planes * g.out_plane;
          const T* in = static_cast<const T*>(x) + first * g.in_plane;
          const auto launch = [&](auto pairs) {
            ALLOY_LAUNCH(relu_avg_forward_kernel, grid_for(count), kThreads, 0, stream)
            (in, static_cast<T*>(y) + first * g.out_plane, g, static_cast<unsigned int>(count),
             pairs);
          };
          moves_pairs(geometry, in) ? launch(std::true_type{}) : launch(std::false_type{});
          ALLOY_CUDA_CHECK_LAUNCH("relu_avg_forward_kernel on ", count, " outputs");
        });
  });
}

void relu_avg_pool2d_backward(const void* x, DType x_dtype, const void* dy, void* dx,
                              DType dy_dtype, const Pool2dGeometry& geometry, cudaStream_t stream) {
  if (geometry.planes * geometry.height * geometry.width == 0) return;
  dispatch_floating_pair(
      x_dtype, dy_dtype, "relu_avg_pool2d_backward", [&](auto x_type, auto d_type) {
        using X = decltype(x_type);
        using D = decltype(d_type);
        for_each_plane_piece(
            geometry, "relu_avg_pool2d_backward", [&](std::int64_t first, std::int64_t planes) {
              const Geometry g = device_geometry(geometry);
              const Cells cells = cells_of(geometry, planes);
              const X* in = static_cast<const X*>(x) + first * g.in_plane;
              D* out = static_cast<D*>(dx) + first * g.in_plane;
              const auto launch = [&](auto pairs) {
                ALLOY_LAUNCH(relu_avg_backward_kernel, grid_for(cells.count), kThreads, 0, stream)
                (in, static_cast<const D*>(dy) + first * g.out_plane, out, g, cells, pairs);
              };
              moves_pairs(geometry, in, out) ? launch(std::true_type{}) : launch(std::false_type{});
              ALLOY_CUDA_CHECK_LAUNCH("relu_avg_backward_kernel on ", cells.count, " cells");
            });
      });
}

void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& geometry, cudaStream_t stream) {
  if (geometry.planes * geometry.out_height * geometry.out_width == 0) return;
  dispatch_floating(dtype, "max_pool2d_forward", [&](auto type) {
    using T = decltype(type);
    for_each_plane_piece(
        geometry, "max_pool2d_forward", [&](std::int64_t first, std::int64_t planes) {
          const Geometry g = device_geometry(geometry);
          const std::int64_t out_first = first * g.out_plane;
          const std::int64_t count = planes * g.out_plane;
          ALLOY_LAUNCH(max_forward_kernel, grid_for(count), kThreads, 0, stream)
          (static_cast<const T*>(x) + first * g.in_plane, static_cast<T*>(y) + out_first,
           argmax + out_first, g, static_cast<unsigned int>(count));
          ALLOY_CUDA_CHECK_LAUNCH("max_forward_kernel on ", count, " outputs");
        });
  });
}

void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, float* scratch,
                         DType dtype, const Pool2dGeometry& geometry, cudaStream_t stream) {
  const std::int64_t inputs = geometry.planes * geometry.height * geometry.width;
  if (inputs == 0) return;
  float* result = dtype == DType::f32 ? static_cast<float*>(dx) : scratch;
  ALLOY_CHECK(result != nullptr, "max_pool2d_backward: half gradients need an fp32 scratch");
  ALLOY_CUDA_CHECK(
      cudaMemsetAsync(result, 0, static_cast<std::size_t>(inputs) * sizeof(float), stream),
      "clearing max_pool2d_backward's accumulator of ", inputs, " floats");
  if (geometry.out_height * geometry.out_width > 0) {
    for_each_plane_piece(
        geometry, "max_pool2d_backward", [&](std::int64_t first, std::int64_t planes) {
          const Geometry g = device_geometry(geometry);
          const std::int64_t out_first = first * g.out_plane;
          const std::int64_t count = planes * g.out_plane;
          ALLOY_LAUNCH(max_backward_scatter_kernel, grid_for(count), kThreads, 0, stream)
          (static_cast<const char*>(dy) + out_first * dtype_size(dtype), dtype, argmax + out_first,
           result + first * g.in_plane, g, static_cast<unsigned int>(count));
          ALLOY_CUDA_CHECK_LAUNCH("max_backward_scatter_kernel on ", count, " outputs");
        });
  }
  if (result != dx) cast(result, DType::f32, dx, dtype, inputs, stream);
}

void avg_pool2d_forward_channels_last(const void* x, void* y, DType dtype,
                                      const Pool2dGeometry& geometry, std::int64_t channels,
                                      cudaStream_t stream) {
  if (geometry.planes * geometry.out_height * geometry.out_width == 0) return;
  constexpr const char* op = "avg_pool2d_forward";
  dispatch_floating(dtype, op, [&](auto type) {
    using T = decltype(type);
    for_each_image_piece(geometry, channels, op, [&](std::int64_t first, std::int64_t images) {
      const RowsGeometry r = rows_geometry(geometry, channels);
      const std::int64_t in_image = std::int64_t{r.g.in_plane} * channels;
      const std::int64_t out_image = std::int64_t{r.g.out_plane} * channels;
      const std::int64_t count = images * out_image;
      ALLOY_LAUNCH(avg_forward_rows_kernel, grid_for(count), kThreads, 0, stream)
      (static_cast<const T*>(x) + first * in_image, static_cast<T*>(y) + first * out_image, r,
       static_cast<unsigned int>(count));
      ALLOY_CUDA_CHECK_LAUNCH("avg_forward_rows_kernel on ", count, " outputs");
    });
  });
}

void avg_pool2d_backward_channels_last(const void* dy, void* dx, DType dtype,
                                       const Pool2dGeometry& geometry, std::int64_t channels,
                                       cudaStream_t stream) {
  if (geometry.planes * geometry.height * geometry.width == 0) return;
  constexpr const char* op = "avg_pool2d_backward";
  dispatch_floating(dtype, op, [&](auto type) {
    using T = decltype(type);
    for_each_image_piece(geometry, channels, op, [&](std::int64_t first, std::int64_t images) {
      const RowsGeometry r = rows_geometry(geometry, channels);
      const std::int64_t in_image = std::int64_t{r.g.in_plane} * channels;
      const std::int64_t out_image = std::int64_t{r.g.out_plane} * channels;
      const std::int64_t count = images * in_image;
      ALLOY_LAUNCH(avg_backward_rows_kernel, grid_for(count), kThreads, 0, stream)
      (static_cast<const T*>(dy) + first * out_image, static_cast<T*>(dx) + first * in_image, r,
       static_cast<unsigned int>(count));
      ALLOY_CUDA_CHECK_LAUNCH("avg_backward_rows_kernel on ", count, " inputs");
    });
  });
}

void max_pool2d_forward_channels_last(const void* x, void* y, std::int32_t* argmax, DType dtype,
                                      const Pool2dGeometry& geometry, std::int64_t channels,
                                      cudaStream_t stream) {
  if (geometry.planes * geometry.out_height * geometry.out_width == 0) return;
  constexpr const char* op = "max_pool2d_forward";
  dispatch_floating(dtype, op, [&](auto type) {
    using T = decltype(type);
    for_each_image_piece(geometry, channels, op, [&](std::int64_t first, std::int64_t images) {
      const RowsGeometry r = rows_geometry(geometry, channels);
      const std::int64_t in_image = std::int64_t{r.g.in_plane} * channels;
      const std::int64_t out_image = std::int64_t{r.g.out_plane} * channels;
      const std::int64_t count = images * out_image;
      ALLOY_LAUNCH(max_forward_rows_kernel, grid_for(count), kThreads, 0, stream)
      (static_cast<const T*>(x) + first * in_image, static_cast<T*>(y) + first * out_image,
       argmax + first * out_image, r, static_cast<unsigned int>(count));
      ALLOY_CUDA_CHECK_LAUNCH("max_forward_rows_kernel on ", count, " outputs");
    });
  });
}

void max_pool2d_backward_channels_last(const void* dy, const std::int32_t* argmax, void* dx,
                                       float* scratch, DType dtype, const Pool2dGeometry& geometry,
                                       std::int64_t channels, cudaStream_t stream) {
  const std::int64_t inputs = geometry.planes * geometry.height * geometry.width;
  if (inputs == 0) return;
  float* result = dtype == DType::f32 ? static_cast<float*>(dx) : scratch;
  ALLOY_CHECK(result != nullptr, "max_pool2d_backward: half gradients need an fp32 scratch");
  ALLOY_CUDA_CHECK(
      cudaMemsetAsync(result, 0, static_cast<std::size_t>(inputs) * sizeof(float), stream),
      "clearing max_pool2d_backward's accumulator of ", inputs, " floats");
  if (geometry.out_height * geometry.out_width > 0) {
    for_each_image_piece(
        geometry, channels, "max_pool2d_backward", [&](std::int64_t first, std::int64_t images) {
          const RowsGeometry r = rows_geometry(geometry, channels);
          const std::int64_t out_first = first * r.g.out_plane * channels;
          const std::int64_t count = images * channels;
          ALLOY_LAUNCH(max_backward_rows_kernel, grid_for(count), kThreads, 0, stream)
          (static_cast<const char*>(dy) + out_first * dtype_size(dtype), dtype, argmax + out_first,
           result + first * r.g.in_plane * channels, r, static_cast<unsigned int>(count));
          ALLOY_CUDA_CHECK_LAUNCH("max_backward_rows_kernel on ", count, " planes");
        });
  }
  if (result != dx) cast(result, DType::f32, dx, dtype, inputs, stream);
}

}  // namespace alloy::cuda
