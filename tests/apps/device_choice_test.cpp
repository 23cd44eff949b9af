// Which device each rank of a job takes, from each launcher's environment (Alloy's own,
// torchrun, mpirun, srun, the --nodes/--gpus flags), and the collective backend that goes with
// it: cuda:LOCAL_RANK for --device cuda and auto, an explicit cuda:N as given, the errors that
// name the local rank and the device count, and the usage errors of --dist-backend. Pure
// functions fed a made-up device count, so every case runs without a GPU.
#include "apps/train/device_choice.h"

#include <boost/test/unit_test.hpp>
#include <string>

#include "apps/cli/train_options.h"
#include "apps/train/data_parallel.h"
#include "core/error.h"

using namespace alloy;
using namespace alloy::app;
using alloy::parallel::Environment;
using alloy::parallel::Rendezvous;
using alloy::parallel::RendezvousFlags;
using alloy::parallel::resolve_rendezvous;

namespace {

const CudaDevices kTwoGpus{2, ""};
const CudaDevices kNoGpu{0, "cudaGetDeviceCount failed: no CUDA-capable device is detected"};

Rendezvous from_environment(const Environment& environment) {
  return resolve_rendezvous({}, environment);
}

// The rank of local rank `local` in a job of two nodes with two ranks each, as each launcher
// describes it.
Environment alloy_worker(int local) {
  return {{"ALLOY_WORKER", "1"},
          {"RANK", std::to_string(2 + local)},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", std::to_string(local)},
          {"LOCAL_WORLD_SIZE", "2"}};
}
Environment torchrun(int local) {
  return {{"RANK", std::to_string(2 + local)},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", std::to_string(local)},
          {"LOCAL_WORLD_SIZE", "2"}};
}
Environment mpirun(int local) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(2 + local)},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
}
Environment srun(int local) {
  return {{"SLURM_PROCID", std::to_string(2 + local)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", std::to_string(local)}};
}

template <class Exception, class Call>
void check_error(Call&& call, const std::string& part) {
  bool thrown = false;
  try {
    call();
  } catch (const Exception& error) {
    thrown = true;
    BOOST_TEST_MESSAGE(error.what());
    BOOST_TEST(std::string(error.what()).find(part) != std::string::npos,
               "'" << error.what() << "' does not say '" << part << "'");
  }
  BOOST_TEST(thrown, "no error saying '" << part << "'");
}

// An Error that is not a UsageError (exit 1, not 2).
template <class Call>
void check_failure(Call&& call, const std::string& part) {
  check_error<Error>(
      [&] {
        try {
          call();
        } catch (const UsageError& error) {
          BOOST_ERROR("a usage error where a failure was expected: " << error.what());
        }
      },
      part);
}

TrainOptions options(std::vector<std::string> args) {
  return parse_train_options(args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(device_per_rank)

BOOST_AUTO_TEST_CASE(cuda_means_the_gpu_of_the_local_rank_from_every_launcher) {
  for (const auto& [name, environment] : std::vector<std::pair<std::string, Environment (*)(int)>>{
           {"alloy", alloy_worker}, {"torchrun", torchrun}, {"mpirun", mpirun}, {"srun", srun}}) {
    for (int local = 0; local < 2; ++local) {
      const Rendezvous placement = from_environment(environment(local));
      BOOST_TEST_CONTEXT(name << " local rank " << local) {
        BOOST_TEST(placement.rank == 2 + local);
        const DeviceChoice cuda = choose_device("cuda", placement, kTwoGpus);
        BOOST_TEST(cuda.device.str() == Device::cuda(local).str());
        BOOST_TEST(cuda.explanation.find("local rank " + std::to_string(local) + " of ") !=
                       std::string::npos,
                   cuda.explanation);
        const DeviceChoice automatic = choose_device("auto", placement, kTwoGpus);
        BOOST_TEST(automatic.device.str() == Device::cuda(local).str());
        BOOST_TEST(automatic.explanation.find("auto") != std::string::npos);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_flags_of_one_node_per_process_give_local_rank_0) {
  RendezvousFlags flags;
  flags.nodes = 2;
  flags.gpus = 1;
  flags.nr = 1;
  const Rendezvous placement = resolve_rendezvous(flags, {});
  BOOST_TEST(placement.rank == 1);
  BOOST_TEST(choose_device("cuda", placement, kTwoGpus).device.str() == Device::cuda(0).str());
}

BOOST_AUTO_TEST_CASE(a_single_process_takes_cuda_0) {
  const DeviceChoice choice = choose_device("cuda", Rendezvous{}, kTwoGpus);
  BOOST_TEST(choice.device.str() == Device::cuda(0).str());
  BOOST_TEST(choice.explanation == "device cuda:0");
  BOOST_TEST(choose_device("auto", Rendezvous{}, kTwoGpus).explanation == "device cuda:0 (auto)");
}

BOOST_AUTO_TEST_CASE(an_explicit_device_is_every_rank_s) {
  for (int local = 0; local < 2; ++local) {
    const Rendezvous placement = from_environment(torchrun(local));
    BOOST_TEST(choose_device("cuda:1", placement, kTwoGpus).device.str() == Device::cuda(1).str());
    BOOST_TEST(choose_device("cuda:0", placement, kTwoGpus).device.str() == Device::cuda(0).str());
    BOOST_TEST(choose_device("cpu", placement, kTwoGpus).device.str() == Device::cpu().str());
  }
}

BOOST_AUTO_TEST_CASE(without_a_usable_gpu_auto_is_the_cpu_and_cuda_an_error) {
  const Rendezvous placement = from_environment(torchrun(1));
  const DeviceChoice automatic = choose_device("auto", placement, kNoGpu);
  BOOST_TEST(automatic.device.str() == Device::cpu().str());
  BOOST_TEST(automatic.explanation ==
             "device cpu (auto: no usable CUDA device: cudaGetDeviceCount failed: no "
             "CUDA-capable device is detected)");
  check_failure([&] { choose_device("cuda", placement, kNoGpu); },
                "device cuda: no usable CUDA device: cudaGetDeviceCount failed");
  check_failure([&] { choose_device("cuda:0", placement, kNoGpu); },
                "device cuda:0: no usable CUDA device");
}

BOOST_AUTO_TEST_CASE(a_local_rank_beyond_the_devices_is_an_error_naming_both_numbers) {
  for (const auto& environment : {alloy_worker(1), torchrun(1), mpirun(1), srun(1)}) {
    const Rendezvous placement = from_environment(environment);
    const CudaDevices one{1, ""};
    check_failure(
        [&] { choose_device("cuda", placement, one); },
        "local rank 1 needs cuda:1, but this machine has 1 CUDA device (local rank from " +
            placement.source + ")");
    check_failure([&] { choose_device("auto", placement, one); },
                  "local rank 1 needs cuda:1, but this machine has 1 CUDA device");
  }
  Environment third = torchrun(0);
  third["LOCAL_RANK"] = "3";
  third["LOCAL_WORLD_SIZE"] = "4";
  check_failure([&] { choose_device("cuda", from_environment(third), kTwoGpus); },
                "local rank 3 needs cuda:3, but this machine has 2 CUDA devices");
  check_failure([&] { choose_device("cuda:2", Rendezvous{}, kTwoGpus); },
                "device cuda:2: this machine has 2 CUDA devices (cuda:0..cuda:1)");
}

BOOST_AUTO_TEST_CASE(a_malformed_index_is_a_usage_error_with_or_without_a_gpu) {
  for (const CudaDevices& cuda : {kTwoGpus, kNoGpu}) {
    check_error<UsageError>([&] { choose_device("cuda:x", Rendezvous{}, cuda); },
                            "device 'cuda:x': the device index must be a number");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(dist_backend_choice)

BOOST_AUTO_TEST_CASE(the_default_is_nccl_on_a_gpu_and_gloo_on_the_cpu) {
  const TrainOptions defaults = options({});
  BOOST_TEST(dist_backend(defaults, {Device::cuda(1), ""}) == "nccl");
  BOOST_TEST(dist_backend(defaults, {Device::cpu(), ""}) == "gloo");
  BOOST_TEST(dist_backend(options({"--dist-backend", "gloo"}), {Device::cuda(0), ""}) == "gloo");
  BOOST_TEST(dist_backend(options({"--dist-backend", "nccl"}), {Device::cuda(0), ""}) == "nccl");
}

BOOST_AUTO_TEST_CASE(nccl_on_the_cpu_is_refused) {
  check_error<UsageError>(
      [] {
        options({"--dist-backend", "nccl", "--device", "cpu"});
      },
      "--dist-backend nccl reduces GPU tensors and cannot run with --device "
      "cpu; use --dist-backend gloo");
  // --device auto fell back to the CPU: not a usage error, the machine has no GPU.
  check_failure(
      [] {
        dist_backend(options({"--dist-backend", "nccl"}),
                     {Device::cpu(), "device cpu (auto: no usable CUDA device: none)"});
      },
      "dist_backend nccl reduces GPU tensors, but this run is on the CPU (device cpu (auto: no "
      "usable CUDA device: none)); use dist_backend gloo");
  check_error<UsageError>(
      [] {
        options({"--dist-backend", "mpi"});
      },
      "--dist-backend 'mpi' is not one of nccl or gloo");
}

BOOST_AUTO_TEST_CASE(nccl_with_two_local_ranks_on_one_named_device_is_a_usage_error) {
  const auto check = [](const std::vector<std::string>& args, const Rendezvous& placement) {
    check_error<UsageError>([&] { check_distributed_options(options(args), placement); },
                            "NCCL does not support two ranks on one device (cuda:0)");
  };
  RendezvousFlags flags;
  flags.gpus = 2;
  const Rendezvous launcher = resolve_rendezvous(flags, {});
  check({"--dist-backend", "nccl", "--device", "cuda:0", "--gpus", "2"}, launcher);
  // nccl is the default on a GPU.
  check({"--device", "cuda:0", "--gpus", "2"}, launcher);
  // Each launcher's workers, seen from one of them.
  for (const auto& environment : {alloy_worker(1), torchrun(1), mpirun(0)}) {
    check({"--dist-backend", "nccl", "--device", "cuda:0"}, from_environment(environment));
  }
  // Allowed: gloo on one device; nccl with a GPU per rank; one rank per node on cuda:0.
  check_distributed_options(options({"--dist-backend", "gloo", "--device", "cuda:0"}), launcher);
  check_distributed_options(options({"--dist-backend", "nccl", "--device", "cuda"}), launcher);
  RendezvousFlags nodes;
  nodes.nodes = 2;
  nodes.gpus = 1;
  nodes.nr = 1;
  check_distributed_options(options({"--dist-backend", "nccl", "--device", "cuda:0"}),
                            resolve_rendezvous(nodes, {}));
  // srun says nothing of its local ranks without --ntasks-per-node: NCCL's own error then.
  check_distributed_options(options({"--dist-backend", "nccl", "--device", "cuda:0"}),
                            from_environment(srun(1)));
}

BOOST_AUTO_TEST_CASE(a_world_of_one_joins_a_group_only_when_a_backend_is_named) {
  const Rendezvous one = from_environment({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  BOOST_TEST(!joins_process_group(options({}), one));
  BOOST_TEST(joins_process_group(options({"--dist-backend", "nccl"}), one));
  BOOST_TEST(joins_process_group(options({}), from_environment(torchrun(0))));
}

BOOST_AUTO_TEST_SUITE_END()
