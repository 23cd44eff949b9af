// Which kernel runs causal attention (core/ops/attention.h) on a CUDA device
// (--attention-kernel): Alloy's own flash kernels (core/ops/cuda/attention.h) or cuDNN's fused
// attention (core/ops/cuda/attention_cudnn.h). `automatic` takes cuDNN's where it can run the
// shape and dtype, deterministically in training, with no dropout on the probabilities (cuDNN's
// random numbers are not Alloy's counter-based masks), and Alloy's otherwise; fp32 always runs
// Alloy's. The CPU has one kernel whatever it says. Pure host code: the command sets it without
// the CUDA headers.
#pragma once

#include <string>

namespace alloy {

enum class AttentionKernel { automatic, alloy, cudnn };

// "auto", "alloy" or "cudnn".
const char* attention_kernel_name(AttentionKernel kernel);
// The setting's value from its name; a bad name is a usage error naming {attention_kernel}.
AttentionKernel parse_attention_kernel(const std::string& name);

// The process-wide setting, set before training (as set_allow_tf32) and read when an attention
// op is issued; automatic until set.
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

}  // namespace alloy
