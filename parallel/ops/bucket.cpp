#include "parallel/ops/bucket.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "parallel/ops/cuda/bucket.h"
#endif

namespace alloy::parallel {

namespace {

void check_slices(const char* op, const std::vector<BucketSlice>& slices, const Tensor& bucket) {
  check_floating(op, "bucket", bucket);
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const BucketSlice& slice = slices[i];
    ALLOY_CHECK(
        slice.offset >= 0 && slice.count >= 0 && slice.offset + slice.count <= bucket.numel(), op,
        ": slice ", i, " [", slice.offset, ", ", slice.offset + slice.count,
        ") lies outside the bucket ", bucket.str());
    if (!slice.grad.defined()) continue;
    check_floating(op, "gradient", slice.grad);
    ALLOY_CHECK(slice.grad.numel() == slice.count, op, ": slice ", i, " holds ", slice.count,
                " elements but its gradient is ", slice.grad.str());
    ALLOY_CHECK(slice.grad.device() == bucket.device(), op, ": slice ", i, "'s gradient is ",
                slice.grad.str(), ", the bucket ", bucket.str());
  }
}

// The byte address of element `offset` of the bucket.
void* element(const Tensor& bucket, std::int64_t offset) {
  return static_cast<unsigned char*>(bucket.raw()) +
         static_cast<std::size_t>(offset) * dtype_size(bucket.dtype());
}

}  // namespace

void copy_into_bucket(const std::vector<BucketSlice>& slices, const Tensor& bucket, float factor,
                      [[maybe_unused]] StreamHandle stream) {
  constexpr const char* op = "copy_into_bucket";
  check_slices(op, slices, bucket);
  const Device device = bucket.device();
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      std::vector<cuda::ScaledCopyItem> items;
      items.reserve(slices.size());
      for (const BucketSlice& slice : slices) {
        const bool have = slice.grad.defined();
        items.push_back({have ? slice.grad.raw() : nullptr,
                         have ? slice.grad.dtype() : bucket.dtype(), element(bucket, slice.offset),
                         bucket.dtype(), slice.count});
      }
      cuda::scaled_copy(items, factor, stream != nullptr ? stream : alloy::cuda::stream_of(device));
      return;
    });
  for (const BucketSlice& slice : slices) {
    const bool have = slice.grad.defined();
    cpu::scaled_copy(have ? slice.grad.raw() : nullptr, have ? slice.grad.dtype() : bucket.dtype(),
                     element(bucket, slice.offset), bucket.dtype(), slice.count, factor);
  }
}

void copy_from_bucket(const Tensor& bucket, const std::vector<BucketSlice>& slices, float factor,
                      [[maybe_unused]] StreamHandle stream) {
  constexpr const char* op = "copy_from_bucket";
  check_slices(op, slices, bucket);
  const Device device = bucket.device();
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      std::vector<cuda::ScaledCopyItem> items;
      items.reserve(slices.size());
      for (const BucketSlice& slice : slices) {
        if (!slice.grad.defined()) continue;
        items.push_back({element(bucket, slice.offset), bucket.dtype(), slice.grad.raw(),
                         slice.grad.dtype(), slice.count});
      }
      cuda::scaled_copy(items, factor, stream != nullptr ? stream : alloy::cuda::stream_of(device));
      return;
    });
  for (const BucketSlice& slice : slices) {
    if (!slice.grad.defined()) continue;
    cpu::scaled_copy(element(bucket, slice.offset), bucket.dtype(), slice.grad.raw(),
                     slice.grad.dtype(), slice.count, factor);
  }
}

}  // namespace alloy::parallel
