#include "apps/train/version.h"

namespace alloy::app {

std::string version_string() {
#ifdef ALLOY_HAVE_CUDA
  return std::string("alloy ") + ALLOY_VERSION + " (CUDA backend)";
#else
  return std::string("alloy ") + ALLOY_VERSION + " (CPU backend only)";
#endif
}

}  // namespace alloy::app
