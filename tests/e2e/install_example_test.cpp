// Alloy as a library: `cmake --install` of this build tree gives a package that an out-of-tree
// project finds with find_package(Alloy) alone, and on it examples/custom_model (a network of its
// own, O2, dynamic loss scaling) trains epoch 1, checkpoints, resumes for epoch 2 and ends with
// the params_digest of 2 epochs straight; memory measurement knows its registered model. Every
// #include of the training library's sources, apps/train/*.cpp, resolves against the installed
// headers alone (Alloy::train), so the installed surface is all the library uses, and nothing a
// library user reads (apps/train/, examples/, docs/api.md) includes the command's own headers
// (apps/cli/). The code docs/api.md and the README show is the example's, verbatim.
//
// Everything happens in a fresh folder of this build tree (not /tmp), so that ccache, whose
// base_dir covers the checkouts, serves the example's one compiled file on a rerun.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"

using namespace alloy::test;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ALLOY_SOURCE_DIR;
const std::string kCmake = ALLOY_CMAKE_COMMAND;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  BOOST_REQUIRE_MESSAGE(in, "cannot read " << path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs a step and fails the test with everything it printed unless it succeeds.
ProcessResult run_step(const std::string& what, const std::string& program,
                       const std::vector<std::string>& arguments) {
  ProcessResult result = run_process(program, arguments);
  BOOST_REQUIRE_MESSAGE(result.exit_code == 0, what << " failed with status " << result.exit_code
                                                    << "\n--- stdout\n"
                                                    << result.output << "\n--- stderr\n"
                                                    << result.errors);
  return result;
}

// A fresh folder for one test case, under this build tree.
fs::path fresh_folder(const std::string& name) {
  const fs::path folder = fs::path(ALLOY_BUILD_DIR) / "tests" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

void install_into(const fs::path& prefix) {
  run_step("cmake --install", kCmake, {"--install", ALLOY_BUILD_DIR, "--prefix", prefix.string()});
  // The package must not point back into this checkout or its build tree.
  for (const auto& entry : fs::directory_iterator(prefix / "lib" / "cmake" / "Alloy")) {
    const std::string text = read_file(entry.path());
    BOOST_CHECK_MESSAGE(text.find(kSource) == std::string::npos,
                        entry.path() << " names the source tree " << kSource);
  }
}

// Configures (a fresh build folder, only the prefix to find Alloy in) and builds a project.
void configure_and_build(const fs::path& source, const fs::path& build, const fs::path& prefix) {
  std::vector<std::string> configure = {"-S",
                                        source.string(),
                                        "-B",
                                        build.string(),
                                        "-G",
                                        ALLOY_CMAKE_GENERATOR,
                                        "-DCMAKE_BUILD_TYPE=Release",
                                        "-DCMAKE_PREFIX_PATH=" + prefix.string(),
                                        "-DCMAKE_CXX_COMPILER=" ALLOY_CXX_COMPILER};
  if (!std::string(ALLOY_CXX_LAUNCHER).empty()) {
    configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" ALLOY_CXX_LAUNCHER);
  }
  run_step("configuring " + source.string(), kCmake, configure);
  const std::string cache = read_file(build / "CMakeCache.txt");
  BOOST_CHECK_MESSAGE(
      cache.find("Alloy_DIR:PATH=" + (prefix / "lib/cmake/Alloy").string()) != std::string::npos,
      "find_package(Alloy) did not take the installed package");
  run_step("building " + source.string(), kCmake, {"--build", build.string()});
}

// Fails when a file under `folder` (depfiles, preprocessed sources) names one of this
// checkout's header folders: then something was compiled against the source tree.
void check_no_source_headers(const fs::path& folder) {
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !(name.size() > 2 && (name.rfind(".d") == name.size() - 2 ||
                                                          name.rfind(".o") == name.size() - 2))) {
      continue;
    }
    const std::string text = read_file(entry.path());
    for (const char* dir : {"/core/", "/amp/", "/parallel/", "/apps/"}) {
      BOOST_CHECK_MESSAGE(text.find(kSource + dir) == std::string::npos,
                          entry.path()
                              << " includes a header of the source tree " << kSource << dir);
    }
  }
}

std::string line_starting(const std::string& output, const std::string& start) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) return line;
  }
  return "";
}

// The ```LANG blocks of a Markdown file.
std::vector<std::string> code_blocks(const std::string& markdown, const std::string& lang) {
  std::vector<std::string> blocks;
  const std::regex block("```" + lang + "\n([\\s\\S]*?)```");
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), block), end; it != end; ++it)
    blocks.push_back((*it)[1].str());
  return blocks;
}

}  // namespace

