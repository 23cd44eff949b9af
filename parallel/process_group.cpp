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

}  // namespace

std::string allreduce_description(const Tensor& tensor, ReduceOp op) {
  const std::string what =
      describe(op == ReduceOp::sum ? "allreduce_sum" : "allreduce_average", tensor);
  ALLOY_CHECK(is_floating(tensor.dtype()), what, ": only f32, f16 and bf16 can be reduced");
  return what;
}

std::string half_sum_description(const Tensor& tensor) {
  const std::string what = describe("allreduce_half_sum", tensor);
  ALLOY_CHECK(tensor.dtype() == DType::f16 || tensor.dtype() == DType::bf16, what,
              ": only f16 and bf16 tensors are summed in half precision");
  return what;
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
