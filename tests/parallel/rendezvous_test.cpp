// Resolving rank, world size and master from flags and from each launcher's environment.
#include "parallel/rendezvous.h"

#include <boost/test/unit_test.hpp>
#include <cstdlib>

#include "core/error.h"

using namespace alloy;
using namespace alloy::parallel;

namespace {

RendezvousFlags cluster(int nodes, int gpus, int nr) {
  RendezvousFlags flags;
  flags.nodes = nodes;
  flags.gpus = gpus;
  flags.nr = nr;
  return flags;
}

// Passes when resolving throws a UsageError whose message contains `part`.
void check_usage_error(const RendezvousFlags& flags, const Environment& environment,
                       const std::string& part) {
  BOOST_CHECK_EXCEPTION(resolve_rendezvous(flags, environment), UsageError,
                        [&](const UsageError& error) {
                          BOOST_TEST_MESSAGE(error.what());
                          return std::string(error.what()).find(part) != std::string::npos;
                        });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rendezvous)

BOOST_AUTO_TEST_CASE(nothing_given_is_a_single_process) {
  const Rendezvous placement = resolve_rendezvous({}, {});
  BOOST_TEST(placement.rank == 0);
  BOOST_TEST(placement.world_size == 1);
  BOOST_TEST(!placement.distributed());
  BOOST_TEST(!placement.is_launcher());
  BOOST_TEST(placement.master_addr == "127.0.0.1");
  BOOST_TEST(placement.master_port == 29500);
}

BOOST_AUTO_TEST_CASE(flags_with_several_gpus_make_a_launcher_of_the_node_ranks) {
  RendezvousFlags flags = cluster(2, 3, 1);
  flags.master_addr = "10.0.0.1";
  flags.master_port = 1234;
  const Rendezvous placement = resolve_rendezvous(flags, {});
  BOOST_TEST(placement.is_launcher());
  BOOST_TEST(placement.local_workers == 3);
  BOOST_TEST(placement.rank == 3);  // nr * gpus: the first of ranks 3, 4, 5
  BOOST_TEST(placement.world_size == 6);
  BOOST_TEST(placement.master_addr == "10.0.0.1");
  BOOST_TEST(placement.master_port == 1234);
  BOOST_TEST(placement.source == "--nodes/--gpus/--nr");
}

BOOST_AUTO_TEST_CASE(flags_with_one_gpu_per_node_make_this_process_the_rank) {
  const Rendezvous placement = resolve_rendezvous(cluster(2, 1, 1), {});
  BOOST_TEST(!placement.is_launcher());
  BOOST_TEST(placement.rank == 1);
  BOOST_TEST(placement.local_rank == 0);
  BOOST_TEST(placement.world_size == 2);
}

BOOST_AUTO_TEST_CASE(gpus_alone_means_one_node) {
  RendezvousFlags flags;
  flags.gpus = 4;
  const Rendezvous placement = resolve_rendezvous(flags, {});
  BOOST_TEST(placement.world_size == 4);
  BOOST_TEST(placement.rank == 0);
  BOOST_TEST(placement.local_workers == 4);
}

BOOST_AUTO_TEST_CASE(torchrun_environment) {
  const Rendezvous placement = resolve_rendezvous({}, {{"RANK", "3"},
                                                       {"WORLD_SIZE", "4"},
                                                       {"LOCAL_RANK", "1"},
                                                       {"MASTER_ADDR", "node7"},
                                                       {"MASTER_PORT", "23456"}});
  BOOST_TEST(placement.rank == 3);
  BOOST_TEST(placement.world_size == 4);
  BOOST_TEST(placement.local_rank == 1);
  BOOST_TEST(placement.master_addr == "node7");
  BOOST_TEST(placement.master_port == 23456);
  BOOST_TEST(!placement.is_launcher());
  BOOST_TEST(placement.source == "torchrun (RANK, WORLD_SIZE)");
}

BOOST_AUTO_TEST_CASE(mpirun_environment) {
  const Rendezvous placement = resolve_rendezvous({}, {{"OMPI_COMM_WORLD_RANK", "5"},
                                                       {"OMPI_COMM_WORLD_SIZE", "8"},
                                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                       {"MASTER_ADDR", "10.1.1.1"}});
  BOOST_TEST(placement.rank == 5);
  BOOST_TEST(placement.world_size == 8);
  BOOST_TEST(placement.local_rank == 1);
  BOOST_TEST(placement.master_addr == "10.1.1.1");
  BOOST_TEST(placement.master_port == 29500);
  BOOST_TEST(placement.source == "mpirun (OMPI_COMM_WORLD_*)");
}

BOOST_AUTO_TEST_CASE(srun_environment_with_the_default_master) {
  const Rendezvous placement = resolve_rendezvous(
      {}, {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}});
  BOOST_TEST(placement.rank == 2);
  BOOST_TEST(placement.world_size == 3);
  BOOST_TEST(placement.local_rank == 0);
  BOOST_TEST(placement.master_addr == "127.0.0.1");
  BOOST_TEST(placement.master_port == 29500);
  BOOST_TEST(placement.source == "srun (SLURM_*)");
}

