#include "parallel/process_group.h"

#include "core/error.h"

namespace alloy::parallel {

namespace {

void require_cpu(const char* operation, const Tensor& tensor) {
  ALLOY_CHECK(tensor.device().is_cpu(), operation, " of ", tensor.str(),
              ": this process group reaches CPU tensors only");
}

}  // namespace

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
