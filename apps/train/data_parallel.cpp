#include "apps/train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/setting_error.h"
#include "parallel/distributed_sampler.h"
#include "parallel/gloo_process_group.h"

#ifdef ALLOY_HAVE_CUDA
#include "parallel/nccl_process_group.h"
#endif

namespace alloy::app {

parallel::Rendezvous resolve_train_rendezvous(const TrainConfig& options) {
  parallel::RendezvousFlags flags;
  if (options.is_set("nodes")) flags.nodes = options.nodes;
  if (options.is_set("gpus")) flags.gpus = options.gpus;
  if (options.is_set("nr")) flags.nr = options.nr;
  if (options.is_set("master_addr")) flags.master_addr = options.master_addr;
  if (options.is_set("master_port")) flags.master_port = options.master_port;
  return parallel::resolve_rendezvous(flags, parallel::process_environment());
}

bool joins_process_group(const TrainConfig& options, const parallel::Rendezvous& placement) {
  return placement.distributed() || options.is_set("dist_backend");
}

void check_distributed_options(const TrainConfig& options, const parallel::Rendezvous& placement) {
  parallel::local_batch_size(options.batch_size, placement.world_size);
  // A named device (cuda:N) is every local rank's; cuda and auto give each its own.
  const bool named_device = options.device.rfind("cuda:", 0) == 0;
  const bool nccl = options.is_set("dist_backend") ? options.dist_backend == "nccl" : named_device;
  if (nccl && named_device && placement.local_world_size > 1) {
    setting_fail("NCCL does not support two ranks on one device (", options.device, "): {device} ",
                 options.device, " puts all ", placement.local_world_size,
                 " ranks of this node on it",
                 options.is_set("dist_backend") ? "" : " and nccl is the default backend on a GPU",
                 "; use {dist_backend} gloo to share it, or {device} cuda for one GPU per rank");
  }
}

std::string dist_backend(const TrainConfig& options, const DeviceChoice& device) {
  if (!options.is_set("dist_backend")) return device.device.is_cuda() ? "nccl" : "gloo";
  if (options.dist_backend == "nccl" && device.device.is_cpu()) {
    setting_failure("{dist_backend} nccl reduces GPU tensors, but this run is on the CPU (",
                    device.explanation, "); use {dist_backend} gloo");
  }
  return options.dist_backend;
}

std::unique_ptr<parallel::ProcessGroup> join_process_group(const parallel::Rendezvous& placement,
                                                           const Device& device,
                                                           const std::string& backend) {
  parallel::ProcessGroupOptions group_options;
  group_options.timeout = kCollectiveTimeout;
  if (const char* text = std::getenv("ALLOY_COLLECTIVE_TIMEOUT")) {
    char* end = nullptr;
    const long seconds = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || seconds < 1 || seconds > 86400) {
      usage_fail("ALLOY_COLLECTIVE_TIMEOUT='", text, "' must be a number of seconds in [1, 86400]");
    }
    group_options.timeout = std::chrono::seconds(seconds);
  }
  if (backend == "gloo") {
    return std::make_unique<parallel::GlooProcessGroup>(placement.rank, placement.world_size,
                                                        placement.master_addr,
                                                        placement.master_port, group_options);
  }
  ALLOY_CHECK(backend == "nccl", "join_process_group: unknown backend '", backend, "'");
#ifdef ALLOY_HAVE_CUDA
  return std::make_unique<parallel::NcclProcessGroup>(placement.rank, placement.world_size,
                                                      placement.master_addr, placement.master_port,
                                                      device, group_options);
#else
  setting_failure("rank ", placement.rank, " of ", placement.world_size,
                  ": {dist_backend} nccl on ", device.str(),
                  " needs NCCL, and this build has no CUDA backend (configure with ",
                  "-DALLOY_CUDA=ON); use {dist_backend} gloo");
#endif
}

parallel::DdpOptions ddp_options(const TrainConfig& options) {
  parallel::DdpOptions ddp;
  ddp.bucket_bytes =
      static_cast<std::size_t>(std::max(1.0, std::round(options.bucket_cap_mb * 1024 * 1024)));
  ddp.allreduce_fp32 = options.allreduce_fp32;
  ddp.reduce_to_owners = options.zero == 1;
  return ddp;
}

DataParallel::DataParallel(parallel::ProcessGroup& group, nn::Module& model,
                           amp::MixedPrecision& precision, const parallel::DdpOptions& options)
    : group_(group), ddp_(model, group, options) {
  // The fp32 masters, where the opt level keeps them apart from the model's parameters.
  const std::vector<nn::Parameter*> model_params = model.parameters();
  std::vector<nn::Parameter*> masters;
  for (nn::Parameter* param : precision.canonical_parameters()) {
    if (std::find(model_params.begin(), model_params.end(), param) == model_params.end()) {
      masters.push_back(param);
    }
  }
  ddp_.broadcast_from_rank0(masters);
  if (options.reduce_to_owners) zero_ = std::make_unique<ZeroShard>(group, model, precision);
}

std::int64_t DataParallel::local_batch_size(std::int64_t global_batch) const {
  return parallel::local_batch_size(global_batch, world_size());
}

data::Sampler DataParallel::training_sampler(std::int64_t dataset_size, std::uint64_t seed) const {
  return parallel::training_sampler(dataset_size, seed, rank(), world_size());
}

std::vector<std::int64_t> DataParallel::evaluation_order(std::int64_t dataset_size) const {
  return parallel::evaluation_shard(dataset_size, rank(), world_size());
}

std::int64_t DataParallel::sum(std::int64_t value) {
  std::int64_t total = 0;
  for (const std::int64_t each : group_.allgather_int64(value))
    total += each;
  return total;
}

double DataParallel::sum(double value) {
  std::string bytes(sizeof value, '\0');
  std::memcpy(bytes.data(), &value, sizeof value);  // the ranks share one byte order
  double total = 0;
  for (const std::string& each : group_.allgather_bytes(bytes)) {
    ALLOY_CHECK(each.size() == sizeof value, "sum over ranks: a rank sent ", each.size(),
                " bytes for a double");
    double theirs = 0;
    std::memcpy(&theirs, each.data(), sizeof theirs);
    total += theirs;
  }
  return total;
}

std::vector<std::string> DataParallel::gather(const std::string& text) {
  return group_.allgather_bytes(text);
}

}  // namespace alloy::app
