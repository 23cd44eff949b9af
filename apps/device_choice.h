// --device: auto picks a usable CUDA device and falls back to the CPU; an explicit cuda
// without one is an error naming the reason.
#pragma once

#include <string>

#include "core/device.h"

namespace alloy::app {

struct DeviceChoice {
  Device device;
  std::string explanation;  // one line for stderr: which device and, for auto, why
};

// `flag` is a validated --device value (auto, cpu, cuda, cuda:N).
DeviceChoice choose_device(const std::string& flag);

}  // namespace alloy::app