BOOST_AUTO_TEST_CASE(priority_is_flags_then_torchrun_then_mpirun_then_srun) {
  const Environment all{{"RANK", "1"},
                        {"WORLD_SIZE", "2"},
                        {"OMPI_COMM_WORLD_RANK", "2"},
                        {"OMPI_COMM_WORLD_SIZE", "3"},
                        {"SLURM_PROCID", "3"},
                        {"SLURM_NTASKS", "4"}};
  BOOST_TEST(resolve_rendezvous(cluster(5, 1, 4), all).world_size == 5);
  BOOST_TEST(resolve_rendezvous({}, all).world_size == 2);
  Environment no_torchrun = all;
  no_torchrun.erase("RANK");
  no_torchrun.erase("WORLD_SIZE");
  BOOST_TEST(resolve_rendezvous({}, no_torchrun).world_size == 3);
  Environment srun_only = no_torchrun;
  srun_only.erase("OMPI_COMM_WORLD_RANK");
  srun_only.erase("OMPI_COMM_WORLD_SIZE");
  BOOST_TEST(resolve_rendezvous({}, srun_only).world_size == 4);
}

BOOST_AUTO_TEST_CASE(master_flags_override_the_environment) {
  RendezvousFlags flags;
  flags.master_addr = "127.0.0.2";
  flags.master_port = 4000;
  const Rendezvous placement = resolve_rendezvous(
      flags, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}});
  BOOST_TEST(placement.master_addr == "127.0.0.2");
  BOOST_TEST(placement.master_port == 4000);
  BOOST_TEST(placement.world_size == 2);
}

BOOST_AUTO_TEST_CASE(a_launched_worker_takes_its_rank_from_the_launcher_not_the_flags) {
  const Rendezvous placement = resolve_rendezvous(cluster(2, 3, 1), {{"ALLOY_WORKER", "1"},
                                                                     {"RANK", "4"},
                                                                     {"WORLD_SIZE", "6"},
                                                                     {"LOCAL_RANK", "1"},
                                                                     {"MASTER_PORT", "29511"}});
  BOOST_TEST(!placement.is_launcher());
  BOOST_TEST(placement.rank == 4);
  BOOST_TEST(placement.local_rank == 1);
  BOOST_TEST(placement.world_size == 6);
  BOOST_TEST(placement.master_port == 29511);
  BOOST_TEST(placement.source == "alloy launcher");
}

