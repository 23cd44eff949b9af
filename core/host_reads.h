// Counts every time tensor contents are handed to host code: Tensor::to_floats, a copy from a
// device into host memory, an op that returns a host value. On a GPU each is a device-to-host
// copy the host waits for. Tests read the count around training steps to show that a step
// reads nothing back; the same code paths run on every backend, so the CPU build shows it too.
#pragma once

#include <cstdint>

namespace alloy {

std::uint64_t host_read_count();
void note_host_read();

}  // namespace alloy
