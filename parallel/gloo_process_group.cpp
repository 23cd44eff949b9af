#include "parallel/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <csignal>
#include <cstdint>
#include <sstream>

#include "core/error.h"
#include "core/half.h"
#include "parallel/tcp_store.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/cuda/handles.h"
#endif

namespace alloy::parallel {
namespace {

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer has died; left at
// the default action, that signal would kill this process before Gloo could report the peer.
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

// Gloo prefixes its messages with "[source.cc:123] "; the reader needs only the rest.
std::string gloo_cause(const std::string& message) {
  const auto end = message.find("] ");
  return message.rfind('[', 0) == 0 && end != std::string::npos ? message.substr(end + 2) : message;
}

// Gloo's reduction functions for half bit patterns: c = round(a + b), elementwise, the operands
// widened to fp32 and the sum rounded to nearest even. Gloo's own gloo::sum<gloo::float16> is
// not used: for some pairs far apart in magnitude it returns its first operand instead of the
// rounded sum (0x2ad2 + 0x715a gives 0x2ad2), so its result depends on the order of the
// operands, and reducing to an owner would not give what the allreduce gives.
template <float (*widen)(std::uint16_t), std::uint16_t (*round)(float)>
void sum_half(void* c, const void* a, const void* b, std::size_t n) {
  auto* out = static_cast<std::uint16_t*>(c);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = round(widen(x[i]) + widen(y[i]));
  }
}

std::string joined_key(int rank) {
  return "alloy/joined/" + std::to_string(rank);
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(int rank, int size, const std::string& master_addr,
                                   int master_port, const ProcessGroupOptions& options)
    : rank_(rank), size_(size), options_(options), master_(endpoint_str(master_addr, master_port)) {
  ALLOY_CHECK(size >= 1 && rank >= 0 && rank < size, "process group: rank ", rank,
              " does not exist in a world of size ", size);
  ignore_sigpipe();
  try {
    if (rank == 0) server_ = std::make_unique<TcpStoreServer>(master_addr, master_port);
    store_ = std::make_unique<TcpStore>(master_addr, master_port, options.timeout);
    store_->join_as(rank);
  } catch (const Error& error) {
    fail(here(), ": ", error.what());
  }
  join();
  connect_peers();
}

#ifdef ALLOY_HAVE_CUDA
namespace {

// Page-locked host memory (cudaHostAlloc): copies to and from it are true asynchronous DMA.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    void* data = nullptr;
    ALLOY_CUDA_CHECK(cudaHostAlloc(&data, bytes, cudaHostAllocDefault), "allocating ", bytes,
                     " bytes of pinned host memory to stage a collective");
    data_ = cuda::Owned<void*, cudaFreeHost>(data);
  }
  void* get() const { return data_.get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  cuda::Owned<void*, cudaFreeHost> data_;
  std::size_t bytes_ = 0;
};

}  // namespace

struct GlooProcessGroup::Staging {
  explicit Staging(int device) : device(device), downloaded(device), uploaded(device) {}
  int device;
  PinnedBuffer buffer;
  cuda::Event downloaded;
  cuda::Event uploaded;  // the last copy back, which reads `buffer`
};
#else
struct GlooProcessGroup::Staging {};
#endif

GlooProcessGroup::~GlooProcessGroup() {
#ifdef ALLOY_HAVE_CUDA
  // The last copy back may still read the pinned buffer; a destructor cannot report a failure.
  if (staging_) static_cast<void>(cudaEventSynchronize(staging_->uploaded.get()));
#endif
  context_.reset();
  store_.reset();  // says goodbye
  // Rank 0's server answers the other ranks' last reads: after a clean run it stays until they
  // have left.
  if (server_ != nullptr && failure_.empty()) server_->wait_for_ranks_to_leave(options_.timeout);
}

std::string GlooProcessGroup::here() const {
  return detail::concat("rank ", rank_, " of ", size_);
}

// Every rank announces itself with its world size and waits for the others, so that a rank
// that never starts is named, and a rank started with another world size is caught.
void GlooProcessGroup::join() {
  std::vector<std::string> keys;
  for (int rank = 0; rank < size_; ++rank)
    keys.push_back(joined_key(rank));
  const std::string world = std::to_string(size_);
  try {
    store_->set(joined_key(rank_), std::vector<char>(world.begin(), world.end()));
    const auto missing = store_->missing_after(keys, options_.timeout);
    if (!missing.empty()) {
      std::string ranks;
      for (const auto& key : missing) {
        ranks += (ranks.empty() ? "" : ", ") + key.substr(key.rfind('/') + 1);
      }
      fail("rendezvous at ", master_, " timed out after ", seconds_str(options_.timeout), ": rank",
           missing.size() > 1 ? "s " : " ", ranks, " of ", size_, " did not join");
    }
    for (int rank = 0; rank < size_; ++rank) {
      const auto theirs = store_->get(joined_key(rank));
      if (std::string(theirs.begin(), theirs.end()) != world) {
        fail("rank ", rank, " was started with world size ",
             std::string(theirs.begin(), theirs.end()), ", this rank with ", size_);
      }
    }
  } catch (const Error& error) {
    fail(here(), ": ", error.what());
  }
}

void GlooProcessGroup::connect_peers() {
  try {
    gloo::transport::tcp::attr attr;
    // Listen for peers on the interface that reaches the master: the one they can reach too.
    attr.hostname = store_->local_address();
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(options_.timeout);
    gloo::rendezvous::PrefixStore store("gloo", *store_);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  } catch (const gloo::Exception& error) {
    fail(here(), ": cannot connect to its peers: ", gloo_cause(error.what()));
  } catch (const gloo::EnforceNotMet& error) {
    fail(here(), ": cannot connect to its peers: ", gloo_cause(error.what()));
  } catch (const Error& error) {
    fail(here(), ": cannot connect to its peers: ", error.what());
  }
}

template <class Body>
void GlooProcessGroup::run(const std::string& what, Body&& body) {
  if (!failure_.empty()) {
    fail(what, " on ", here(), ": the process group is unusable after an earlier failure (",
         failure_, ")");
  }
  std::string cause;
  try {
    body();
    return;
  } catch (const gloo::Exception& error) {
    cause = gloo_cause(error.what());
  } catch (const gloo::EnforceNotMet& error) {
    cause = gloo_cause(error.what());
  }
  failure_ = detail::concat(what, " failed on ", here(), ": ", departures(), "; gloo: ", cause);
  throw Error(failure_);
}

std::string GlooProcessGroup::departures() {
  return describe_departures(*store_, options_.timeout, master_);
}

template <class Collective>
void GlooProcessGroup::by_parts(std::size_t count, Parts parts, Collective&& collective) {
  if (parts == nullptr) {
    collective(std::size_t{0}, count, -1);
    return;
  }
  std::size_t offset = 0;
  for (int rank = 0; rank < size_; ++rank) {
    const auto part = static_cast<std::size_t>((*parts)[static_cast<std::size_t>(rank)]);
    if (part > 0) collective(offset, part, rank);
    offset += part;
  }
}

namespace {

using ReduceFunction = void (*)(void*, const void*, const void*, std::size_t);

// An allreduce over `values`, or a reduce to `root` when root >= 0.
template <class T>
void gloo_reduce(const std::shared_ptr<gloo::Context>& context, T* values, std::size_t count,
                 int root, ReduceFunction function, std::chrono::milliseconds timeout) {
  if (root < 0) {
    gloo::AllreduceOptions options(context);
    options.setOutput(values, count);
    options.setReduceFunction(function);
    options.setTimeout(timeout);
    gloo::allreduce(options);
    return;
  }
  gloo::ReduceOptions options(context);
  options.setOutput(values, count);
  options.setRoot(root);
  options.setReduceFunction(function);
  options.setTimeout(timeout);
  gloo::reduce(options);
}

}  // namespace

void GlooProcessGroup::reduce_f32(const std::string& what, float* values, std::size_t count,
                                  ReduceOp op, Parts parts) {
  const auto function = op == ReduceOp::max ? static_cast<ReduceFunction>(&gloo::max<float>)
                                            : static_cast<ReduceFunction>(&gloo::sum<float>);
  by_parts(count, parts, [&](std::size_t offset, std::size_t part, int root) {
    run(what,
        [&] { gloo_reduce(context_, values + offset, part, root, function, options_.timeout); });
  });
  // The elements that hold the result here: all of them, or this rank's part.
  std::size_t mine = 0, mine_count = count;
  if (parts != nullptr) {
    for (int rank = 0; rank < rank_; ++rank)
      mine += static_cast<std::size_t>((*parts)[static_cast<std::size_t>(rank)]);
    mine_count = static_cast<std::size_t>((*parts)[static_cast<std::size_t>(rank_)]);
  }
  if (op == ReduceOp::average) {
    const float divisor = static_cast<float>(size_);
    for (std::size_t i = mine; i < mine + mine_count; ++i)
      values[i] /= divisor;
  }
}

void GlooProcessGroup::reduce_host(const std::string& what, void* data, DType dtype,
                                   std::size_t count, ReduceOp op, Parts parts) {
  if (dtype == DType::f32) {
    reduce_f32(what, static_cast<float*>(data), count, op, parts);
    return;
  }
  const bool bf16 = dtype == DType::bf16;
  auto* half = static_cast<std::uint16_t*>(data);
  Tensor wide = Tensor::empty({static_cast<std::int64_t>(count)}, DType::f32, Device::cpu(),
                              MemoryCategory::communication);
  float* values = wide.data<float>();
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = bf16 ? bf16_bits_to_float(half[i]) : half_bits_to_float(half[i]);
  }
  reduce_f32(what, values, count, op, parts);
  for (std::size_t i = 0; i < count; ++i) {
    half[i] = bf16 ? float_to_bf16_bits(values[i]) : float_to_half_bits(values[i]);
  }
}

