// Replays tests/data/checkpoint_corpus through the reader: files named valid-* load, every
// other file (the damaged cases of damaged_files.h, and inputs the fuzzer once crashed on)
// fails with an alloy::Error naming it, never with a crash or another exception type.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <typeinfo>

#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "tests/core/checkpoint/damaged_files.h"

using namespace alloy;
using namespace alloy::checkpoint;
using namespace alloy::checkpoint::test;

namespace {

const std::string kCorpus = std::string(ALLOY_SOURCE_DIR) + "/tests/data/checkpoint_corpus";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs `read` and returns the alloy::Error's message, "" when it succeeded; any other
// exception fails the test.
template <class Read>
std::string outcome_of(Read read) {
  try {
    read();
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    BOOST_ERROR("threw " << typeid(error).name() << " instead of alloy::Error: " << error.what());
    return "(wrong exception type)";
  } catch (...) {
    BOOST_ERROR("threw something that is not even a std::exception");
    return "(wrong exception type)";
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(corpus)

BOOST_AUTO_TEST_CASE(every_corpus_file_loads_or_fails_cleanly) {
  std::map<std::string, std::string> reasons;
  for (const DamagedFile& damaged : damaged_files())
    reasons[damaged.name] = damaged.reason;

  const std::vector<std::string> files = corpus_files();
  int valid = 0;
  for (const std::string& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    BOOST_TEST_CONTEXT("corpus file " << name) {
      const std::string message = outcome_of([&] { read_checkpoint(path); });
      if (name.rfind("valid-", 0) == 0) {
        BOOST_TEST(message.empty(), message);
        ++valid;
      } else {
        BOOST_TEST(message.find(path) != std::string::npos, message);
        if (reasons.count(name) != 0) {
          BOOST_TEST(message.find(reasons[name]) != std::string::npos,
                     message << " lacks: " << reasons[name]);
        }
      }
      // The fuzz harness's two entry points: the file image, and the image as a bare payload.
      const std::string image = read_bytes(path);
      outcome_of([&] { decode_checkpoint(image, name); });
      // A length is checked before anything is allocated for it: an allocation failure means
      // the reader asked for more memory than the input could justify.
      const std::string bare = outcome_of([&] { deserialize_state(image); });
      BOOST_TEST(bare.find("bad_alloc") == std::string::npos, bare);
      BOOST_TEST(bare.find("length_error") == std::string::npos, bare);
    }
    reasons.erase(name);
  }
  BOOST_TEST(valid >= 1, "the corpus has no valid-* file");
  for (const auto& missing : reasons) {
    BOOST_ERROR("the corpus lacks " << missing.first << "; run tools/fuzz/make_corpus.sh");
  }
}

// The valid files hold the records their writers gave them (the LeNet and GPT files were
// written by `alloy train` before the records were typed, see
// tests/apps/corpus_checkpoints_test.cpp), and each re-serializes to its own payload, byte for
// byte.
BOOST_AUTO_TEST_CASE(valid_files_hold_their_records_and_reserialize_to_their_bytes) {
  for (const std::string& path : corpus_files()) {
    const std::string name = std::filesystem::path(path).filename().string();
    if (name.rfind("valid-", 0) != 0) continue;
    BOOST_TEST_CONTEXT("corpus file " << name) {
      const CheckpointState state = read_checkpoint(path);
      BOOST_TEST((serialize_state(state) == read_bytes(path).substr(kHeaderBytes)));
      BOOST_TEST(state.extra.empty());
    }
  }

  const CheckpointState small = read_checkpoint(kCorpus + "/valid-small.ckpt");
  BOOST_TEST(extra_entries(small).empty());

  const CheckpointState lenet = read_checkpoint(kCorpus + "/valid-lenet-o2-extras.ckpt");
  const RunRecord& run = lenet.run;
  BOOST_TEST((run.dataset == std::optional<std::string>("synthetic")));
  BOOST_TEST((run.data_dir == std::optional<std::string>("/usr/share/datasets/fashion-mnist")));
  BOOST_TEST((run.threads == std::optional<std::int64_t>(2)));
  BOOST_TEST((run.lr_schedule == std::optional<std::string>("cosine")));
  BOOST_TEST((run.warmup_steps == std::optional<std::int64_t>(1)));
  BOOST_TEST((run.min_lr == std::optional<double>(0.0)));
  BOOST_TEST((run.accumulation_steps == std::optional<std::int64_t>(1)));
  BOOST_TEST((run.clip_grad_norm == std::optional<double>(1.0)));
  BOOST_TEST((run.recompute == std::optional<std::string>("none")));
  BOOST_TEST((run.ema_decay == std::optional<double>(0.0)));
  BOOST_TEST((run.ema_warmup == std::optional<bool>(false)));
  BOOST_TEST((run.allow_tf32 == std::optional<bool>(false)));
  BOOST_TEST((run.stochastic_rounding == std::optional<bool>(false)));
  BOOST_TEST((run.label_smoothing == std::optional<double>(0.1)));
  BOOST_TEST((run.image_size == std::optional<int>(0)));
  BOOST_TEST((run.channels == std::optional<int>(0)));
  BOOST_TEST((run.num_classes == std::optional<int>(0)));
  BOOST_TEST((run.synthetic_size == std::optional<int>(512)));
  BOOST_TEST((run.normalize == std::optional<std::string>("auto")));
  BOOST_TEST((run.augment == std::optional<std::string>("default")));
  BOOST_TEST(!run.conv_algorithms.has_value());  // a CPU run
  const EpochRecord& epoch = lenet.epoch_sums;
  BOOST_TEST((epoch.images == std::optional<std::int64_t>(192)));
  BOOST_TEST((epoch.correct == std::optional<std::int64_t>(19)));
  BOOST_TEST_REQUIRE(epoch.loss_sum.has_value());
  BOOST_TEST(*epoch.loss_sum > 0.0);
  BOOST_TEST_REQUIRE(epoch.clip_norm_sum.has_value());
  BOOST_TEST(*epoch.clip_norm_sum > 0.0);
  BOOST_TEST((epoch.clip_finite_steps == std::optional<std::int64_t>(3)));
  BOOST_TEST((epoch.clip_clipped_steps == std::optional<std::int64_t>(0)));
  BOOST_TEST((lenet.scaler_record.overflow_streak == std::optional<std::int64_t>(0)));
  BOOST_TEST(!lenet.gpt.config.has_value());
  BOOST_TEST(!lenet.gpt.vocabulary.has_value());

  const CheckpointState gpt = read_checkpoint(kCorpus + "/valid-gpt-tiny.ckpt");
  BOOST_TEST((gpt.gpt.config == std::optional<std::string>("1 2 32 16 64 0 1")));
  BOOST_TEST((gpt.gpt.vocabulary == std::optional<std::string>("")));
  BOOST_TEST(!gpt.run.dataset.has_value());
  BOOST_TEST(!gpt.epoch_sums.images.has_value());
  BOOST_TEST(!gpt.scaler_record.overflow_streak.has_value());
  BOOST_TEST(extra_entries(gpt).size() == 2u);
}

// Writes the corpus from damaged_files.h (tools/fuzz/make_corpus.sh runs it); disabled so
// that ctest never rewrites the source tree.
BOOST_AUTO_TEST_CASE(regenerate, *boost::unit_test::disabled()) {
  std::filesystem::create_directories(kCorpus);
  std::vector<DamagedFile> files = damaged_files();
  files.push_back({"valid-small.ckpt", valid_image(), ""});
  for (const DamagedFile& file : files) {
    std::ofstream out(kCorpus + "/" + file.name, std::ios::binary | std::ios::trunc);
    out.write(file.image.data(), static_cast<std::streamsize>(file.image.size()));
    BOOST_TEST_REQUIRE(out.good(), "cannot write " << file.name);
  }
  BOOST_TEST_MESSAGE("wrote " << files.size() << " files to " << kCorpus);
}

BOOST_AUTO_TEST_SUITE_END()
