// Where this process stands in a distributed job: its rank, the world size, its local rank,
// and the master address to meet at. Resolved, in order of priority, from
//   1. the marker of Alloy's own launcher (ALLOY_WORKER=1 with RANK, WORLD_SIZE, LOCAL_RANK):
//      a worker it started, which sees the launcher's flags again and must not relaunch;
//   2. the flags --nodes N --gpus G --nr R: global rank = R*G + local rank, world = N*G; with
//      G > 1 this process is the launcher of G local workers;
//   3. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
//   4. mpirun (Open MPI): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//      OMPI_COMM_WORLD_LOCAL_SIZE;
//   5. srun (Slurm): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (set only
//      with --ntasks-per-node);
//   6. none of these: a single process.
// The local rank picks this process's GPU (cuda:LOCAL_RANK, apps/train/device_choice.h); the local
// world size tells whether several ranks would share one explicitly named device.
// The master is --master-addr/--master-port, else MASTER_ADDR/MASTER_PORT, else
// 127.0.0.1:29500. Invalid values are alloy::UsageError naming the flag or variable.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace alloy::parallel {

// The distributed flags of `alloy train`; unset when not given.
struct RendezvousFlags {
  std::optional<int> nodes;
  std::optional<int> gpus;  // also --nproc-per-node
  std::optional<int> nr;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

using Environment = std::map<std::string, std::string>;

// The variables of this process's environment.
Environment process_environment();

// The variable that marks a worker started by launch_workers.
inline constexpr const char* kWorkerMarker = "ALLOY_WORKER";

struct Rendezvous {
  int rank = 0;  // a launcher: the global rank of its first worker
  int world_size = 1;
  int local_rank = 0;
  // The ranks of this job on this node, where the launcher says (0: it does not).
  int local_world_size = 0;
  // More than zero: this process is a launcher that starts this many workers on this node,
  // with global ranks rank .. rank + local_workers - 1, and takes no rank itself.
  int local_workers = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // where rank and world size came from, for messages

  bool distributed() const { return world_size > 1; }
  bool is_launcher() const { return local_workers > 0; }
};

Rendezvous resolve_rendezvous(const RendezvousFlags& flags, const Environment& environment);

}  // namespace alloy::parallel