void GlooProcessGroup::half_sum_host(const std::string& what, void* data, DType dtype,
                                     std::size_t count, Parts parts) {
  by_parts(count, parts, [&](std::size_t offset, std::size_t part, int root) {
    run(what, [&] {
      const ReduceFunction sum = dtype == DType::f16
                                     ? &sum_half<half_bits_to_float, float_to_half_bits>
                                     : &sum_half<bf16_bits_to_float, float_to_bf16_bits>;
      gloo_reduce(context_, static_cast<std::uint16_t*>(data) + offset, part, root, sum,
                  options_.timeout);
    });
  });
}

void GlooProcessGroup::allgather_host(const std::string& what, void* data,
                                      std::size_t element_bytes,
                                      const std::vector<std::int64_t>& counts) {
  std::vector<std::size_t> bytes;
  std::size_t offset = 0;
  for (int rank = 0; rank < size_; ++rank) {
    const std::size_t part =
        static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]) * element_bytes;
    if (rank < rank_) offset += part;
    bytes.push_back(part);
  }
  auto* output = static_cast<std::uint8_t*>(data);
  // Gloo reads the input while it writes the output: this rank's part goes in as a copy.
  std::vector<std::uint8_t> input(output + offset, output + offset + bytes[rank_]);
  std::uint8_t none = 0;
  run(what, [&] {
    gloo::AllgathervOptions options(context_);
    options.setInput(input.empty() ? &none : input.data(), input.size());
    options.setOutput(output, bytes);
    options.setTimeout(options_.timeout);
    gloo::allgatherv(options);
  });
}

