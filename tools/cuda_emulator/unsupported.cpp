// Entry points that only the cuDNN frontend's headers reference
// (core/ops/cuda/attention_cudnn.cpp): the runtime's pointer attributes, capture info,
// user objects, libraries and kernels loaded at run time, and NVRTC (its engines compiled at run
// time). None is emulated: a runtime call fails with cudaErrorNotSupported, recorded as the
// thread's last error as the runtime records a failure, an NVRTC call with
// NVRTC_ERROR_INTERNAL_ERROR, so the frontend's graphs never build here (docs/cuda_emulator.md).
#include <nvrtc.h>

#include "tools/cuda_emulator/runtime.h"

using alloy::emulator::fail;

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes*, const void*) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, cudaStreamCaptureStatus*, unsigned long long*,
                                     cudaGraph_t*, const cudaGraphNode_t**,
                                     const cudaGraphEdgeData**, size_t*) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t*, void*, cudaHostFn_t, unsigned int,
                                 unsigned int) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned int) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned int, unsigned int) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char*, void**, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult*) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t*, const void*, cudaJitOption*, void**, unsigned int,
                                cudaLibraryOption*, void**, unsigned int) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaLibraryUnload(cudaLibrary_t) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, cudaFuncAttribute, int, int) {
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return fail(cudaErrorNotSupported);
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}
