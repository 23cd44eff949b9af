#include "apps/device_choice.h"

#include <cstdlib>

#include "core/backend.h"
#include "core/error.h"

namespace alloy::app {

namespace {
int cuda_index(const std::string& flag) {
  if (flag == "cuda") return 0;
  const std::string digits = flag.substr(5);  // after "cuda:"
  char* end = nullptr;
  const long index = std::strtol(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || index < 0 || index > 1023) {
    usage_fail("--device '", flag, "': the device index must be a number, as in cuda:0");
  }
  return static_cast<int>(index);
}
}  // namespace

DeviceChoice choose_device(const std::string& flag) {
  if (flag == "cpu") return {Device::cpu(), "device cpu"};
  std::string reason;
  const bool usable = cuda_available(&reason);
  if (flag == "auto") {
    if (usable) return {Device::cuda(0), "device cuda:0 (auto)"};
    return {Device::cpu(), "device cpu (auto: no usable CUDA device: " + reason + ")"};
  }
  const Device device = Device::cuda(cuda_index(flag));
  if (!usable) fail("--device ", flag, ": no usable CUDA device: ", reason);
  return {device, "device " + device.str()};
}

}  // namespace alloy::app