BOOST_AUTO_TEST_CASE(the_local_world_size_comes_from_each_launcher) {
  BOOST_TEST(resolve_rendezvous(cluster(2, 3, 1), {}).local_world_size == 3);
  BOOST_TEST(resolve_rendezvous(cluster(2, 1, 1), {}).local_world_size == 1);
  BOOST_TEST(resolve_rendezvous({}, {}).local_world_size == 0);
  BOOST_TEST(resolve_rendezvous(cluster(2, 3, 1), {{"ALLOY_WORKER", "1"},
                                                   {"RANK", "4"},
                                                   {"WORLD_SIZE", "6"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "3"}})
                 .local_world_size == 3);
  BOOST_TEST(
      resolve_rendezvous(
          {}, {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}})
          .local_world_size == 2);
  BOOST_TEST(resolve_rendezvous({}, {{"OMPI_COMM_WORLD_RANK", "1"},
                                     {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}})
                 .local_world_size == 4);
  BOOST_TEST(resolve_rendezvous({}, {{"SLURM_PROCID", "1"},
                                     {"SLURM_NTASKS", "4"},
                                     {"SLURM_LOCALID", "1"},
                                     {"SLURM_NTASKS_PER_NODE", "2"}})
                 .local_world_size == 2);
  // Without --ntasks-per-node, srun does not say.
  BOOST_TEST(
      resolve_rendezvous({}, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}})
          .local_world_size == 0);
}

BOOST_AUTO_TEST_CASE(bad_flags_are_usage_errors_naming_the_flag) {
  check_usage_error(cluster(2, 1, 2), {}, "--nr 2 must be in 0..1 (--nodes 2)");
  check_usage_error(cluster(2, 1, -1), {}, "--nr -1 must be in 0..1");
  check_usage_error(cluster(0, 1, 0), {}, "--nodes 0 must be at least 1");
  check_usage_error(cluster(1, 0, 0), {}, "--gpus 0 must be at least 1");
  RendezvousFlags port;
  port.master_port = 70000;
  check_usage_error(port, {}, "--master-port 70000 is out of range 1..65535");
  RendezvousFlags address;
  address.master_addr = "";
  check_usage_error(address, {}, "--master-addr must not be empty");
}

BOOST_AUTO_TEST_CASE(bad_variables_are_usage_errors_naming_the_variable) {
  check_usage_error({}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}},
                    "RANK=2 must be in 0..1 (WORLD_SIZE=2)");
  check_usage_error({}, {{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not");
  check_usage_error({}, {{"WORLD_SIZE", "2"}}, "WORLD_SIZE is set but RANK is not");
  check_usage_error({}, {{"RANK", "0"}, {"WORLD_SIZE", "two"}},
                    "WORLD_SIZE='two' is not an integer");
  check_usage_error({}, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 must be at least 1");
  check_usage_error({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}},
                    "LOCAL_RANK=-1 must not be negative");
  check_usage_error({}, {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "0"}},
                    "LOCAL_WORLD_SIZE=0 must be at least 1");
  check_usage_error(
      {}, {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
      "LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2");
  check_usage_error({},
                    {{"OMPI_COMM_WORLD_RANK", "0"},
                     {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "two"}},
                    "OMPI_COMM_WORLD_LOCAL_SIZE='two' is not an integer");
  check_usage_error({}, {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                    "OMPI_COMM_WORLD_RANK=4 must be in 0..3");
  check_usage_error({}, {{"SLURM_PROCID", "1x"}, {"SLURM_NTASKS", "4"}},
                    "SLURM_PROCID='1x' is not an integer");
  check_usage_error({}, {{"MASTER_PORT", "0"}}, "MASTER_PORT=0 is out of range 1..65535");
  check_usage_error({}, {{"MASTER_PORT", ""}}, "MASTER_PORT='' is not an integer");
  check_usage_error({}, {{"MASTER_ADDR", ""}}, "MASTER_ADDR is set but empty");
  check_usage_error({}, {{"ALLOY_WORKER", "1"}},
                    "ALLOY_WORKER=1 but RANK and WORLD_SIZE are not set");
}

BOOST_AUTO_TEST_CASE(the_process_environment_is_read) {
  setenv("ALLOY_RENDEZVOUS_TEST_VARIABLE", "a=b", 1);
  const Environment environment = process_environment();
  unsetenv("ALLOY_RENDEZVOUS_TEST_VARIABLE");
  const auto found = environment.find("ALLOY_RENDEZVOUS_TEST_VARIABLE");
  BOOST_REQUIRE(found != environment.end());
  BOOST_TEST(found->second == "a=b");
}

BOOST_AUTO_TEST_SUITE_END()
