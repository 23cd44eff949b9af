// Where a tensor lives.
#pragma once

#include <string>

namespace alloy {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string str() const;
};

}  // namespace alloy
