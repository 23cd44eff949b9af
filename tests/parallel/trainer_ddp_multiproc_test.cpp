// The reference check of data parallelism on the Trainer itself: 2 ranks with a global batch
// of 256 end with identical weights on every rank, within 1e-3 relative difference of one
// process with batch 256, and within 0.01 of its test accuracy, at O0 and at O2. The MLP on
// the synthetic set keeps each run to a few seconds; every run (the single process too) is a
// forked child, so that the kernels' thread pool is only ever started inside a child.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <iostream>

#include "apps/trainer.h"
#include "core/thread_pool.h"
#include "parallel/gloo_process_group.h"
#include "tests/parallel/forked.h"
#include "tests/support/process.h"

using namespace alloy;
using alloy::test::check_all_succeeded;
using alloy::test::expect;
using alloy::test::free_port;
using alloy::test::run_ranks;

namespace {

struct RunResult {
  std::vector<float> weights;  // canonical (fp32 master) weights, concatenated
  double test_acc = 0;
  std::string digest;
  std::vector<std::string> digests;  // gathered from every rank
};

app::TrainOptions options_for(amp::OptLevel level) {
  app::TrainOptions o;
  o.model = "mlp";
  o.dataset = "synthetic";
  o.epochs = 2;
  o.batch_size = 256;
  o.lr = 0.1;
  o.threads = 1;
  o.precision = amp::resolve_properties(level, {});
  return o;
}

void save(const std::string& path, const RunResult& result) {
  std::ofstream out(path, std::ios::binary);
  out << result.test_acc << ' ' << result.digest << ' ' << result.digests.size() << ' ';
  for (const auto& digest : result.digests)
    out << digest << ' ';
  out << result.weights.size() << '\n';
  out.write(reinterpret_cast<const char*>(result.weights.data()),
            static_cast<std::streamsize>(result.weights.size() * sizeof(float)));
  expect(static_cast<bool>(out), "cannot write " + path);
}

RunResult load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RunResult result;
  std::size_t digests = 0;
  std::size_t count = 0;
  in >> result.test_acc >> result.digest >> digests;
  result.digests.resize(digests);
  for (auto& digest : result.digests)
    in >> digest;
  in >> count;
  in.get();
  result.weights.resize(count);
  in.read(reinterpret_cast<char*>(result.weights.data()),
          static_cast<std::streamsize>(count * sizeof(float)));
  BOOST_REQUIRE_MESSAGE(in, "cannot read " << path);
  return result;
}

// Trains in this (child) process, as one rank of `world` when world > 1, and saves the result.
void train(const app::TrainOptions& options, int rank, int world, int port,
           const std::string& path) {
  set_cpu_threads(options.threads);
  std::unique_ptr<parallel::GlooProcessGroup> group;
  if (world > 1) {
    parallel::ProcessGroupOptions group_options;
    group_options.timeout = std::chrono::seconds(30);
    group =
        std::make_unique<parallel::GlooProcessGroup>(rank, world, "127.0.0.1", port, group_options);
  }
  app::Trainer trainer(
      options, Device::cpu(),
      data::load_datasets(options.dataset, "", static_cast<std::uint64_t>(options.seed)));
  if (group) trainer.join_data_parallel(*group, {});
  app::TrainObserver quiet;
  trainer.run(quiet);
  RunResult result;
  for (const nn::Parameter* param : trainer.precision().canonical_parameters()) {
    const auto values = param->value.to_floats();
    result.weights.insert(result.weights.end(), values.begin(), values.end());
  }
  result.test_acc = trainer.last_test_acc();
  result.digest = trainer.params_digest();
  result.digests = trainer.gather_params_digests();
  save(path, result);
}

void check_matches_single_process(amp::OptLevel level) {
  const app::TrainOptions options = options_for(level);
  const alloy::test::TempDir directory;
  const auto start = std::chrono::steady_clock::now();
  check_all_succeeded(run_ranks(
      1, [&](int) { train(options, 0, 1, 0, directory.file("single")); },
      std::chrono::seconds(120)));
  const double single_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int world = 2;
  const int port = free_port();
  check_all_succeeded(run_ranks(
      world,
      [&](int rank) {
        train(options, rank, world, port, directory.file("rank-" + std::to_string(rank)));
      },
      std::chrono::seconds(120)));
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const RunResult single = load(directory.file("single"));
  const RunResult rank0 = load(directory.file("rank-0"));
  const RunResult rank1 = load(directory.file("rank-1"));
  BOOST_TEST(rank0.digests.size() == 2u);
  BOOST_TEST(rank0.digests == rank1.digests, boost::test_tools::per_element());
  BOOST_TEST(rank0.digest == rank1.digest, "the ranks' weights differ");
  BOOST_TEST(rank0.weights == rank1.weights, boost::test_tools::per_element());
  BOOST_REQUIRE(rank0.weights.size() == single.weights.size());
  double difference = 0;
  double norm = 0;
  double largest = 0;
  for (std::size_t i = 0; i < single.weights.size(); ++i) {
    const double d = static_cast<double>(rank0.weights[i]) - single.weights[i];
    difference += d * d;
    norm += static_cast<double>(single.weights[i]) * single.weights[i];
    largest = std::max(largest, std::abs(d));
  }
  const double relative = std::sqrt(difference / norm);
  BOOST_TEST_MESSAGE(amp::opt_level_name(level)
                     << ": single digest " << single.digest << ", test_acc " << single.test_acc
                     << " (" << single_seconds << " s); 2 ranks digest " << rank0.digest << " = "
                     << rank1.digest << ", test_acc " << rank0.test_acc
                     << "; relative weight difference " << relative << " (largest element "
                     << largest << "); " << total_seconds << " s in all");
  BOOST_TEST(relative <= 1e-3);
  BOOST_TEST(std::abs(rank0.test_acc - single.test_acc) <= 0.01);
  BOOST_TEST(rank0.test_acc == rank1.test_acc);
  BOOST_TEST(single.test_acc > 0.5, "the single run did not learn");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_ddp)

BOOST_AUTO_TEST_CASE(two_ranks_match_one_process_at_O0) {
  check_matches_single_process(amp::OptLevel::O0);
}

BOOST_AUTO_TEST_CASE(two_ranks_match_one_process_at_O2) {
  check_matches_single_process(amp::OptLevel::O2);
}

BOOST_AUTO_TEST_SUITE_END()
