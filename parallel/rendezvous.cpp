#include "parallel/rendezvous.h"

#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdint>

#include "core/error.h"

extern char** environ;

namespace alloy::parallel {
namespace {

// One launcher's family of variables.
struct Style {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Style kTorchrun{"torchrun (RANK, WORLD_SIZE)", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE"};
constexpr Style kStyles[] = {
    kTorchrun,
    {"mpirun (OMPI_COMM_WORLD_*)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun (SLURM_*)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

const std::string* lookup(const Environment& environment, const char* name) {
  const auto found = environment.find(name);
  return found == environment.end() ? nullptr : &found->second;
}

int parse_int(const char* name, const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) {
    usage_fail(name, "='", text, "' is not an integer");
  }
  return value;
}

// Rank and world size from one style's variables; nothing when neither is set.
std::optional<Rendezvous> from_style(const Style& style, const Environment& environment) {
  const std::string* rank = lookup(environment, style.rank);
  const std::string* size = lookup(environment, style.size);
  if (rank == nullptr && size == nullptr) return std::nullopt;
  if (rank == nullptr) usage_fail(style.size, " is set but ", style.rank, " is not");
  if (size == nullptr) usage_fail(style.rank, " is set but ", style.size, " is not");
  Rendezvous placement;
  placement.source = style.source;
  placement.world_size = parse_int(style.size, *size);
  placement.rank = parse_int(style.rank, *rank);
  if (placement.world_size < 1) {
    usage_fail(style.size, "=", placement.world_size, " must be at least 1");
  }
  if (placement.rank < 0 || placement.rank >= placement.world_size) {
    usage_fail(style.rank, "=", placement.rank, " must be in 0..", placement.world_size - 1, " (",
               style.size, "=", placement.world_size, ")");
  }
  if (const std::string* local = lookup(environment, style.local_rank)) {
    placement.local_rank = parse_int(style.local_rank, *local);
    if (placement.local_rank < 0) {
      usage_fail(style.local_rank, "=", placement.local_rank, " must not be negative");
    }
  }
  if (const std::string* local_size = lookup(environment, style.local_size)) {
    placement.local_world_size = parse_int(style.local_size, *local_size);
    if (placement.local_world_size < 1) {
      usage_fail(style.local_size, "=", placement.local_world_size, " must be at least 1");
    }
    if (placement.local_rank >= placement.local_world_size) {
      usage_fail(style.local_rank, "=", placement.local_rank, " must be below ", style.local_size,
                 "=", placement.local_world_size);
    }
  }
  return placement;
}

Rendezvous from_flags(const RendezvousFlags& flags) {
  const int nodes = flags.nodes.value_or(1);
  const int gpus = flags.gpus.value_or(1);
  const int nr = flags.nr.value_or(0);
  if (nodes < 1) usage_fail("--nodes ", nodes, " must be at least 1");
  if (gpus < 1) usage_fail("--gpus ", gpus, " must be at least 1");
  if (nr < 0 || nr >= nodes)
    usage_fail("--nr ", nr, " must be in 0..", nodes - 1, " (--nodes ", nodes, ")");
  if (std::int64_t{nodes} * gpus > INT_MAX)
    usage_fail("--nodes ", nodes, " times --gpus ", gpus, " is too large");
  Rendezvous placement;
  placement.source = "--nodes/--gpus/--nr";
  placement.world_size = nodes * gpus;
  placement.rank = nr * gpus;
  placement.local_world_size = gpus;
  // One local process needs no launcher: this process is rank nr itself.
  if (gpus > 1) placement.local_workers = gpus;
  return placement;
}

void resolve_master(const RendezvousFlags& flags, const Environment& environment,
                    Rendezvous& placement) {
  if (flags.master_addr) {
    if (flags.master_addr->empty()) usage_fail("--master-addr must not be empty");
    placement.master_addr = *flags.master_addr;
  } else if (const std::string* address = lookup(environment, "MASTER_ADDR")) {
    if (address->empty()) usage_fail("MASTER_ADDR is set but empty");
    placement.master_addr = *address;
  }
  if (flags.master_port) {
    placement.master_port = *flags.master_port;
    if (placement.master_port < 1 || placement.master_port > 65535) {
      usage_fail("--master-port ", placement.master_port, " is out of range 1..65535");
    }
  } else if (const std::string* port = lookup(environment, "MASTER_PORT")) {
    placement.master_port = parse_int("MASTER_PORT", *port);
    if (placement.master_port < 1 || placement.master_port > 65535) {
      usage_fail("MASTER_PORT=", placement.master_port, " is out of range 1..65535");
    }
  }
}

}  // namespace

Environment process_environment() {
  Environment environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable = *entry;
    const auto equals = variable.find('=');
    if (equals != std::string::npos) {
      environment.emplace(variable.substr(0, equals), variable.substr(equals + 1));
    }
  }
  return environment;
}

Rendezvous resolve_rendezvous(const RendezvousFlags& flags, const Environment& environment) {
  Rendezvous placement;
  const std::string* marker = lookup(environment, kWorkerMarker);
  if (marker != nullptr && *marker == "1") {
    auto worker = from_style(kTorchrun, environment);
    if (!worker) usage_fail(kWorkerMarker, "=1 but RANK and WORLD_SIZE are not set");
    placement = *worker;
    placement.source = "alloy launcher";
  } else if (flags.nodes || flags.gpus || flags.nr) {
    placement = from_flags(flags);
  } else {
    for (const Style& style : kStyles) {
      if (auto found = from_style(style, environment)) {
        placement = *found;
        break;
      }
    }
  }
  resolve_master(flags, environment, placement);
  return placement;
}

}  // namespace alloy::parallel