BOOST_AUTO_TEST_CASE(example_trains_checkpoints_and_resumes_on_the_installed_package) {
  const fs::path work = fresh_folder("install_example");
  const fs::path prefix = work / "prefix";
  install_into(prefix);

  // The example, copied out of the checkout: nothing of the source tree is at hand.
  fs::copy(kSource + "/examples/custom_model", work / "src", fs::copy_options::recursive);
  configure_and_build(work / "src", work / "build", prefix);
  check_no_source_headers(work / "build");
  const std::string program = (work / "build" / "custom_model").string();

  const ProcessResult resumed =
      run_step("custom_model (epoch 1, checkpoint, resume, epoch 2)", program,
               {"--device", "cpu", "--threads", "2", "--checkpoint-dir", (work / "ckpt").string()});
  BOOST_TEST_MESSAGE("custom_model:\n" << resumed.output);
  const ProcessResult straight = run_step("custom_model --straight", program,
                                          {"--device", "cpu", "--threads", "2", "--straight"});
  BOOST_TEST_MESSAGE("custom_model --straight:\n" << straight.output);

  BOOST_TEST(!line_starting(resumed.output, "saved ").empty());
  BOOST_TEST(line_starting(resumed.output, "resumed from ").find("at step 20") !=
             std::string::npos);
  BOOST_TEST(line_starting(straight.output, "resumed from ").empty());
  // O2's figures: the half model with fp32 masters was measured, O0 has no masters.
  const std::string o0 = line_starting(resumed.output, "memory O0 recompute none ");
  const std::string o2 = line_starting(resumed.output, "memory O2 recompute none ");
  BOOST_TEST(o0.find("master_parameters_bytes 0 ") != std::string::npos, o0);
  BOOST_TEST(!o2.empty());
  BOOST_TEST(o2.find("master_parameters_bytes 0 ") == std::string::npos, o2);
  // Bitwise the same weights, and the same epoch 2, loss scale included.
  const std::string digest = line_starting(resumed.output, "params_digest ");
  BOOST_TEST_REQUIRE(digest.size() == std::string("params_digest ").size() + 16);
  BOOST_TEST(digest == line_starting(straight.output, "params_digest "));
  BOOST_TEST(line_starting(resumed.output, "epoch 2 ") ==
             line_starting(straight.output, "epoch 2 "));
  BOOST_TEST(line_starting(resumed.output, "epoch 2 ").find("loss_scale") != std::string::npos);

  // Its SkipBlock says it is a block: recomputation finds it (a model without one is an error),
  // and keeps no more activations than training that keeps them all.
  const std::string blocks = line_starting(resumed.output, "memory O2 recompute blocks ");
  BOOST_TEST_REQUIRE(!blocks.empty());
  const auto activations = [](const std::string& line) {
    const std::string key = "activations_bytes ";
    return std::stoll(line.substr(line.find(key) + key.size()));
  };
  BOOST_TEST(activations(blocks) <= activations(o2));
}

BOOST_AUTO_TEST_CASE(the_library_includes_only_installed_headers) {
  const fs::path work = fresh_folder("install_surface");
  const fs::path prefix = work / "prefix";
  install_into(prefix);
  // The #include lines of every source of the training library (apps/train/*.cpp), with the #if
  // lines around them, in one file preprocessed (-E: no compiling) on Alloy::train alone: one
  // pass over the whole include tree, in a folder where no header of the checkout lies.
  const std::regex directive(R"(^\s*#\s*(include|if|ifdef|ifndef|elif|else|endif)\b.*)");
  std::ostringstream includes;
  int sources = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/apps/train")) {
    if (entry.path().extension() != ".cpp") continue;
    ++sources;
    includes << "// " << entry.path().filename().string() << "\n";
    std::istringstream text(read_file(entry.path()));
    for (std::string line; std::getline(text, line);) {
      if (std::regex_match(line, directive)) includes << line << "\n";
    }
  }
  BOOST_TEST_REQUIRE(sources > 10);
  fs::create_directories(work / "src");
  std::ofstream(work / "src" / "command_includes.cpp") << includes.str();
  std::ofstream(work / "src" / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.24)\n"
         "project(alloy_surface LANGUAGES CXX)\n"
         "set(CMAKE_CXX_STANDARD 17)\n"
         "find_package(Alloy CONFIG REQUIRED)\n"
         "add_library(surface OBJECT command_includes.cpp)\n"
         "target_link_libraries(surface PRIVATE Alloy::train)\n"
         "target_compile_options(surface PRIVATE -E)\n";
  configure_and_build(work / "src", work / "build", prefix);
  check_no_source_headers(work / "build");
}

BOOST_AUTO_TEST_CASE(library_code_and_docs_include_no_command_header) {
  std::vector<fs::path> files = {kSource + "/docs/api.md"};
  for (const char* dir : {"/apps/train", "/examples"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kSource + dir)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  }
  BOOST_TEST_REQUIRE(files.size() > 20u);
  const std::regex command_header(R"(#\s*include\s*[<"]apps/cli/)");
  for (const fs::path& file : files) {
    BOOST_TEST(!std::regex_search(read_file(file), command_header),
               file << " includes a header of the command (apps/cli/)");
  }
}

BOOST_AUTO_TEST_CASE(docs_show_the_example_as_it_is) {
  const std::string source = read_file(kSource + "/examples/custom_model/custom_model.cpp");
  const std::string cmake = read_file(kSource + "/examples/custom_model/CMakeLists.txt");
  for (const char* doc : {"/docs/api.md", "/README.md"}) {
    const std::string markdown = read_file(kSource + doc);
    const std::vector<std::string> cpp = code_blocks(markdown, "cpp");
    BOOST_TEST_MESSAGE(doc << ": " << cpp.size() << " C++ blocks");
    BOOST_TEST(!cpp.empty(), doc << " shows no code of the example");
    for (const std::string& block : cpp) {
      BOOST_TEST(source.find(block) != std::string::npos,
                 doc << " shows C++ that is not in examples/custom_model/custom_model.cpp:\n"
                     << block);
    }
    for (const std::string& block : code_blocks(markdown, "cmake")) {
      BOOST_TEST(cmake.find(block) != std::string::npos,
                 doc << " shows CMake that is not in examples/custom_model/CMakeLists.txt:\n"
                     << block);
    }
  }
}
