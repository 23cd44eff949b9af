// Gradient accumulation (--accumulation-steps N): each rank's share of a step's global batch
// is processed as N micro-batches, forward and backward one after the other with gradients
// accumulating, then one optimizer step (apps/train/train_step.h). This file holds how a batch is
// split and which batch sizes split evenly.
#pragma once

#include <cstdint>
#include <functional>
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

class DataParallel;

// Runs `work(first, count)` for each micro-batch of a step of `rows` rows on this rank
// (micro_batch_sizes), in order, each inside an nn::DropoutStreamScope holding `step_count`
// (the optimizer's) and its rows' places in the global batch: rank r of W holds global rows
// r + W * j (parallel/distributed_sampler.h), so dropout masks are one pass's however the step
// is split. With `data_parallel`, the backwards of all micro-batches but the last run inside
// DDP's no_sync: the last one's reduces the sum, one allreduce per step.
void for_each_micro_batch(std::int64_t rows, std::int64_t accumulation_steps,
                          const Tensor& step_count, DataParallel* data_parallel,
                          const std::function<void(std::int64_t first, std::int64_t count)>& work);

// Rows [first, first + count) of `batch` ([N, ...], contiguous): a view sharing its storage,
// so a micro-batch costs no copy and a captured step reads the batch where it lies.
Tensor batch_rows(const Tensor& batch, std::int64_t first, std::int64_t count);

}  // namespace alloy::app