void GlooProcessGroup::broadcast_host(const std::string& what, void* data, std::size_t bytes,
                                      int root) {
  run(what, [&] {
    gloo::BroadcastOptions options(context_);
    options.setOutput(static_cast<std::uint8_t*>(data), bytes);
    options.setRoot(root);
    options.setTimeout(options_.timeout);
    gloo::broadcast(options);
  });
}

void GlooProcessGroup::staged(const std::string& what, const Tensor& tensor,
                              [[maybe_unused]] StreamHandle stream, [[maybe_unused]] bool download,
                              [[maybe_unused]] const std::function<void(void*)>& host) {
#ifdef ALLOY_HAVE_CUDA
  if (!failure_.empty()) {
    fail(what, " on ", here(), ": the process group is unusable after an earlier failure (",
         failure_, ")");
  }
  const Device device = tensor.device();
  if (!staging_) staging_ = std::make_unique<Staging>(device.index);
  ALLOY_CHECK(staging_->device == device.index, what, " on ", here(), ": the tensor is on ",
              device.str(), ", the group's earlier device tensors on cuda:", staging_->device,
              "; one rank stages through one device");
  const cudaStream_t on = stream != nullptr ? stream : cuda::stream_of(device);
  const std::size_t bytes = tensor.nbytes();
  // The previous copy back may still read the buffer (it is queued before this call's copies
  // when they share a stream, so this rarely waits longer than the download would).
  staging_->uploaded.synchronize();
  if (staging_->buffer.bytes() < bytes) staging_->buffer = PinnedBuffer(bytes);
  void* pinned = staging_->buffer.get();
  if (download) {
    ALLOY_CUDA_CHECK(cudaMemcpyAsync(pinned, tensor.raw(), bytes, cudaMemcpyDeviceToHost, on),
                     "staging ", what, " on ", here(), ": copying ", bytes, " bytes from ",
                     device.str());
    staging_->downloaded.record(on);
    staging_->downloaded.synchronize();  // this thread's wait, after the work queued before
  }
  host(pinned);
  ALLOY_CUDA_CHECK(cudaMemcpyAsync(tensor.raw(), pinned, bytes, cudaMemcpyHostToDevice, on),
                   "staging ", what, " on ", here(), ": copying ", bytes, " bytes back to ",
                   device.str());
  staging_->uploaded.record(on);
#else
  fail(what, " on ", here(), ": the tensor is on ", tensor.device().str(),
       ", but this build has no CUDA backend");
#endif
}

