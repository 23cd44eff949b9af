#include "parallel/process_group.h"

#include "core/error.h"

namespace alloy::parallel {

namespace {

void require_cpu(const char* operation, const Tensor& tensor) {
  ALLOY_CHECK(tensor.device().is_cpu(), operation, " of ", tensor.str(),
              ": this process group reaches CPU tensors only");
}

std::string describe(const char* operation, const Tensor& tensor) {
  return detail::concat(operation, " of ", dtype_name(tensor.dtype()), shape_str(tensor.shape()));
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::average:
      return "average";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

std::string reduced(std::string what, const Tensor& tensor) {
  ALLOY_CHECK(is_floating(tensor.dtype()), what, ": only f32, f16 and bf16 can be reduced");
  return what;
}

std::string half_summed(std::string what, const Tensor& tensor) {
  ALLOY_CHECK(tensor.dtype() == DType::f16 || tensor.dtype() == DType::bf16, what,
              ": only f16 and bf16 tensors are summed in half precision");
  return what;
}

std::string with_counts(std::string what, const Tensor& tensor,
                        const std::vector<std::int64_t>& counts, int world_size) {
  ALLOY_CHECK(counts.size() == static_cast<std::size_t>(world_size), what, ": ", counts.size(),
              " part sizes for a world of size ", world_size);
  std::int64_t total = 0;
  for (const std::int64_t count : counts) {
    ALLOY_CHECK(count >= 0, what, ": a part of ", count, " elements");
    total += count;
  }
  ALLOY_CHECK(total == tensor.numel(), what, ": the parts hold ", total, " elements, the tensor ",
              tensor.numel());
  return what;
}

}  // namespace

std::string allreduce_description(const Tensor& tensor, ReduceOp op) {
  return reduced(describe((std::string("allreduce_") + op_name(op)).c_str(), tensor), tensor);
}

std::string half_sum_description(const Tensor& tensor) {
  return half_summed(describe("allreduce_half_sum", tensor), tensor);
}

std::string reduce_scatter_description(const Tensor& tensor,
                                       const std::vector<std::int64_t>& counts, ReduceOp op,
                                       int world_size) {
  const std::string what = describe((std::string("reduce_scatter_") + op_name(op)).c_str(), tensor);
  return with_counts(reduced(what, tensor), tensor, counts, world_size);
}

std::string reduce_scatter_half_sum_description(const Tensor& tensor,
                                                const std::vector<std::int64_t>& counts,
                                                int world_size) {
  const std::string what = describe("reduce_scatter_half_sum", tensor);
  return with_counts(half_summed(what, tensor), tensor, counts, world_size);
}

std::string allgather_description(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                  int world_size) {
  return with_counts(describe("allgather", tensor), tensor, counts, world_size);
}

std::string broadcast_description(const Tensor& tensor, int root, int world_size) {
  const std::string what = describe("broadcast", tensor) + " from rank " + std::to_string(root);
  ALLOY_CHECK(root >= 0 && root < world_size, what, ": no such rank in a world of size ",
              world_size);
  return what;
}

void ProcessGroup::allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle) {
  require_cpu("allreduce", tensor);
  allreduce(tensor, op);
}

void ProcessGroup::allreduce_half_sum_async(const Tensor& tensor, StreamHandle) {
  require_cpu("allreduce_half_sum", tensor);
  allreduce_half_sum(tensor);
}

void ProcessGroup::broadcast_async(const Tensor& tensor, int root, StreamHandle) {
  require_cpu("broadcast", tensor);
  broadcast(tensor, root);
}

void ProcessGroup::reduce_scatter_async(const Tensor& tensor,
                                        const std::vector<std::int64_t>& counts, ReduceOp op,
                                        StreamHandle) {
  require_cpu("reduce_scatter", tensor);
  reduce_scatter(tensor, counts, op);
}

void ProcessGroup::reduce_scatter_half_sum_async(const Tensor& tensor,
                                                 const std::vector<std::int64_t>& counts,
                                                 StreamHandle) {
  require_cpu("reduce_scatter_half_sum", tensor);
  reduce_scatter_half_sum(tensor, counts);
}

void ProcessGroup::allgather_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                   StreamHandle) {
  require_cpu("allgather", tensor);
  allgather(tensor, counts);
}

void ProcessGroup::broadcast_group_async(const std::vector<Tensor>& tensors, int root,
                                         StreamHandle stream) {
  for (const Tensor& tensor : tensors)
    broadcast_async(tensor, root, stream);
}

void ProcessGroup::follow_stream(const std::string&, StreamHandle) {}

std::vector<std::int64_t> ProcessGroup::allgather_int64(std::int64_t value) {
  // A fixed little-endian encoding, so that ranks on different machines agree.
  const auto bits = static_cast<std::uint64_t>(value);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((bits >> (8 * i)) & 0xffu);
  std::vector<std::int64_t> values;
  int rank = 0;
  for (const std::string& gathered : allgather_bytes(bytes)) {
    ALLOY_CHECK(gathered.size() == 8, "allgather_int64: rank ", rank, " sent ", gathered.size(),
                " bytes instead of 8");
    std::uint64_t decoded = 0;
    for (int i = 7; i >= 0; --i)
      decoded = (decoded << 8) | static_cast<unsigned char>(gathered[i]);
    values.push_back(static_cast<std::int64_t>(decoded));
    ++rank;
  }
  return values;
}

}  // namespace alloy::parallel
