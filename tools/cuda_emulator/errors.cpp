// Error reporting: the calling thread's last error, the sticky error of a device whose
// context a fault lost, and the names and descriptions of cudaError_t values.
#include <cstdio>
#include <utility>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

ThreadState& this_thread() {
  thread_local ThreadState state;
  return state;
}

cudaError_t fail(cudaError_t status) {
  if (status != cudaSuccess) this_thread().last_error = status;
  return status;
}

cudaError_t device_error(int device) {
  const auto lock = lock_runtime();
  if (!valid_device(device)) return cudaSuccess;
  return runtime().devices[static_cast<std::size_t>(device)].sticky;
}

void lose_device(int device, const std::string& work, const DeviceFault& fault) {
  const auto lock = lock_runtime();
  Runtime& rt = runtime();
  DeviceState& state = rt.devices[static_cast<std::size_t>(device)];
  if (state.sticky == cudaSuccess) {
    state.sticky = fault.status();
    std::fprintf(stderr,
                 "alloy CUDA emulator: %s (while running %s on device %d; the device's context is "
                 "lost and every later CUDA call fails with %s)\n",
                 fault.what(), work.c_str(), device, cudaGetErrorName(fault.status()));
  }
  // Nothing queued on the device can run any more: drop it, so that waits on it end.
  const auto drop = [](CUstream_st& stream) {
    stream.queue.clear();
    stream.done = stream.issued;
  };
  drop(*state.legacy);
  for (auto& [handle, stream] : rt.streams) {
    if (stream->device == device) drop(*stream);
  }
}

