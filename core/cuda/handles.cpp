#include "core/cuda/handles.h"

#include "core/round_trips.h"

namespace alloy::cuda {

bool event_status_done(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    static_cast<void>(cudaGetLastError());  // expected and handled: not a pending failure
    return false;
  }
  fail_call("cudaEventQuery(event)", status_text(status), what);
}

bool event_done(cudaEvent_t event, const char* what) {
  return event_status_done(cudaEventQuery(event), what);
}

void finish_event_quietly(cudaEvent_t event) noexcept {
  if (cudaEventQuery(event) != cudaErrorNotReady) return;
  static_cast<void>(cudaGetLastError());
  static_cast<void>(cudaEventSynchronize(event));
  count_host_wait();
}

DeviceGuard::DeviceGuard(int device) {
  ALLOY_CUDA_CHECK(cudaGetDevice(&previous_), "reading the current device");
  if (previous_ != device) {
    ALLOY_CUDA_CHECK(cudaSetDevice(device), "selecting cuda:", device);
  }
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) {
    static_cast<void>(cudaSetDevice(previous_));
  }
}

namespace {
cudaStream_t create_stream(int device) {
  const DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  ALLOY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                   "creating a stream on cuda:", device);
  return stream;
}

cudaEvent_t create_event(int device, bool timing) {
  const DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  ALLOY_CUDA_CHECK(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
      "creating an event on cuda:", device);
  return event;
}

cublasHandle_t create_cublas(int device, cudaStream_t stream) {
  const DeviceGuard guard(device);
  cublasHandle_t handle = nullptr;
  ALLOY_CUDA_CHECK(cublasCreate(&handle), "creating the cuBLAS handle of cuda:", device);
  // Owned from here on, so a failure below does not leak it.
  Owned<cublasHandle_t, cublasDestroy> owner(handle);
  ALLOY_CUDA_CHECK(cublasSetStream(handle, stream),
                   "binding cuBLAS to the stream of cuda:", device);
  // Half GEMMs must accumulate and reduce in fp32 (the numerics contract): without the
  // DISALLOW flag cuBLAS may use half-precision reductions in split-k kernels.
  ALLOY_CUDA_CHECK(cublasSetMathMode(handle, static_cast<cublasMath_t>(
                                                 CUBLAS_DEFAULT_MATH |
                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                   "setting cuBLAS's math mode on cuda:", device);
  // Scalars (alpha, beta) are host values.
  ALLOY_CUDA_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST),
                   "setting cuBLAS's pointer mode on cuda:", device);
  return owner.release();
}
}  // namespace

Stream::Stream(int device) : stream_(create_stream(device)), device_(device) {}

void Stream::synchronize(const char* why) const {
  ALLOY_CUDA_CHECK(cudaStreamSynchronize(stream_.get()), why, " on cuda:", device_);
  count_host_wait();
}

Event::Event(int device, bool timing) : event_(create_event(device, timing)) {}

void Event::record(cudaStream_t stream) {
  ALLOY_CUDA_CHECK(cudaEventRecord(event_.get(), stream), "recording an event");
}

void Event::wait(cudaStream_t stream) const {
  ALLOY_CUDA_CHECK(cudaStreamWaitEvent(stream, event_.get(), 0),
                   "making a stream wait on an event");
}

void Event::synchronize() const {
  ALLOY_CUDA_CHECK(cudaEventSynchronize(event_.get()), "waiting for an event");
  count_host_wait();
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  ALLOY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), event_.get()),
                   "timing between two events");
  return ms;
}

CublasHandle::CublasHandle(int device, cudaStream_t stream)
    : workspace_(kCublasWorkspaceBytes, Device::cuda(device), MemoryCategory::workspace),
      handle_(create_cublas(device, stream)) {
  const DeviceGuard guard(device);
  // After cublasSetStream (which resets the workspace to cuBLAS's own pool): with a workspace
  // of its own cuBLAS never allocates, so GEMMs can be captured in a CUDA graph.
  ALLOY_CUDA_CHECK(cublasSetWorkspace(handle_.get(), workspace_.get(), workspace_.bytes()),
                   "giving cuBLAS a ", workspace_.bytes(), "-byte workspace on cuda:", device);
}

CublasLtHandle::CublasLtHandle(int device) {
  const DeviceGuard guard(device);
  cublasLtHandle_t handle = nullptr;
  ALLOY_CUDA_CHECK(cublasLtCreate(&handle), "creating the cuBLASLt handle of cuda:", device);
  handle_ = Owned<cublasLtHandle_t, cublasLtDestroy>(handle);
}

CudnnHandle::CudnnHandle(int device, cudaStream_t stream) {
  const DeviceGuard guard(device);
  cudnnHandle_t handle = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreate(&handle), "creating the cuDNN handle of cuda:", device);
  handle_ = Owned<cudnnHandle_t, cudnnDestroy>(handle);
  ALLOY_CUDA_CHECK(cudnnSetStream(handle, stream), "binding cuDNN to the stream of cuda:", device);
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, Device device, MemoryCategory category)
    : data_(allocator_for(device).allocate(bytes, category)),
      bytes_(bytes),
      device_(device),
      category_(category) {}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_),
      category_(other.category_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    category_ = other.category_;
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (data_ != nullptr) allocator_for(device_).deallocate(data_, bytes_, category_);
  data_ = nullptr;
}

}  // namespace alloy::cuda
