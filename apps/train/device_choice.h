// --device: auto picks a usable CUDA device and falls back to the CPU; an explicit cuda
// without one is an error naming the reason. In a data-parallel job each rank takes the GPU of
// its local rank (cuda:LOCAL_RANK, whichever launcher set it), chosen before any CUDA or NCCL
// call touches a device.
#pragma once

#include <string>

#include "core/device.h"
#include "parallel/rendezvous.h"

namespace alloy::app {

struct DeviceChoice {
  Device device;
  std::string explanation;  // one line for stderr: which device and, for auto, why
};

// What this process can see of CUDA: the number of usable devices, or why there is none.
struct CudaDevices {
  int count = 0;       // 0: none usable
  std::string reason;  // why none, when count is 0
};

// Asks the CUDA runtime (cudaGetDeviceCount and the compute capability); creates no context.
CudaDevices probe_cuda_devices();

// The device of the process at `placement`, from `flag` (a validated --device value) and what
// `cuda` offers; pure, so that every launcher's case is testable without a GPU:
//   cpu     the CPU;
//   auto    cuda:<local rank> when a CUDA device is usable, else the CPU (saying why);
//   cuda    cuda:<local rank>;
//   cuda:N  cuda:N as given, whatever the local rank (several ranks may share it over Gloo).
// Throws alloy::Error for cuda or cuda:N without a usable device ("--device cuda: no usable
// CUDA device: <reason>") and for a device the machine does not have ("local rank 3 needs
// cuda:3, but this machine has 2 CUDA devices").
DeviceChoice choose_device(const std::string& flag, const parallel::Rendezvous& placement,
                           const CudaDevices& cuda);

// A single process on this machine (alloy eval, alloy mem).
DeviceChoice choose_device(const std::string& flag);

// Makes `device` the calling thread's current CUDA device (nothing for the CPU), so that
// whatever creates CUDA state before the first kernel (the NCCL communicator, pinned staging
// buffers, streams) does it on this rank's GPU, not on cuda:0.
void make_current(const Device& device);

}  // namespace alloy::app
