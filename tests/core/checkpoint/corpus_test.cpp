// Replays tests/data/checkpoint_corpus through the reader: files named valid-* load, every
// other file (the damaged cases of damaged_files.h, and inputs the fuzzer once crashed on)
// fails with an alloy::Error naming it, never with a crash or another exception type.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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
