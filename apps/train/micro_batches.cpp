#include "apps/train/micro_batches.h"

#include <optional>

#include "apps/train/data_parallel.h"
#include "core/error.h"
#include "core/nn/dropout.h"
#include "core/setting_error.h"
#include "parallel/distributed_sampler.h"

namespace alloy::app {

std::vector<std::int64_t> micro_batch_sizes(std::int64_t rows, std::int64_t accumulation_steps) {
  ALLOY_CHECK(rows >= 0 && accumulation_steps >= 1, "micro_batch_sizes: ", rows, " rows in ",
              accumulation_steps, " micro-batches");
  std::vector<std::int64_t> sizes;
  const std::int64_t base = rows / accumulation_steps;
  const std::int64_t larger = rows % accumulation_steps;
  for (std::int64_t i = 0; i < accumulation_steps; ++i) {
    const std::int64_t size = base + (i < larger ? 1 : 0);
    if (size > 0) sizes.push_back(size);
  }
  return sizes;
}

std::int64_t micro_batch_size(std::int64_t global_batch, int world,
                              std::int64_t accumulation_steps) {
  if (accumulation_steps < 1) {
    setting_fail("{accumulation_steps} must be at least 1, got ", accumulation_steps);
  }
  const std::int64_t share = parallel::local_batch_size(global_batch, world);
  if (share % accumulation_steps != 0) {
    if (world == 1) {
      setting_fail("{batch_size} ", global_batch, " does not split into ", accumulation_steps,
                   " equal micro-batches ({accumulation_steps} ", accumulation_steps,
                   " must divide it)");
    }
    setting_fail("{batch_size} ", global_batch, " over ", world, " ranks is ", share,
                 " examples per rank, which {accumulation_steps} ", accumulation_steps,
                 " does not divide");
  }
  return share / accumulation_steps;
}

void for_each_micro_batch(std::int64_t rows, std::int64_t accumulation_steps,
                          const Tensor& step_count, DataParallel* data_parallel,
                          const std::function<void(std::int64_t first, std::int64_t count)>& work) {
  const std::vector<std::int64_t> sizes = micro_batch_sizes(rows, accumulation_steps);
  const std::int64_t rank = data_parallel ? data_parallel->rank() : 0;
  const std::int64_t world = data_parallel ? data_parallel->world_size() : 1;
  std::int64_t first = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::optional<parallel::DistributedDataParallel::NoSync> accumulate_only;
    if (data_parallel && i + 1 < sizes.size()) accumulate_only.emplace(data_parallel->ddp());
    const nn::DropoutStreamScope dropout_stream({&step_count, rank + world * first, world});
    work(first, sizes[i]);
    first += sizes[i];
  }
}

Tensor batch_rows(const Tensor& batch, std::int64_t first, std::int64_t count) {
  ALLOY_CHECK(batch.defined() && batch.ndim() >= 1 && first >= 0 && count >= 0 &&
                  first + count <= batch.dim(0),
              "batch_rows: rows [", first, ", ", first + count, ") of ", batch.str());
  if (first == 0 && count == batch.dim(0)) return batch;
  Shape shape = batch.shape();
  const std::int64_t row_elements = batch.numel() / batch.dim(0);  // dim(0) >= 1 here
  shape[0] = count;
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements) * dtype_size(batch.dtype());
  return batch.view(static_cast<std::size_t>(first) * row_bytes, shape, batch.dtype());
}

}  // namespace alloy::app
