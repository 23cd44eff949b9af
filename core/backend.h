// Entry points the CUDA backend provides. A CPU-only build links core/cuda_stub.cpp instead,
// whose versions fail with a message saying CUDA is not compiled in.
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"
#include "core/memory.h"

namespace alloy {

// True when a CUDA device can be used; otherwise `reason` (if given) says why not.
bool cuda_available(std::string* reason = nullptr);
Allocator& cuda_allocator(int index);
void cuda_copy_bytes(void* destination, Device destination_device, const void* source,
                     Device source_device, std::size_t bytes);

}  // namespace alloy
