// --async-checkpoint on CUDA (apps/train/training_state.h): the snapshot is one device-to-pinned
// copy per tensor queued on the device's stream, with no host wait on the training thread, and
// the checkpoint it gives is the one a synchronous save writes at the same step, field for
// field, although the steps queued right after the snapshot change the weights while the
// copies may still be waiting to run. The reference is a second trainer with the same options
// saving synchronously: CUDA training is deterministic (trainer_cuda_graph_gpu_test.cpp
// compares two trainers bit for bit the same way). With --ema-decay the weight averages are
// among the copies.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include <set>
#include <string>
#include <thread>

#include "apps/train/checkpointer.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/data/dataset.h"
#include "tests/support/gpu.h"
#include "tests/support/process.h"

#ifdef ALLOY_HAVE_CUDA
#include "apps/train/training_state.h"
#include "core/cuda/context.h"
#endif

using namespace alloy;
using namespace alloy::app;
namespace ckpt = alloy::checkpoint;

namespace {

struct Setting {
  std::string model = "lenet";
  amp::OptLevel level = amp::OptLevel::O2;
  std::int64_t batch = 16;
  std::string cuda_graph = "off";
  double clip_grad_norm = 0;
  double ema_decay = 0;
};

struct Saved {
  std::int64_t step = 0;
  Checkpointer::Timing timing;
};

// Trains `steps` steps of `setting` on cuda:0 with a save after each step in `saves`, into
// `dir`, and returns what the checkpointer reported.
std::vector<Saved> train_and_save(const Setting& setting, const std::string& dir, bool async,
                                  const std::set<std::int64_t>& saves, std::int64_t steps) {
  TrainConfig options;
  options.model = setting.model;
  options.dataset = "synthetic";
  options.epochs = 1;
  options.batch_size = setting.batch;
  options.lr = 0.05;
  options.momentum = 0.9;  // optimizer state to snapshot
  options.seed = 11;
  options.threads = 1;
  options.cuda_graph = setting.cuda_graph;
  options.precision = amp::resolve_properties(setting.level, {});
  options.clip_grad_norm = setting.clip_grad_norm;
  options.ema_decay = setting.ema_decay;
  Trainer trainer(options, Device::cuda(0), data::load_datasets("synthetic", "", 11));
  std::vector<Saved> saved;
  {
    Checkpointer checkpointer(
        dir, static_cast<int>(saves.size()),
        [&](const std::string&, std::int64_t step, const Checkpointer::Timing& timing) {
          saved.push_back({step, timing});
        },
        async);
    trainer.set_step_hook([&] {
      checkpointer.poll();
      if (saves.count(trainer.steps()) != 0) checkpointer.save(trainer);
      return trainer.steps() == steps;
    });
    TrainObserver quiet;
    trainer.run(quiet);
    checkpointer.finish();
  }
  return saved;
}

void check_same_tensors(const std::vector<ckpt::NamedTensor>& async,
                        const std::vector<ckpt::NamedTensor>& sync, const char* what) {
  BOOST_TEST_REQUIRE(async.size() == sync.size(), what);
  for (std::size_t i = 0; i < async.size(); ++i) {
    BOOST_TEST_CONTEXT(what << " " << sync[i].name) {
      BOOST_TEST(async[i].name == sync[i].name);
      BOOST_TEST(dtype_name(async[i].dtype) == dtype_name(sync[i].dtype));
      BOOST_TEST(async[i].shape == sync[i].shape, boost::test_tools::per_element());
      BOOST_TEST(async[i].data == sync[i].data, "the bytes differ");
    }
  }
}

void check_async_equals_sync(const Setting& setting) {
  const std::set<std::int64_t> saves = {4, 5, 9};  // back to back, then after a gap
  constexpr std::int64_t kSteps = 12;
  test::TempDir dir;
  const std::vector<Saved> sync = train_and_save(setting, dir.file("sync"), false, saves, kSteps);
  const std::vector<Saved> async = train_and_save(setting, dir.file("async"), true, saves, kSteps);
  BOOST_TEST_REQUIRE(async.size() == saves.size());
  BOOST_TEST_REQUIRE(sync.size() == saves.size());
  for (std::size_t i = 0; i < async.size(); ++i) {
    const std::int64_t step = async[i].step;
    BOOST_TEST_CONTEXT(setting.model << " cuda-graph " << setting.cuda_graph << ", step " << step) {
      BOOST_TEST(step == sync[i].step);
      // The training thread queued the copies and waited for nothing.
      const RoundTrips& trips = async[i].timing.stall_round_trips;
      BOOST_TEST_MESSAGE("asynchronous snapshot: " << trips << "; synchronous save: "
                                                   << sync[i].timing.stall_round_trips);
      BOOST_TEST(trips.host_waits == 0u);
      BOOST_TEST(trips.uploads == 0u);
      BOOST_TEST(trips.device_allocations == 0u);
      BOOST_TEST(trips.downloads > 0u);
      BOOST_TEST(sync[i].timing.stall_round_trips.host_waits > 0u);  // the baseline waits

      const ckpt::CheckpointState theirs =
          ckpt::read_checkpoint(ckpt::checkpoint_path(dir.file("sync"), step));
      const ckpt::CheckpointState ours =
          ckpt::read_checkpoint(ckpt::checkpoint_path(dir.file("async"), step));
      BOOST_TEST(!ours.params_digest.empty());
      BOOST_TEST(ours.params_digest == theirs.params_digest);
      BOOST_TEST(stored_params_digest(ours) == ours.params_digest);
      BOOST_TEST(ours.step == step);
      BOOST_TEST(ours.step_in_epoch == theirs.step_in_epoch);
      BOOST_TEST(ours.optimizer.steps == theirs.optimizer.steps);
      BOOST_TEST(ours.scaler.scale == theirs.scaler.scale);
      BOOST_TEST(ours.scaler.clean_steps == theirs.scaler.clean_steps);
      BOOST_TEST(ours.scaler.skipped_steps == theirs.scaler.skipped_steps);
      BOOST_TEST(ours.scaler.at_min_streak == theirs.scaler.at_min_streak);
      // The rest of `extra`: the epoch's sums from the device tally, the overflow streak.
      BOOST_TEST((ckpt::extra_entries(ours) == ckpt::extra_entries(theirs)));
      if (setting.clip_grad_norm > 0) {  // the epoch's clip tally, every step so far finite
        BOOST_TEST(ours.epoch_sums.clip_norm_sum.has_value());
        BOOST_TEST((ours.epoch_sums.clip_finite_steps == std::optional<std::int64_t>(step)));
      }
      check_same_tensors(ours.parameters, theirs.parameters, "parameter");
      check_same_tensors(ours.buffers, theirs.buffers, "buffer");
      check_same_tensors(ours.optimizer_state, theirs.optimizer_state, "optimizer state");
      if (setting.ema_decay > 0) {  // the averages travel as optimizer state "ema.<name>"
        BOOST_TEST(std::count_if(ours.optimizer_state.begin(), ours.optimizer_state.end(),
                                 [](const ckpt::NamedTensor& t) {
                                   return t.name.rfind("ema.", 0) == 0;
                                 }) == static_cast<long>(ours.parameters.size()));
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(async_checkpoint_gpu)

BOOST_AUTO_TEST_CASE(lenet_o2_asynchronous_saves_equal_synchronous_ones) {
  check_async_equals_sync(Setting{});
}

// The clip tally is copied from the device like the step tally: the same epoch figures.
BOOST_AUTO_TEST_CASE(lenet_o2_clipped_asynchronous_saves_carry_the_clip_tally) {
  Setting setting;
  setting.clip_grad_norm = 0.05;
  check_async_equals_sync(setting);
}

// The weight averages are copied from the device with the optimizer state: the same bytes.
BOOST_AUTO_TEST_CASE(lenet_o2_weight_averages_are_saved_as_synchronously) {
  Setting setting;
  setting.ema_decay = 0.9;
  check_async_equals_sync(setting);
}

BOOST_AUTO_TEST_CASE(lenet_o3_half_weights_are_saved_widened_as_synchronously) {
  Setting setting;
  setting.level = amp::OptLevel::O3;
  check_async_equals_sync(setting);
}

BOOST_AUTO_TEST_CASE(resnet18_o2_with_buffers_equals_synchronous_saves) {
  Setting setting;
  setting.model = "resnet18";
  setting.batch = 4;
  check_async_equals_sync(setting);
}

BOOST_AUTO_TEST_CASE(lenet_o2_replayed_graph_steps_equal_synchronous_saves) {
  Setting setting;
  setting.cuda_graph = "on";
  check_async_equals_sync(setting);
}

#ifdef ALLOY_HAVE_CUDA
// The writer thread takes the snapshot's host copy (its one host wait) on the snapshot's device:
// a thread with no device selected would bind cuda:0's context, which a process training on
// another GPU must not create. On the machine's last GPU; with one GPU that is cuda:0 and the
// check only shows that take() works from another thread.
BOOST_AUTO_TEST_CASE(the_snapshot_is_taken_on_its_own_device_from_another_thread) {
  const int index = cuda::usable_device_count() - 1;
  TrainConfig options;
  options.model = "lenet";
  options.dataset = "synthetic";
  options.epochs = 1;
  options.batch_size = 16;
  options.threads = 1;
  options.cuda_graph = "off";
  options.precision = amp::resolve_properties(amp::OptLevel::O2, {});
  Trainer trainer(options, Device::cuda(index), data::load_datasets("synthetic", "", 11));
  trainer.set_step_hook([&] { return trainer.steps() == 2; });
  TrainObserver quiet;
  trainer.run(quiet);
  SnapshotArena arena;
  StateSnapshot snapshot = snapshot_training_state(trainer, arena);
  int device = -1;
  std::string digest;
  std::thread writer([&] {
    digest = snapshot.take().params_digest;
    static_cast<void>(cudaGetDevice(&device));
  });
  writer.join();
  BOOST_TEST(device == index);
  BOOST_TEST(digest == trainer.params_digest());
}
#endif

BOOST_AUTO_TEST_SUITE_END()