namespace {

// Every value of enum cudaError (driver_types.h of CUDA 13) and its name.
#define ALLOY_CUDA_ERROR(name) \
  { name, #name }
constexpr std::pair<cudaError_t, const char*> kNames[] = {
    ALLOY_CUDA_ERROR(cudaSuccess),
    ALLOY_CUDA_ERROR(cudaErrorInvalidValue),
    ALLOY_CUDA_ERROR(cudaErrorMemoryAllocation),
    ALLOY_CUDA_ERROR(cudaErrorInitializationError),
    ALLOY_CUDA_ERROR(cudaErrorCudartUnloading),
    ALLOY_CUDA_ERROR(cudaErrorProfilerDisabled),
    ALLOY_CUDA_ERROR(cudaErrorProfilerNotInitialized),
    ALLOY_CUDA_ERROR(cudaErrorProfilerAlreadyStarted),
    ALLOY_CUDA_ERROR(cudaErrorProfilerAlreadyStopped),
    ALLOY_CUDA_ERROR(cudaErrorInvalidConfiguration),
    ALLOY_CUDA_ERROR(cudaErrorInvalidPitchValue),
    ALLOY_CUDA_ERROR(cudaErrorInvalidSymbol),
    ALLOY_CUDA_ERROR(cudaErrorInvalidHostPointer),
    ALLOY_CUDA_ERROR(cudaErrorInvalidDevicePointer),
    ALLOY_CUDA_ERROR(cudaErrorInvalidTexture),
    ALLOY_CUDA_ERROR(cudaErrorInvalidTextureBinding),
    ALLOY_CUDA_ERROR(cudaErrorInvalidChannelDescriptor),
    ALLOY_CUDA_ERROR(cudaErrorInvalidMemcpyDirection),
    ALLOY_CUDA_ERROR(cudaErrorAddressOfConstant),
    ALLOY_CUDA_ERROR(cudaErrorTextureFetchFailed),
    ALLOY_CUDA_ERROR(cudaErrorTextureNotBound),
    ALLOY_CUDA_ERROR(cudaErrorSynchronizationError),
    ALLOY_CUDA_ERROR(cudaErrorInvalidFilterSetting),
    ALLOY_CUDA_ERROR(cudaErrorInvalidNormSetting),
    ALLOY_CUDA_ERROR(cudaErrorMixedDeviceExecution),
    ALLOY_CUDA_ERROR(cudaErrorNotYetImplemented),
    ALLOY_CUDA_ERROR(cudaErrorMemoryValueTooLarge),
    ALLOY_CUDA_ERROR(cudaErrorStubLibrary),
    ALLOY_CUDA_ERROR(cudaErrorInsufficientDriver),
    ALLOY_CUDA_ERROR(cudaErrorCallRequiresNewerDriver),
    ALLOY_CUDA_ERROR(cudaErrorInvalidSurface),
    ALLOY_CUDA_ERROR(cudaErrorDuplicateVariableName),
    ALLOY_CUDA_ERROR(cudaErrorDuplicateTextureName),
    ALLOY_CUDA_ERROR(cudaErrorDuplicateSurfaceName),
    ALLOY_CUDA_ERROR(cudaErrorDevicesUnavailable),
    ALLOY_CUDA_ERROR(cudaErrorIncompatibleDriverContext),
    ALLOY_CUDA_ERROR(cudaErrorMissingConfiguration),
    ALLOY_CUDA_ERROR(cudaErrorPriorLaunchFailure),
    ALLOY_CUDA_ERROR(cudaErrorLaunchMaxDepthExceeded),
    ALLOY_CUDA_ERROR(cudaErrorLaunchFileScopedTex),
    ALLOY_CUDA_ERROR(cudaErrorLaunchFileScopedSurf),
    ALLOY_CUDA_ERROR(cudaErrorSyncDepthExceeded),
    ALLOY_CUDA_ERROR(cudaErrorLaunchPendingCountExceeded),
    ALLOY_CUDA_ERROR(cudaErrorInvalidDeviceFunction),
    ALLOY_CUDA_ERROR(cudaErrorNoDevice),
    ALLOY_CUDA_ERROR(cudaErrorInvalidDevice),
    ALLOY_CUDA_ERROR(cudaErrorDeviceNotLicensed),
    ALLOY_CUDA_ERROR(cudaErrorSoftwareValidityNotEstablished),
    ALLOY_CUDA_ERROR(cudaErrorStartupFailure),
    ALLOY_CUDA_ERROR(cudaErrorInvalidKernelImage),
    ALLOY_CUDA_ERROR(cudaErrorDeviceUninitialized),
    ALLOY_CUDA_ERROR(cudaErrorMapBufferObjectFailed),
    ALLOY_CUDA_ERROR(cudaErrorUnmapBufferObjectFailed),
    ALLOY_CUDA_ERROR(cudaErrorArrayIsMapped),
    ALLOY_CUDA_ERROR(cudaErrorAlreadyMapped),
    ALLOY_CUDA_ERROR(cudaErrorNoKernelImageForDevice),
    ALLOY_CUDA_ERROR(cudaErrorAlreadyAcquired),
    ALLOY_CUDA_ERROR(cudaErrorNotMapped),
    ALLOY_CUDA_ERROR(cudaErrorNotMappedAsArray),
    ALLOY_CUDA_ERROR(cudaErrorNotMappedAsPointer),
    ALLOY_CUDA_ERROR(cudaErrorECCUncorrectable),
    ALLOY_CUDA_ERROR(cudaErrorUnsupportedLimit),
    ALLOY_CUDA_ERROR(cudaErrorDeviceAlreadyInUse),
    ALLOY_CUDA_ERROR(cudaErrorPeerAccessUnsupported),
    ALLOY_CUDA_ERROR(cudaErrorInvalidPtx),
    ALLOY_CUDA_ERROR(cudaErrorInvalidGraphicsContext),
    ALLOY_CUDA_ERROR(cudaErrorNvlinkUncorrectable),
    ALLOY_CUDA_ERROR(cudaErrorJitCompilerNotFound),
    ALLOY_CUDA_ERROR(cudaErrorUnsupportedPtxVersion),
    ALLOY_CUDA_ERROR(cudaErrorJitCompilationDisabled),
    ALLOY_CUDA_ERROR(cudaErrorUnsupportedExecAffinity),
    ALLOY_CUDA_ERROR(cudaErrorUnsupportedDevSideSync),
    ALLOY_CUDA_ERROR(cudaErrorContained),
    ALLOY_CUDA_ERROR(cudaErrorInvalidSource),
    ALLOY_CUDA_ERROR(cudaErrorFileNotFound),
    ALLOY_CUDA_ERROR(cudaErrorSharedObjectSymbolNotFound),
    ALLOY_CUDA_ERROR(cudaErrorSharedObjectInitFailed),
    ALLOY_CUDA_ERROR(cudaErrorOperatingSystem),
    ALLOY_CUDA_ERROR(cudaErrorInvalidResourceHandle),
    ALLOY_CUDA_ERROR(cudaErrorIllegalState),
    ALLOY_CUDA_ERROR(cudaErrorLossyQuery),
    ALLOY_CUDA_ERROR(cudaErrorSymbolNotFound),
    ALLOY_CUDA_ERROR(cudaErrorNotReady),
    ALLOY_CUDA_ERROR(cudaErrorIllegalAddress),
    ALLOY_CUDA_ERROR(cudaErrorLaunchOutOfResources),
    ALLOY_CUDA_ERROR(cudaErrorLaunchTimeout),
    ALLOY_CUDA_ERROR(cudaErrorLaunchIncompatibleTexturing),
    ALLOY_CUDA_ERROR(cudaErrorPeerAccessAlreadyEnabled),
    ALLOY_CUDA_ERROR(cudaErrorPeerAccessNotEnabled),
    ALLOY_CUDA_ERROR(cudaErrorSetOnActiveProcess),
    ALLOY_CUDA_ERROR(cudaErrorContextIsDestroyed),
    ALLOY_CUDA_ERROR(cudaErrorAssert),
    ALLOY_CUDA_ERROR(cudaErrorTooManyPeers),
    ALLOY_CUDA_ERROR(cudaErrorHostMemoryAlreadyRegistered),
    ALLOY_CUDA_ERROR(cudaErrorHostMemoryNotRegistered),
    ALLOY_CUDA_ERROR(cudaErrorHardwareStackError),
    ALLOY_CUDA_ERROR(cudaErrorIllegalInstruction),
    ALLOY_CUDA_ERROR(cudaErrorMisalignedAddress),
    ALLOY_CUDA_ERROR(cudaErrorInvalidAddressSpace),
    ALLOY_CUDA_ERROR(cudaErrorInvalidPc),
    ALLOY_CUDA_ERROR(cudaErrorLaunchFailure),
    ALLOY_CUDA_ERROR(cudaErrorCooperativeLaunchTooLarge),
    ALLOY_CUDA_ERROR(cudaErrorTensorMemoryLeak),
    ALLOY_CUDA_ERROR(cudaErrorNotPermitted),
    ALLOY_CUDA_ERROR(cudaErrorNotSupported),
    ALLOY_CUDA_ERROR(cudaErrorSystemNotReady),
    ALLOY_CUDA_ERROR(cudaErrorSystemDriverMismatch),
    ALLOY_CUDA_ERROR(cudaErrorCompatNotSupportedOnDevice),
    ALLOY_CUDA_ERROR(cudaErrorMpsConnectionFailed),
    ALLOY_CUDA_ERROR(cudaErrorMpsRpcFailure),
    ALLOY_CUDA_ERROR(cudaErrorMpsServerNotReady),
    ALLOY_CUDA_ERROR(cudaErrorMpsMaxClientsReached),
    ALLOY_CUDA_ERROR(cudaErrorMpsMaxConnectionsReached),
    ALLOY_CUDA_ERROR(cudaErrorMpsClientTerminated),
    ALLOY_CUDA_ERROR(cudaErrorCdpNotSupported),
    ALLOY_CUDA_ERROR(cudaErrorCdpVersionMismatch),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureUnsupported),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureInvalidated),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureMerge),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureUnmatched),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureUnjoined),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureIsolation),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureImplicit),
    ALLOY_CUDA_ERROR(cudaErrorCapturedEvent),
    ALLOY_CUDA_ERROR(cudaErrorStreamCaptureWrongThread),
    ALLOY_CUDA_ERROR(cudaErrorTimeout),
    ALLOY_CUDA_ERROR(cudaErrorGraphExecUpdateFailure),
    ALLOY_CUDA_ERROR(cudaErrorExternalDevice),
    ALLOY_CUDA_ERROR(cudaErrorInvalidClusterSize),
    ALLOY_CUDA_ERROR(cudaErrorFunctionNotLoaded),
    ALLOY_CUDA_ERROR(cudaErrorInvalidResourceType),
    ALLOY_CUDA_ERROR(cudaErrorInvalidResourceConfiguration),
    ALLOY_CUDA_ERROR(cudaErrorUnknown),
    ALLOY_CUDA_ERROR(cudaErrorApiFailureBase),
};
#undef ALLOY_CUDA_ERROR

// The descriptions of the errors this runtime returns, as CUDA words them.
const char* description(cudaError_t status) {
  switch (status) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorIllegalState:
      return "operation not permitted in current state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown:
      return "unknown error";
    default:
      return nullptr;
  }
}

}  // namespace

}  // namespace alloy::emulator

using namespace alloy::emulator;

const char* cudaGetErrorName(cudaError_t status) {
  for (const auto& [value, name] : kNames) {
    if (value == status) return name;
  }
  return "unrecognized error code";
}

const char* cudaGetErrorString(cudaError_t status) {
  if (const char* text = description(status)) return text;
  // An error this runtime never returns: its name says what it is.
  return cudaGetErrorName(status);
}

cudaError_t cudaGetLastError() {
  // A lost context's error is sticky: reading it does not clear it.
  if (const cudaError_t sticky = device_error(this_thread().device)) return sticky;
  const cudaError_t last = this_thread().last_error;
  this_thread().last_error = cudaSuccess;
  return last;
}

cudaError_t cudaPeekAtLastError() {
  if (const cudaError_t sticky = device_error(this_thread().device)) return sticky;
  return this_thread().last_error;
}