void GlooProcessGroup::allreduce(const Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op, nullptr);
}

void GlooProcessGroup::allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle stream) {
  const std::string what = allreduce_description(tensor, op);
  const auto count = static_cast<std::size_t>(tensor.numel());
  if (count == 0) return;
  if (tensor.device().is_cpu()) {
    reduce_host(what, tensor.raw(), tensor.dtype(), count, op, nullptr);
    return;
  }
  staged(what, tensor, stream, true,
         [&](void* data) { reduce_host(what, data, tensor.dtype(), count, op, nullptr); });
}

void GlooProcessGroup::allreduce_half_sum(const Tensor& tensor) {
  allreduce_half_sum_async(tensor, nullptr);
}

void GlooProcessGroup::allreduce_half_sum_async(const Tensor& tensor, StreamHandle stream) {
  const std::string what = half_sum_description(tensor);
  const auto count = static_cast<std::size_t>(tensor.numel());
  if (count == 0) return;
  if (tensor.device().is_cpu()) {
    half_sum_host(what, tensor.raw(), tensor.dtype(), count, nullptr);
    return;
  }
  staged(what, tensor, stream, true,
         [&](void* data) { half_sum_host(what, data, tensor.dtype(), count, nullptr); });
}

void GlooProcessGroup::broadcast(const Tensor& tensor, int root) {
  broadcast_async(tensor, root, nullptr);
}

void GlooProcessGroup::broadcast_async(const Tensor& tensor, int root, StreamHandle stream) {
  const std::string what = broadcast_description(tensor, root, size_);
  if (tensor.nbytes() == 0) return;
  if (tensor.device().is_cpu()) {
    broadcast_host(what, tensor.raw(), tensor.nbytes(), root);
    return;
  }
  // Only the root's values travel: the others need no download.
  staged(what, tensor, stream, rank_ == root,
         [&](void* data) { broadcast_host(what, data, tensor.nbytes(), root); });
}

