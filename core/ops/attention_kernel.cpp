#include "core/ops/attention_kernel.h"

#include <atomic>

#include "core/setting_error.h"

namespace alloy {

namespace {

std::atomic<AttentionKernel>& setting() {
  static std::atomic<AttentionKernel> kernel{AttentionKernel::automatic};
  return kernel;
}

}  // namespace

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::alloy:
      return "alloy";
    case AttentionKernel::cudnn:
      return "cudnn";
    case AttentionKernel::automatic:
      break;
  }
  return "auto";
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  for (const AttentionKernel kernel :
       {AttentionKernel::automatic, AttentionKernel::alloy, AttentionKernel::cudnn}) {
    if (name == attention_kernel_name(kernel)) return kernel;
  }
  setting_fail("{attention_kernel} '", name, "' is not one of auto, alloy or cudnn");
}

void set_attention_kernel(AttentionKernel kernel) {
  setting().store(kernel);
}

AttentionKernel attention_kernel() {
  return setting().load();
}

}  // namespace alloy
