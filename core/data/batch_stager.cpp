#include "core/data/batch_stager.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/round_trips.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/cuda/pinned_buffer.h"
#endif

namespace alloy::data {

namespace {

constexpr std::size_t kSlots = 2;

void check_host_batch(const Batch& host) {
  ALLOY_CHECK(host.images.defined() && host.labels.defined() && host.images.device().is_cpu() &&
                  host.labels.device().is_cpu(),
              "BatchStager: a batch to stage must be on the host, got ",
              host.images.defined() ? host.images.str() : "no images", " and ",
              host.labels.defined() ? host.labels.str() : "no labels");
}

}  // namespace

#ifdef ALLOY_HAVE_CUDA

struct BatchStager::CudaState {
  struct Slot {
    explicit Slot(int device) : uploaded(device) {}
    cuda::PinnedBuffer pinned;  // images, then labels from the next 64-byte boundary
    cuda::Event uploaded;       // recorded on the copy stream after the slot's uploads
    Tensor images;              // device buffers, reused while the batch shape stays
    Tensor labels;
  };

  explicit CudaState(Device device)
      : copy(device.index), queued(device.index), slots{Slot(device.index), Slot(device.index)} {}

  ~CudaState() {
    // Pinned memory must outlive the uploads reading it.
    for (Slot& slot : slots)
      cuda::finish_event_quietly(slot.uploaded.get());
  }

  cuda::Stream copy;   // uploads only
  cuda::Event queued;  // compute work queued before the latest prefetch
  std::array<Slot, kSlots> slots;
  std::size_t next = 0;  // the slot the next prefetch uses
};

#else

struct BatchStager::CudaState {};

#endif

BatchStager::BatchStager(Device device) : device_(device) {
  if (device.is_cuda()) {
#ifdef ALLOY_HAVE_CUDA
    cuda_ = std::make_unique<CudaState>(device);
#else
    fail("BatchStager on ", device.str(), ": this build of Alloy has no CUDA backend");
#endif
  }
}

BatchStager::~BatchStager() = default;

void BatchStager::prefetch(const Batch& host) {
  check_host_batch(host);
  ALLOY_CHECK(pending_.size() < kSlots, "BatchStager: ", kSlots,
              " batches are staged already; take() one before prefetching another");
  if (!cuda_) {
    // The device is the host: the step reads the loader's batch where it is. Counted as the
    // two uploads a GPU makes here.
    count_upload();
    count_upload();
    pending_.push_back({host, -1});
    return;
  }
#ifdef ALLOY_HAVE_CUDA
  CudaState& state = *cuda_;
  const std::size_t index = state.next;
  state.next = (state.next + 1) % kSlots;
  CudaState::Slot& slot = state.slots[index];

  // Reuse the device buffers while the shape stays (the last batch of an epoch is smaller).
  if (!slot.images.defined() || slot.images.shape() != host.images.shape()) {
    slot.images = Tensor::empty(host.images.shape(), DType::u8, device_, MemoryCategory::data);
  }
  if (!slot.labels.defined() || slot.labels.shape() != host.labels.shape()) {
    slot.labels = Tensor::empty(host.labels.shape(), DType::i32, device_, MemoryCategory::data);
  }

  // The pinned buffer still feeds its previous upload until that upload's event is done: the
  // upload is queued behind the steps before it, so the wait is back-pressure.
  if (!slot.uploaded.done()) {
    slot.uploaded.synchronize();
    count_backpressure_wait();
    ++busy_waits_;
  }
  const std::size_t image_bytes = host.images.nbytes();
  const std::size_t label_bytes = host.labels.nbytes();
  const std::size_t labels_offset = (image_bytes + 63) / 64 * 64;  // keep the labels aligned
  if (slot.pinned.bytes() < labels_offset + label_bytes) {
    slot.pinned = cuda::PinnedBuffer(labels_offset + label_bytes);
  }
  auto* pinned = static_cast<unsigned char*>(slot.pinned.get());
  std::memcpy(pinned, host.images.raw(), image_bytes);
  std::memcpy(pinned + labels_offset, host.labels.raw(), label_bytes);

  // The slot's device buffers may still be read by steps queued on the compute stream (or,
  // when just allocated, be a block that queued work used before it was freed): the upload
  // starts after everything queued there so far, which is not the step about to be queued.
  const cudaStream_t compute = cuda::stream_of(device_);
  state.queued.record(compute);
  state.queued.wait(state.copy.get());
  cuda::upload_async(slot.images.raw(), device_, pinned, image_bytes, state.copy.get());
  cuda::upload_async(slot.labels.raw(), device_, pinned + labels_offset, label_bytes,
                     state.copy.get());
  slot.uploaded.record(state.copy.get());

  Batch staged;
  staged.images = slot.images;
  staged.labels = slot.labels;
  staged.index = host.index;
  pending_.push_back({staged, static_cast<int>(index)});
#endif
}

Batch BatchStager::take() {
  ALLOY_CHECK(!pending_.empty(), "BatchStager: take() with no batch prefetched");
  Staged staged = std::move(pending_.front());
  pending_.pop_front();
#ifdef ALLOY_HAVE_CUDA
  if (cuda_) {
    // The device waits for the upload; the host does not.
    cuda_->slots[static_cast<std::size_t>(staged.slot)].uploaded.wait(cuda::stream_of(device_));
  }
#endif
  return std::move(staged.batch);
}

void BatchStager::take_into(Batch& destination) {
  const Batch batch = take();
  ALLOY_CHECK(destination.images.defined() && destination.labels.defined() &&
                  destination.images.device() == device_ && destination.labels.device() == device_,
              "BatchStager::take_into: the destination must be on ", device_.str());
  destination.images.copy_from(batch.images);
  destination.labels.copy_from(batch.labels);
  destination.index = batch.index;
}

}  // namespace alloy::data
