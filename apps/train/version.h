#pragma once

#include <string>

namespace alloy::app {

// "alloy 0.1.0 (CPU backend only)"
std::string version_string();

}  // namespace alloy::app
