// Gradient accumulation (--accumulation-steps N): each rank's share of a step's global batch
// is processed as N micro-batches, forward and backward one after the other with gradients
// accumulating, then one optimizer step (apps/train/train_step.h). This file holds how a batch is
// split and which batch sizes split evenly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace alloy::app {

// The rows of each micro-batch of a step of `rows` rows split `accumulation_steps` ways, in
// order: as even as possible, the first rows % accumulation_steps one row larger (an epoch's
// last, smaller batch), and micro-batches that would have no rows left out.
std::vector<std::int64_t> micro_batch_sizes(std::int64_t rows, std::int64_t accumulation_steps);

// The rows of each micro-batch of a full step: --batch-size over `world` ranks, split
// --accumulation-steps ways. A UsageError naming the flags when the ranks' share does not split
// into equal micro-batches (and, as parallel::local_batch_size, when the batch does not divide
// among the ranks).
std::int64_t micro_batch_size(std::int64_t global_batch, int world,
                              std::int64_t accumulation_steps);

// Rows [first, first + count) of `batch` ([N, ...], contiguous): a view sharing its storage,
// so a micro-batch costs no copy and a captured step reads the batch where it lies.
Tensor batch_rows(const Tensor& batch, std::int64_t first, std::int64_t count);

}  // namespace alloy::app
