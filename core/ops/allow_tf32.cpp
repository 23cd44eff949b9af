#include "core/ops/allow_tf32.h"

#include <atomic>

namespace alloy {

namespace {

std::atomic<bool>& setting() {
  static std::atomic<bool> allow{false};
  return allow;
}

}  // namespace

void set_allow_tf32(bool allow) {
  setting().store(allow);
}

bool allow_tf32() {
  return setting().load();
}

}  // namespace alloy