void GlooProcessGroup::reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                      ReduceOp op) {
  reduce_scatter_async(tensor, counts, op, nullptr);
}

void GlooProcessGroup::reduce_scatter_async(const Tensor& tensor,
                                            const std::vector<std::int64_t>& counts, ReduceOp op,
                                            StreamHandle stream) {
  const std::string what = reduce_scatter_description(tensor, counts, op, size_);
  const auto count = static_cast<std::size_t>(tensor.numel());
  if (count == 0) return;
  if (tensor.device().is_cpu()) {
    reduce_host(what, tensor.raw(), tensor.dtype(), count, op, &counts);
    return;
  }
  staged(what, tensor, stream, true,
         [&](void* data) { reduce_host(what, data, tensor.dtype(), count, op, &counts); });
}

void GlooProcessGroup::reduce_scatter_half_sum(const Tensor& tensor,
                                               const std::vector<std::int64_t>& counts) {
  reduce_scatter_half_sum_async(tensor, counts, nullptr);
}

void GlooProcessGroup::reduce_scatter_half_sum_async(const Tensor& tensor,
                                                     const std::vector<std::int64_t>& counts,
                                                     StreamHandle stream) {
  const std::string what = reduce_scatter_half_sum_description(tensor, counts, size_);
  const auto count = static_cast<std::size_t>(tensor.numel());
  if (count == 0) return;
  if (tensor.device().is_cpu()) {
    half_sum_host(what, tensor.raw(), tensor.dtype(), count, &counts);
    return;
  }
  staged(what, tensor, stream, true,
         [&](void* data) { half_sum_host(what, data, tensor.dtype(), count, &counts); });
}

void GlooProcessGroup::allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) {
  allgather_async(tensor, counts, nullptr);
}

void GlooProcessGroup::allgather_async(const Tensor& tensor,
                                       const std::vector<std::int64_t>& counts,
                                       StreamHandle stream) {
  const std::string what = allgather_description(tensor, counts, size_);
  if (tensor.numel() == 0) return;
  const std::size_t element = dtype_size(tensor.dtype());
  if (tensor.device().is_cpu()) {
    allgather_host(what, tensor.raw(), element, counts);
    return;
  }
  staged(what, tensor, stream, true,
         [&](void* data) { allgather_host(what, data, element, counts); });
}

std::vector<std::string> GlooProcessGroup::allgather_bytes(const std::string& bytes) {
  const std::string what = "allgather of " + std::to_string(bytes.size()) + " bytes";
  std::uint64_t length = bytes.size();
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size_));
  run(what, [&] {
    gloo::AllgatherOptions options(context_);
    options.setInput(&length, 1);
    options.setOutput(lengths.data(), lengths.size());
    options.setTimeout(options_.timeout);
    gloo::allgather(options);
  });
  std::vector<std::size_t> counts(lengths.begin(), lengths.end());
  std::size_t total = 0;
  for (const std::size_t count : counts)
    total += count;
  std::string gathered(total, '\0');
  if (total > 0) {
    std::string input = bytes;  // Gloo takes a mutable pointer even for its input
    run(what, [&] {
      gloo::AllgathervOptions options(context_);
      options.setInput(input.data(), input.size());
      options.setOutput(gathered.data(), counts);
      options.setTimeout(options_.timeout);
      gloo::allgatherv(options);
    });
  }
  std::vector<std::string> pieces;
  std::size_t offset = 0;
  for (const std::size_t count : counts) {
    pieces.push_back(gathered.substr(offset, count));
    offset += count;
  }
  return pieces;
}

void GlooProcessGroup::barrier() {
  run("barrier", [&] {
    gloo::BarrierOptions options(context_);
    options.setTimeout(options_.timeout);
    gloo::barrier(options);
  });
}

}  // namespace alloy::parallel
