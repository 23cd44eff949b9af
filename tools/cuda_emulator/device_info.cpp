// The emulated devices: their number and memory (from the environment), their properties, and
// the calling thread's current device.
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

constexpr int kMaxDevices = 64;

[[noreturn]] void bad_config(const char* variable, const char* value, const char* expected) {
  std::fprintf(stderr,
               "alloy CUDA emulator: %s=\"%s\" is not valid: expected %s. Fix or unset it "
               "(this is a fatal configuration error).\n",
               variable, value, expected);
  // Fatal even under a test framework that handles SIGABRT: no device can be set up.
  std::signal(SIGABRT, SIG_DFL);
  std::abort();
}

// A byte count: digits, then optionally K, M, G or T (binary multiples), optionally followed
// by "iB" or "B": 8G, 512M, 2GiB, 1048576.
bool parse_size(const std::string& text, std::size_t* bytes) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0 || digits > 18) return false;
  std::size_t value = std::stoull(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  for (char& c : suffix)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!suffix.empty() && suffix != "B") {
    const std::string units = "KMGT";
    const std::size_t unit = units.find(suffix[0]);
    const std::string rest = suffix.substr(1);
    if (unit == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) return false;
    shift = 10 * static_cast<int>(unit + 1);
  }
  if (value == 0 || value > (std::size_t{1} << (62 - shift))) return false;
  *bytes = value << shift;
  return true;
}

Config read_config() {
  Config result;
  if (const char* devices = std::getenv("ALLOY_EMULATOR_DEVICES")) {
    char* end = nullptr;
    const long count = std::strtol(devices, &end, 10);
    if (*devices == '\0' || *end != '\0' || count < 1 || count > kMaxDevices) {
      bad_config("ALLOY_EMULATOR_DEVICES", devices, "a device count from 1 to 64");
    }
    result.devices = static_cast<int>(count);
  }
  if (const char* memory = std::getenv("ALLOY_EMULATOR_MEMORY")) {
    if (!parse_size(memory, &result.memory)) {
      bad_config("ALLOY_EMULATOR_MEMORY", memory,
                 "a positive byte count such as 8G, 512M or 1073741824");
    }
  }
  if (const char* mprotect = std::getenv("ALLOY_EMULATOR_MPROTECT")) {
    if (std::strcmp(mprotect, "0") != 0 && std::strcmp(mprotect, "1") != 0)
      bad_config("ALLOY_EMULATOR_MPROTECT", mprotect, "0 or 1");
    result.mprotect = mprotect[0] == '1';
  }
  return result;
}

}  // namespace

const Config& config() {
  static const Config result = read_config();
  return result;
}

bool valid_device(int device) {
  return device >= 0 && device < config().devices;
}

Runtime& runtime() {
  // Never destroyed: threads the process leaves running (a watchdog) may still call the
  // runtime while static destructors run at exit.
  static Runtime* const instance = [] {
    auto* created = new Runtime;
    created->devices.resize(static_cast<std::size_t>(config().devices));
    for (std::size_t d = 0; d < created->devices.size(); ++d) {
      auto legacy = std::make_shared<CUstream_st>();
      legacy->device = static_cast<int>(d);
      legacy->legacy = true;
      created->devices[d].legacy = std::move(legacy);
    }
    return created;
  }();
  return *instance;
}

std::unique_lock<std::recursive_mutex> lock_runtime() {
  return std::unique_lock<std::recursive_mutex>(runtime().mutex);
}

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = config().devices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  this_thread().device = device;
  return fail(device_error(device));
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = this_thread().device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  // An H100 SXM's shape, so that code sizing launches by it behaves as on the real device.
  *properties = cudaDeviceProp{};
  std::snprintf(properties->name, sizeof properties->name, "Alloy CUDA emulator");
  properties->uuid.bytes[0] = static_cast<char>(device + 1);
  properties->totalGlobalMem = config().memory;
  properties->sharedMemPerBlock = 48 << 10;
  properties->sharedMemPerBlockOptin = 227 << 10;
  properties->sharedMemPerMultiprocessor = 228 << 10;
  properties->reservedSharedMemPerBlock = 1 << 10;
  properties->regsPerBlock = 65536;
  properties->regsPerMultiprocessor = 65536;
  properties->warpSize = 32;
  properties->memPitch = 2147483647;
  properties->maxThreadsPerBlock = 1024;
  properties->maxThreadsDim[0] = 1024;
  properties->maxThreadsDim[1] = 1024;
  properties->maxThreadsDim[2] = 64;
  properties->maxGridSize[0] = 2147483647;
  properties->maxGridSize[1] = 65535;
  properties->maxGridSize[2] = 65535;
  properties->totalConstMem = 64 << 10;
  properties->major = 9;
  properties->minor = 0;
  properties->textureAlignment = 512;
  properties->texturePitchAlignment = 32;
  properties->multiProcessorCount = 132;
  properties->maxThreadsPerMultiProcessor = 2048;
  properties->maxBlocksPerMultiProcessor = 32;
  properties->l2CacheSize = 50 << 20;
  properties->memoryBusWidth = 5120;
  properties->concurrentKernels = 1;
  properties->asyncEngineCount = 3;
  properties->unifiedAddressing = 1;
  properties->managedMemory = 1;
  properties->canMapHostMemory = 1;
  properties->streamPrioritiesSupported = 1;
  properties->globalL1CacheSupported = 1;
  properties->localL1CacheSupported = 1;
  properties->computePreemptionSupported = 1;
  properties->cooperativeLaunch = 1;
  properties->pciBusID = device + 1;
  properties->hostNumaId = -1;
  return cudaSuccess;
}

// The compute capability and the multiprocessor count (what the cuDNN frontend asks for), as
// cudaGetDeviceProperties gives them; other attributes are not emulated.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  cudaDeviceProp properties;
  const cudaError_t status = cudaGetDeviceProperties(&properties, device);
  if (status != cudaSuccess) return status;
  switch (attribute) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = properties.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = properties.minor;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = properties.multiProcessorCount;
      return cudaSuccess;
    default:
      return fail(cudaErrorNotSupported);
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int length, int device) {
  if (bus == nullptr || length <= 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  const int written =
      std::snprintf(bus, static_cast<std::size_t>(length), "0000:%02x:00.0", device + 1);
  if (written < 0 || written >= length) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}
