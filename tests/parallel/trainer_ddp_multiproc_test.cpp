// The reference check of data parallelism on the Trainer itself: 2 ranks with a global batch
// of 256 end with identical weights on every rank, within 1e-3 relative difference of one
// process with batch 256, and within 0.01 of its test accuracy, at O0 and at O2. The MLP on
// the synthetic set keeps each run to a few seconds; every run (the single process too) is a
// forked child, so that the kernels' thread pool is only ever started inside a child.
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <iostream>

#include "apps/train/trainer.h"
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
  std::int64_t steps = 0;
  std::int64_t allreduces = 0;  // the gradient allreduces this rank took part in
};

// Forwards to a process group, counting the allreduces (DDP's gradient buckets).
class CountingGroup : public parallel::ProcessGroup {
 public:
  explicit CountingGroup(parallel::ProcessGroup& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void allreduce(const Tensor& tensor, parallel::ReduceOp op) override {
    ++allreduces;
    group_.allreduce(tensor, op);
  }
  void allreduce_half_sum(const Tensor& tensor) override {
    ++allreduces;
    group_.allreduce_half_sum(tensor);
  }
  void broadcast(const Tensor& tensor, int root) override { group_.broadcast(tensor, root); }
  void reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                      parallel::ReduceOp op) override {
    ++allreduces;
    group_.reduce_scatter(tensor, counts, op);
  }
  void reduce_scatter_half_sum(const Tensor& tensor,
                               const std::vector<std::int64_t>& counts) override {
    ++allreduces;
    group_.reduce_scatter_half_sum(tensor, counts);
  }
  void allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) override {
    group_.allgather(tensor, counts);
  }
  std::vector<std::string> allgather_bytes(const std::string& bytes) override {
    return group_.allgather_bytes(bytes);
  }
  void barrier() override { group_.barrier(); }
  void allreduce_async(const Tensor& tensor, parallel::ReduceOp op,
                       parallel::StreamHandle stream) override {
    ++allreduces;
    group_.allreduce_async(tensor, op, stream);
  }
  void allreduce_half_sum_async(const Tensor& tensor, parallel::StreamHandle stream) override {
    ++allreduces;
    group_.allreduce_half_sum_async(tensor, stream);
  }
  void broadcast_async(const Tensor& tensor, int root, parallel::StreamHandle stream) override {
    group_.broadcast_async(tensor, root, stream);
  }

  std::atomic<std::int64_t> allreduces{0};  // counted on DDP's communication thread

 private:
  parallel::ProcessGroup& group_;
};

app::TrainConfig options_for(amp::OptLevel level) {
  app::TrainConfig o;
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
  out << result.test_acc << ' ' << result.steps << ' ' << result.allreduces << ' ' << result.digest
      << ' ' << result.digests.size() << ' ';
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
  in >> result.test_acc >> result.steps >> result.allreduces >> result.digest >> digests;
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
void train(const app::TrainConfig& options, int rank, int world, int port,
           const std::string& path) {
  set_cpu_threads(options.threads);
  std::unique_ptr<parallel::GlooProcessGroup> gloo;
  std::unique_ptr<CountingGroup> group;
  if (world > 1) {
    parallel::ProcessGroupOptions group_options;
    group_options.timeout = std::chrono::seconds(30);
    gloo =
        std::make_unique<parallel::GlooProcessGroup>(rank, world, "127.0.0.1", port, group_options);
    group = std::make_unique<CountingGroup>(*gloo);
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
  result.steps = trainer.steps();
  if (group) result.allreduces = group->allreduces;
  save(path, result);
}

// Relative L2 difference of two runs' weights.
double weight_difference(const RunResult& a, const RunResult& b) {
  BOOST_REQUIRE(a.weights.size() == b.weights.size());
  double difference = 0;
  double norm = 0;
  for (std::size_t i = 0; i < b.weights.size(); ++i) {
    const double d = static_cast<double>(a.weights[i]) - b.weights[i];
    difference += d * d;
    norm += static_cast<double>(b.weights[i]) * b.weights[i];
  }
  return std::sqrt(difference / norm);
}

// Trains `options` as 2 ranks; returns rank 0's and rank 1's results.
std::pair<RunResult, RunResult> train_two_ranks(const app::TrainConfig& options,
                                                const alloy::test::TempDir& directory,
                                                const std::string& name) {
  const int port = free_port();
  check_all_succeeded(run_ranks(
      2,
      [&](int rank) {
        train(options, rank, 2, port, directory.file(name + "-" + std::to_string(rank)));
      },
      std::chrono::seconds(120)));
  return {load(directory.file(name + "-0")), load(directory.file(name + "-1"))};
}

void check_matches_single_process(amp::OptLevel level) {
  const app::TrainConfig options = options_for(level);
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

// Gradient accumulation under DDP: each rank's 192 examples of a step in 2 micro-batches of 96,
// the first backward under no_sync (the epoch's last batch: 64 a rank, 32 + 32). The ranks end
// with the same weights, close to those of the run without accumulation (a bucket reduced
// before the last micro-batch's gradients were in, as without no_sync, ends 0.1 away), after
// as many allreduces as it: one round of the buckets per optimizer step, not one per
// micro-batch.
BOOST_AUTO_TEST_CASE(two_ranks_accumulating_two_micro_batches_agree_and_reduce_once_a_step) {
  app::TrainConfig options = options_for(amp::OptLevel::O2);
  options.epochs = 1;
  options.batch_size = 384;
  const alloy::test::TempDir directory;
  const auto [plain0, plain1] = train_two_ranks(options, directory, "plain");
  options.accumulation_steps = 2;
  const auto [rank0, rank1] = train_two_ranks(options, directory, "accumulated");

  BOOST_TEST(rank0.digests.size() == 2u);
  BOOST_TEST(rank0.digests == rank1.digests, boost::test_tools::per_element());
  BOOST_TEST(rank0.digest == rank1.digest, "the ranks' weights differ");
  BOOST_TEST(rank0.digest != plain0.digest, "accumulation changed nothing");
  const double relative = weight_difference(rank0, plain0);
  BOOST_TEST_MESSAGE("accumulation 2: digest "
                     << rank0.digest << ", test_acc " << rank0.test_acc << ", " << rank0.allreduces
                     << " allreduces in " << rank0.steps << " steps; without: digest "
                     << plain0.digest << ", test_acc " << plain0.test_acc << ", "
                     << plain0.allreduces << " allreduces; relative weight difference "
                     << relative);
  BOOST_TEST(relative <= 1e-3);
  BOOST_TEST(std::abs(rank0.test_acc - plain0.test_acc) <= 0.01);

  BOOST_TEST(rank0.steps == plain0.steps);
  BOOST_TEST(rank0.steps == 12800 / 384 + 1);  // the last, smaller batch is a step too
  BOOST_TEST(plain0.allreduces > 0);
  BOOST_TEST(plain0.allreduces % plain0.steps == 0);
  BOOST_TEST(rank0.allreduces == plain0.allreduces);
  BOOST_TEST(rank1.allreduces == plain1.allreduces);
}

BOOST_AUTO_TEST_SUITE_END()
