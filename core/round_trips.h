// Host round trips: what the host and a device wait on each other for. Four kinds, each
// counted where it happens, on every backend, so a CPU run shows what the same code costs on a
// GPU (tests read the counts around training steps; the JSON log's epoch event reports them):
//
//  - uploads: copies from host memory into a device tensor. On CUDA each cudaMemcpy*
//    host-to-device: cuda_copy_bytes (pageable, followed by a host wait) and
//    cuda::upload_async (pinned, no wait). On the CPU the device is the host: a training batch
//    handed to the step by data::BatchStager counts as one upload per tensor although nothing
//    is copied (core/data/batch_stager.h). Other copies between host tensors on the CPU are
//    not counted (writing a host value into device state, as LossScaler::restore does, is
//    an upload on CUDA only).
//  - downloads: device contents handed to host code: on CUDA each cudaMemcpy* device-to-host,
//    cuda_copy_bytes (pageable, followed by a host wait) and cuda::download_async (pinned, the
//    wait left to whoever reads the copy: an asynchronous checkpoint's writer thread; a
//    QueuedDownload's reader, which may not wait at all); on the CPU each read of tensor
//    contents by the host (Tensor::to_floats, Tensor::download_to, count_correct) and each
//    QueuedDownload::queue. Other downloads are synchronous: the host waits for them, and that
//    wait counts as a host wait, on the CPU too. A QueuedDownload's copy is read once an event
//    query says it has arrived, so it counts no wait on CUDA unless its reader insists on it
//    before then, and none on the CPU, where it is done at once (core/queued_download.h): the
//    CPU shows what the same code costs on a GPU.
//  - host_waits: the host blocking until a device has done queued work: a stream synchronise
//    (cuda::Stream::synchronize), an event synchronise (cuda::Event::synchronize): among them
//    the wait that ends every download (counted on the CPU as well) and every pageable upload.
//  - backpressure_waits: the host waits (also counted in host_waits, which keeps counting every
//    wait) that are back-pressure, not the host reading a result: the host has run ahead of the
//    device and waits before reusing a buffer the device has not finished with.
//    data::BatchStager::prefetch makes them, when a pinned buffer's previous upload has not run
//    yet because it is queued behind the compute of the steps before it (the device is the
//    bottleneck and the host two batches ahead). host_waits - backpressure_waits are the waits
//    for a result. The CPU never has one (its stager does not wait).
//  - device_allocations: memory the allocator could not serve from its cache. On CUDA each
//    cudaMalloc of the caching allocator (core/cuda/allocator.h). On the CPU each system
//    allocation of a block the host cache manages (64 KiB and more, core/memory.h); smaller
//    blocks go to malloc every time and are not counted. Pinned host staging buffers
//    (cudaHostAlloc) are host memory and do not count.
//
// Counts are process-wide totals (every device, every thread) since the process started.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace alloy {

struct RoundTrips {
  std::uint64_t uploads = 0;
  std::uint64_t downloads = 0;
  std::uint64_t host_waits = 0;
  std::uint64_t backpressure_waits = 0;  // of host_waits
  std::uint64_t device_allocations = 0;

  RoundTrips& operator+=(const RoundTrips& other);
  bool operator==(const RoundTrips& other) const;
  bool operator!=(const RoundTrips& other) const { return !(*this == other); }
};
// The round trips between two readings of round_trips(): `later - earlier`.
RoundTrips operator-(const RoundTrips& later, const RoundTrips& earlier);
// "uploads 2, downloads 0, host_waits 1, backpressure_waits 1, device_allocations 0"
std::ostream& operator<<(std::ostream& out, const RoundTrips& counts);

// The totals so far.
RoundTrips round_trips();

// Called by the entry points listed above, once per round trip, and by nothing else.
void count_upload();
void count_download();
void count_host_wait();
// A host wait that is back-pressure: called in addition to count_host_wait().
void count_backpressure_wait();
void count_device_allocation();

}  // namespace alloy
