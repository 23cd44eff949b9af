// Whether a call throws alloy::UsageError with `text` in its message (false when it throws
// nothing, or something else).
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace alloy::test {

inline bool usage_error_mentions(const std::function<void()>& call, const std::string& text) {
  try {
    call();
  } catch (const UsageError& error) {
    return std::string(error.what()).find(text) != std::string::npos;
  }
  return false;
}

}  // namespace alloy::test
