// The algorithm db of measured cuDNN convolution choices (core/ops/conv2d_algorithm_db.h):
// its line format, a corrupt file, merging writers, and the process's table (checkpoint over db
// over nothing). Pure host code, checked without a GPU.
#include <unistd.h>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "tests/support/process.h"

using namespace alloy;
using cuda::ConvAlgorithm;
using cuda::ConvAlgorithmKey;
using cuda::ConvAlgorithmTable;

namespace {

// resnet18's [256,512,4,4] 3x3 convolution, stride 1, padding 1.
ConvAlgorithmKey resnet_key(const std::string& direction) {
  return {
      "NVIDIA H200", 90100, DType::f32, {256, 512, 4, 4, 512, 3, 3, 4, 4, {1, 1, 1, 1}}, direction};
}

// LeNet's first convolution in fp16: [8,1,28,28], 6 filters 5x5, stride 1, padding 2.
ConvAlgorithmKey lenet_key(const std::string& direction) {
  return {
      "NVIDIA H200", 90100, DType::f16, {8, 1, 28, 28, 6, 5, 5, 28, 28, {1, 1, 2, 2}}, direction};
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Points the process's db at a fresh directory (and forgets the table) for one test.
struct FreshCache {
  FreshCache() {
    setenv("ALLOY_CACHE_DIR", dir.path().c_str(), 1);
    cuda::reset_conv_algorithms();
  }
  ~FreshCache() {
    cuda::reset_conv_algorithms();
    unsetenv("ALLOY_CACHE_DIR");
  }
  std::string db() const { return dir.file("conv_algorithms.txt"); }
  test::TempDir dir;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(conv2d_algorithm_db)

BOOST_AUTO_TEST_CASE(a_choice_is_one_tab_separated_line_that_parses_back) {
  const std::string key = cuda::conv_algorithm_key_text(resnet_key("forward"));
  BOOST_TEST(key == "NVIDIA H200\t90100\tf32\t256,512,4,4\t512,512,3,3\t1,1\t1,1\tnchw\tforward");
  // Tabs or line breaks in a GPU's name would break the line: spaces instead.
  ConvAlgorithmKey odd = lenet_key("data");
  odd.gpu = "odd\tgpu\nname";
  BOOST_TEST(cuda::conv_algorithm_key_text(odd).rfind("odd gpu name\t90100\tf16\t8,1,28,28\t"
                                                      "6,1,5,5\t1,1\t2,2\tnchw\tdata",
                                                      0) == 0u);

  // A channels-last plan is a key of its own.
  ConvAlgorithmKey channels_last = resnet_key("forward");
  channels_last.geometry.layout = Layout::nhwc;
  const std::string nhwc_key = cuda::conv_algorithm_key_text(channels_last);
  BOOST_TEST(nhwc_key ==
             "NVIDIA H200\t90100\tf32\t256,512,4,4\t512,512,3,3\t1,1\t1,1\tnhwc\tforward");

  const ConvAlgorithmTable table = {{key, {7, 3}},
                                    {nhwc_key, {1, 1}},
                                    {cuda::conv_algorithm_key_text(lenet_key("filter")), {1, 1}}};
  const std::string text = cuda::format_conv_algorithms(table);
  BOOST_TEST(text.find(key + "\t7\t3\n") != std::string::npos);
  BOOST_TEST(cuda::parse_conv_algorithms(text) == table);
}

// f32 data allowed TF32 (--allow-tf32) has tensor-op algorithms to choose from too: a key of its
// own, "tf32" in the dtype field, which parses back as such.
BOOST_AUTO_TEST_CASE(a_tf32_plan_is_a_key_of_its_own) {
  ConvAlgorithmKey tf32 = resnet_key("forward");
  tf32.tf32 = true;
  const std::string key = cuda::conv_algorithm_key_text(tf32);
  BOOST_TEST(key == "NVIDIA H200\t90100\ttf32\t256,512,4,4\t512,512,3,3\t1,1\t1,1\tnchw\tforward");
  const std::string plain = cuda::conv_algorithm_key_text(resnet_key("forward"));
  const ConvAlgorithmTable table = {{key, {1, 1}}, {plain, {1, 3}}};
  BOOST_TEST(cuda::parse_conv_algorithms(cuda::format_conv_algorithms(table)) == table);
  // Half data is never "tf32".
  ConvAlgorithmKey half = lenet_key("forward");
  half.tf32 = true;
  BOOST_TEST(cuda::conv_algorithm_key_text(half) ==
             cuda::conv_algorithm_key_text(lenet_key("forward")));
}

BOOST_AUTO_TEST_CASE(comments_and_blank_lines_are_skipped_and_a_bad_line_is_named) {
  const std::string good = cuda::conv_algorithm_key_text(resnet_key("data")) + "\t1\t3";
  const std::vector<std::string> bad = {
      "too\tfew\tfields",
      "NVIDIA H200\tx\tf32\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t1\t3",    // version
      "NVIDIA H200\t1\tf99\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t1\t3",    // dtype
      "NVIDIA H200\t1\tf32\t1,1,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t1\t3",      // x shape
      "NVIDIA H200\t1\tf32\t1,2,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t1\t3",    // channels
      "NVIDIA H200\t1\tf32\t1,1,4,4\t1,1,3,3\t0,1\t1,1\tnchw\tforward\t1\t3",    // stride 0
      "NVIDIA H200\t1\tf32\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnwhc\tforward\t1\t3",    // layout
      "NVIDIA H200\t1\tf32\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tsideways\t1\t3",   // direction
      "NVIDIA H200\t1\tf32\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t-1\t3",   // algorithm
      "NVIDIA H200\t1\tf32\t1,1,4,4\t1,1,3,3\t1,1\t1,1\tnchw\tforward\t1\t3\t",  // extra field
  };
  for (const std::string& line : bad) {
    const std::string text = "# header\n\n" + good + "\n" + line + "\n";
    std::string problem;
    const ConvAlgorithmTable table = cuda::parse_conv_algorithms(text, &problem);
    BOOST_TEST_INFO("line: " << line);
    BOOST_TEST(table.size() == 1u);
    BOOST_TEST(problem.rfind("line 4: ", 0) == 0u, problem);
    BOOST_CHECK_THROW(cuda::parse_conv_algorithms(text), Error);
  }
  std::string problem;
  BOOST_TEST(cuda::parse_conv_algorithms("# only a comment\n\n", &problem).empty());
  BOOST_TEST(problem.empty());
}

BOOST_AUTO_TEST_CASE(the_db_path_follows_alloy_cache_dir_then_xdg_then_home) {
  const auto keep = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  const std::string cache = keep("ALLOY_CACHE_DIR"), xdg = keep("XDG_CACHE_HOME"),
                    home = keep("HOME");
  setenv("ALLOY_CACHE_DIR", "/a/cache", 1);
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  setenv("HOME", "/h", 1);
  BOOST_TEST(cuda::conv_algorithm_db_path() == "/a/cache/conv_algorithms.txt");
  unsetenv("ALLOY_CACHE_DIR");
  BOOST_TEST(cuda::conv_algorithm_db_path() == "/x/cache/alloy/conv_algorithms.txt");
  unsetenv("XDG_CACHE_HOME");
  BOOST_TEST(cuda::conv_algorithm_db_path() == "/h/.cache/alloy/conv_algorithms.txt");
  const auto restore = [](const char* name, const std::string& value) {
    if (value.empty()) {
      unsetenv(name);
    } else {
      setenv(name, value.c_str(), 1);
    }
  };
  restore("ALLOY_CACHE_DIR", cache);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

BOOST_AUTO_TEST_CASE(a_missing_db_is_empty_and_a_corrupt_one_keeps_its_good_lines) {
  test::TempDir dir;
  BOOST_TEST(cuda::read_conv_algorithm_db(dir.file("none.txt")).empty());
  const std::string key = cuda::conv_algorithm_key_text(resnet_key("filter"));
  write_file(dir.file("db.txt"), key + "\t5\t3\n\x01\x02garbage\xff\n" + key.substr(0, 20));
  const ConvAlgorithmTable table = cuda::read_conv_algorithm_db(dir.file("db.txt"));
  BOOST_TEST(table.size() == 1u);
  BOOST_TEST((table.at(key) == ConvAlgorithm{5, 3}));
  // A directory where the file should be: unreadable, a warning, no choices, no crash.
  std::filesystem::create_directory(dir.file("dir.txt"));
  BOOST_TEST(cuda::read_conv_algorithm_db(dir.file("dir.txt")).empty());
}

BOOST_AUTO_TEST_CASE(merging_adds_new_keys_keeps_existing_ones_and_drops_corrupt_lines) {
  test::TempDir dir;
  const std::string db = dir.file("sub/dir/conv_algorithms.txt");
  const std::string a = cuda::conv_algorithm_key_text(resnet_key("forward"));
  const std::string b = cuda::conv_algorithm_key_text(resnet_key("data"));
  cuda::merge_into_conv_algorithm_db(db, {{a, {7, 3}}});
  BOOST_TEST(read_file(db).find(a + "\t7\t3\n") != std::string::npos);
  BOOST_TEST(read_file(db).rfind("# ", 0) == 0u);  // a header says what the file is

  write_file(db, read_file(db) + "not a line\n");
  cuda::merge_into_conv_algorithm_db(db, {{a, {1, 3}}, {b, {4, 3}}});
  const ConvAlgorithmTable expected = {{a, {7, 3}}, {b, {4, 3}}};  // a: the first writer's
  std::string problem;
  BOOST_TEST(cuda::parse_conv_algorithms(read_file(db), &problem) == expected);
  BOOST_TEST(problem.empty(), problem);  // the corrupt line is gone
  BOOST_TEST(!std::filesystem::exists(db + ".tmp." + std::to_string(getpid())));
}

BOOST_AUTO_TEST_CASE(concurrent_writers_lose_nothing) {
  test::TempDir dir;
  const std::string db = dir.file("conv_algorithms.txt");
  constexpr int kWriters = 8, kEach = 10;
  std::vector<std::thread> writers;
  ConvAlgorithmTable expected;
  for (int w = 0; w < kWriters; ++w) {
    ConvAlgorithmTable mine;
    for (int i = 0; i < kEach; ++i) {
      ConvAlgorithmKey key = resnet_key("forward");
      key.geometry.batch = 1 + w * kEach + i;
      mine[cuda::conv_algorithm_key_text(key)] = {i % 8, w % 4};
    }
    expected.insert(mine.begin(), mine.end());
    writers.emplace_back([db, mine] {
      for (const auto& entry : mine)
        cuda::merge_into_conv_algorithm_db(db, {entry});
    });
  }
  for (std::thread& writer : writers)
    writer.join();
  BOOST_TEST(cuda::parse_conv_algorithms(read_file(db)) == expected);
}

BOOST_AUTO_TEST_CASE(the_table_takes_the_checkpoint_over_the_db_over_nothing) {
  FreshCache cache;
  const ConvAlgorithmKey forward = resnet_key("forward"), data = resnet_key("data"),
                         filter = resnet_key("filter");
  BOOST_TEST(!cuda::known_conv_algorithm(forward).has_value());
  BOOST_TEST(cuda::conv_algorithms_in_use().empty());

  // A measured choice: in the db at once, and in use.
  cuda::record_conv_algorithm(forward, {7, 3});
  cuda::record_conv_algorithm(data, {1, 3});
  const std::string forward_line = cuda::conv_algorithm_key_text(forward) + "\t7\t3\n";
  BOOST_TEST(read_file(cache.db()).find(forward_line) != std::string::npos);
  BOOST_TEST(cuda::conv_algorithms_in_use() ==
             cuda::format_conv_algorithms({{cuda::conv_algorithm_key_text(forward), {7, 3}},
                                           {cuda::conv_algorithm_key_text(data), {1, 3}}}));

  // A new process: the db's choices, in use only once looked up.
  cuda::reset_conv_algorithms();
  BOOST_TEST(cuda::conv_algorithms_in_use().empty());
  BOOST_TEST((cuda::known_conv_algorithm(forward).value() == ConvAlgorithm{7, 3}));
  BOOST_TEST(cuda::conv_algorithms_in_use() == forward_line);

  // A resumed checkpoint's choices win over the db's.
  cuda::reset_conv_algorithms();
  const std::string checkpoint =
      cuda::format_conv_algorithms({{cuda::conv_algorithm_key_text(forward), {2, 3}},
                                    {cuda::conv_algorithm_key_text(filter), {5, 3}}});
  cuda::load_conv_algorithms(checkpoint, "checkpoint x.ckpt");
  BOOST_TEST(cuda::conv_algorithms_in_use() == checkpoint);
  BOOST_TEST((cuda::known_conv_algorithm(forward).value() == ConvAlgorithm{2, 3}));
  BOOST_TEST((cuda::known_conv_algorithm(filter).value() == ConvAlgorithm{5, 3}));
  BOOST_TEST((cuda::known_conv_algorithm(data).value() == ConvAlgorithm{1, 3}));
  BOOST_TEST(!cuda::known_conv_algorithm(lenet_key("forward")).has_value());

  BOOST_CHECK_EXCEPTION(cuda::load_conv_algorithms("bad line\n", "checkpoint y.ckpt"), Error,
                        [](const Error& error) {
                          const std::string message = error.what();
                          return message.find("checkpoint y.ckpt") != std::string::npos &&
                                 message.find("line 1") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(a_choice_another_process_recorded_first_is_the_one_kept) {
  FreshCache cache;
  const ConvAlgorithmKey forward = resnet_key("forward");
  const std::string key = cuda::conv_algorithm_key_text(forward);
  BOOST_TEST(!cuda::known_conv_algorithm(forward).has_value());     // this process read the db
  cuda::merge_into_conv_algorithm_db(cache.db(), {{key, {4, 3}}});  // then a rank beside it
  BOOST_TEST((cuda::record_conv_algorithm(forward, {7, 3}) == ConvAlgorithm{4, 3}));
  BOOST_TEST(cuda::conv_algorithms_in_use() == key + "\t4\t3\n");
  BOOST_TEST((cuda::known_conv_algorithm(forward).value() == ConvAlgorithm{4, 3}));
  // Where the db cannot be written, the process's own choice.
  const ConvAlgorithmTable mine = {{key, {7, 3}}};
  BOOST_TEST(cuda::merge_into_conv_algorithm_db("/proc/no/such/dir/db.txt", mine) == mine);
}

BOOST_AUTO_TEST_CASE(a_choice_measured_under_a_profiler_is_used_but_not_saved) {
  FreshCache cache;
  const ConvAlgorithmKey forward = resnet_key("forward");
  const std::string key = cuda::conv_algorithm_key_text(forward);
  setenv("CUDA_INJECTION64_PATH", "/opt/nsight/libInjection.so", 1);
  BOOST_TEST((cuda::record_conv_algorithm(forward, {7, 3}) == ConvAlgorithm{7, 3}));
  unsetenv("CUDA_INJECTION64_PATH");
  BOOST_TEST(cuda::conv_algorithms_in_use() == key + "\t7\t3\n");
  BOOST_TEST((cuda::known_conv_algorithm(forward).value() == ConvAlgorithm{7, 3}));
  BOOST_TEST(!std::filesystem::exists(cache.db()));
  // Without the profiler the same choice is saved.
  BOOST_TEST((cuda::record_conv_algorithm(forward, {7, 3}) == ConvAlgorithm{7, 3}));
  BOOST_TEST(cuda::read_conv_algorithm_db(cache.db()).count(key) == 1u);
}

BOOST_AUTO_TEST_CASE(the_setting_is_heuristic_until_set) {
  BOOST_TEST((cuda::conv_algorithm_choice() == cuda::ConvAlgorithmChoice::heuristic));
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::measured);
  BOOST_TEST((cuda::conv_algorithm_choice() == cuda::ConvAlgorithmChoice::measured));
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::heuristic);
}

BOOST_AUTO_TEST_SUITE_END()
