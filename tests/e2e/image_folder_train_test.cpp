// alloy train on an image folder written by tools/data/idx_to_folder.py from Fashion-MNIST's
// IDX files: PNG files decoded and randomly cropped in loader threads, and a run stopped by
// --steps and resumed from its checkpoint ending bit-exactly as the run never stopped (the
// crops are functions of seed, epoch and example, whatever the loader threads).
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

std::vector<std::string> folder_args(const std::string& dir,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "train", "--model",    "mlp", "--dataset",    "folder", "--data-dir", dir,   "--image-size",
      "28",    "--channels", "1",   "--batch-size", "20",     "--device",   "cpu", "--threads",
      "1",     "--momentum", "0.9"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(image_folder_train)

BOOST_AUTO_TEST_CASE(a_folder_of_pngs_trains_and_resumes_bit_exactly) {
  TempDir dir;
  const std::string images = dir.file("images");
  const ProcessResult written = run_process(
      "/usr/bin/env", {"python3", std::string(ALLOY_SOURCE_DIR) + "/tools/data/idx_to_folder.py",
                       ALLOY_TEST_DATA_DIR, images, "--limit", "120"});
  BOOST_TEST_REQUIRE(written.exit_code == 0, written.errors);

  // 6 steps an epoch: 9 steps end mid-way through the second.
  const TrainRun straight =
      run_logged(dir, "straight", folder_args(images, {"--steps", "9", "--loader-threads", "3"}));
  BOOST_TEST(straight.process.output.find("folder: 120 train, 120 test, 1x28x28, 10 classes") !=
             std::string::npos);
  BOOST_TEST(events(straight.log, "epoch").size() == 2u);
  const std::string run_dir = dir.file("run");
  const TrainRun first =
      run_logged(dir, "first", folder_args(images, {"--steps", "4", "--checkpoint-dir", run_dir}));
  const TrainRun second = run_logged(
      dir, "second",
      folder_args(images, {"--steps", "9", "--resume", run_dir, "--loader-threads", "2"}));
  BOOST_TEST(!straight.digest().empty());
  BOOST_TEST(second.digest() == straight.digest());
  // Without augmentation the training images are others: so are the weights.
  const TrainRun plain =
      run_logged(dir, "plain", folder_args(images, {"--steps", "9", "--augment", "none"}));
  BOOST_TEST(plain.digest() != straight.digest());
}

BOOST_AUTO_TEST_SUITE_END()
