#include "core/queued_download.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/round_trips.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/cuda/pinned_buffer.h"
#endif

namespace alloy {

struct QueuedDownload::Impl {
#ifdef ALLOY_HAVE_CUDA
  ~Impl() {
    if (copied) cuda::finish_event_quietly(copied->get());
  }
  Device device = Device::cpu();
  cuda::PinnedBuffer pinned;
  std::unique_ptr<cuda::Event> copied;  // recorded after the copy, on the source's device
#endif
  bool pinned_copy = false;         // the queued copy is CUDA's, into `pinned`
  std::vector<unsigned char> host;  // the copy of a tensor on the CPU
};

QueuedDownload::QueuedDownload() : impl_(std::make_unique<Impl>()) {}
QueuedDownload::~QueuedDownload() = default;
QueuedDownload::QueuedDownload(QueuedDownload&&) noexcept = default;
QueuedDownload& QueuedDownload::operator=(QueuedDownload&&) noexcept = default;

void QueuedDownload::queue(const Tensor& source) {
  ALLOY_CHECK(!queued_, "QueuedDownload: a copy is queued already; read() it first");
  ALLOY_CHECK(source.defined(), "QueuedDownload: nothing to copy (an undefined tensor)");
  const std::size_t bytes = source.nbytes();
  if (source.device().is_cpu()) {
    impl_->host.resize(bytes);
    std::memcpy(impl_->host.data(), source.raw(), bytes);
    count_download();  // and no wait: the copy is done
    impl_->pinned_copy = false;
    queued_ = true;
    return;
  }
#ifdef ALLOY_HAVE_CUDA
  Impl& impl = *impl_;
  if (!impl.copied || impl.device != source.device()) {
    impl.copied = std::make_unique<cuda::Event>(source.device().index);
    impl.device = source.device();
  }
  if (impl.pinned.bytes() < bytes) impl.pinned = cuda::PinnedBuffer(bytes);
  const cudaStream_t stream = cuda::stream_of(source.device());
  cuda::download_async(impl.pinned.get(), source.raw(), source.device(), bytes, stream);
  impl.copied->record(stream);
  impl.pinned_copy = true;
  queued_ = true;
#else
  fail("QueuedDownload from ", source.device().str(), ": this build of Alloy has no CUDA backend");
#endif
}

bool QueuedDownload::arrived() {
  ALLOY_CHECK(queued_, "QueuedDownload: arrived() with no copy queued");
#ifdef ALLOY_HAVE_CUDA
  if (impl_->pinned_copy) return impl_->copied->done("querying a queued download");
#endif
  return true;
}

const void* QueuedDownload::read() {
  ALLOY_CHECK(queued_, "QueuedDownload: read() with no copy queued");
  queued_ = false;
#ifdef ALLOY_HAVE_CUDA
  if (impl_->pinned_copy) {
    if (!impl_->copied->done("querying a queued download")) impl_->copied->synchronize();
    return impl_->pinned.get();
  }
#endif
  return impl_->host.data();
}

}  // namespace alloy
